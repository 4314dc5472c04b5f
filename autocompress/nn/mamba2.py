"""The Mamba2 mixer (NemotronH) as plain torch functions: exact, differentiable, CPU.

Same math as transformers' ``NemotronHMamba2Mixer`` without a cache (``torch_forward``) and as
vLLM's ``MambaMixer2``, written from the SSD formulation (Dao & Gu 2024, "Transformers are SSMs",
the chunked "ssd_minimal" algorithm):

    zxbcdt = in_proj(h)                        z | x B C | dt   sizes I | I + 2GN | H  (I = H P)
    x, B, C = silu(causal depthwise conv(x B C)) (kernel K, bias)
    dt = clamp(softplus(dt + dt_bias), min=time_step_min);   A = -exp(A_log)
    state_t = exp(dt_t A) state_{t-1} + dt_t B_t x_t^T;      y_t = C_t state_t + D x_t   (per head)
    y = grouped_rmsnorm(y * silu(z)) * norm_weight  (G groups of I/G channels)
    out = out_proj(y)

Head h belongs to group h // (H/G) and reads that group's B and C. ``ssd`` evaluates the
recurrence in chunks: quadratic (attention-like) inside a chunk, a linear recurrence across chunk
boundaries, so sequences of any length cost O(T * chunk) memory, not O(T^2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64


def segsum(x: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T, T): out[i, j] = x[j+1] + ... + x[i] for j <= i, -inf above the diagonal
    (the log of the decay from position j to position i). Cumulative sums of masked copies, not
    differences of one cumulative sum: no cancellation between large partial sums."""
    T = x.shape[-1]
    x = x[..., None].expand(*x.shape, T)
    below = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=-1)
    out = torch.cumsum(x.masked_fill(~below, 0), dim=-2)
    return out.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device)), -torch.inf)


def ssd(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
        chunk: int = CHUNK) -> torch.Tensor:
    """The selective scan without the D skip: x (b, t, h, p), dt (b, t, h), A (h,), B / C (b, t, g, n)
    -> y (b, t, h, p), from a zero initial state."""
    b, t, h, p = x.shape
    rep = h // B.shape[2]
    B = B.repeat_interleave(rep, dim=2)
    C = C.repeat_interleave(rep, dim=2)
    xd = x * dt[..., None]
    a = dt * A  # (b, t, h): log-decay per step
    pad = (-t) % chunk
    if pad:
        xd, B, C = (F.pad(v, (0, 0, 0, 0, 0, pad)) for v in (xd, B, C))
        a = F.pad(a, (0, 0, 0, pad))
    n_c = (t + pad) // chunk
    xd, B, C = (v.reshape(b, n_c, chunk, h, -1) for v in (xd, B, C))
    a = a.reshape(b, n_c, chunk, h).permute(0, 3, 1, 2)  # (b, h, c, l)
    a_cum = torch.cumsum(a, dim=-1)
    decay = torch.exp(segsum(a))  # (b, h, c, l, s)
    scores = torch.einsum("bclhn,bcshn->bhcls", C, B) * decay
    y_diag = torch.einsum("bhcls,bcshp->bclhp", scores, xd)
    to_end = torch.exp(a_cum[..., -1:] - a_cum)  # (b, h, c, l): decay to the chunk's end
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, to_end, xd)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    across = torch.exp(segsum(F.pad(a_cum[..., -1], (1, 0))))  # (b, h, c+1, c+1)
    states = torch.einsum("bhzc,bchpn->bzhpn", across, states)[:, :-1]  # the state entering each chunk
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, torch.exp(a_cum))
    return (y_diag + y_off).reshape(b, n_c * chunk, h, p)[:, :t]


def gated_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """transformers' ``Zamba2RMSNormGated`` (norm after the gate): RMS over each group's channels."""
    g = y * F.silu(z)
    shape = g.shape
    g = g.reshape(*shape[:-1], groups, shape[-1] // groups)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return weight * g.reshape(shape)


def mixer(p: dict, h: torch.Tensor, heads: int, head_dim: int, groups: int, state: int, eps: float,
          dt_min: float, tap=None, layer: int = 0) -> torch.Tensor:
    """The whole mixer over the normed input h (b, t, d) -> (b, t, d). ``p``: this layer's
    ``in_proj``, ``conv_w`` (C, K), ``conv_b``, ``A_log``, ``D``, ``dt_bias``, ``ssm_norm``,
    ``out_proj``. ``tap("mamba_heads", layer, y)``: the normed gated output per head (b, t, H, P),
    what ``out_proj`` reads (head importance)."""
    b, t, _ = h.shape
    inner, gn = heads * head_dim, groups * state
    zxbcdt = h @ p["in_proj"].T
    z, xbc, dt = torch.split(zxbcdt, [inner, inner + 2 * gn, heads], dim=-1)
    k = p["conv_w"].shape[-1]
    xbc = F.conv1d(xbc.transpose(1, 2), p["conv_w"][:, None, :], p.get("conv_b"), padding=k - 1,
                   groups=xbc.shape[-1])[..., :t]
    xbc = F.silu(xbc.transpose(1, 2))
    x, Bm, Cm = torch.split(xbc, [inner, gn, gn], dim=-1)
    dt = torch.clamp(F.softplus(dt + p["dt_bias"]), min=dt_min)
    A = -torch.exp(p["A_log"].float())
    xh = x.reshape(b, t, heads, head_dim)
    y = ssd(xh, dt, A, Bm.reshape(b, t, groups, state), Cm.reshape(b, t, groups, state))
    y = (y + p["D"][:, None] * xh).reshape(b, t, inner)
    y = gated_norm(y, z, p["ssm_norm"], groups, eps)
    if tap:
        tap("mamba_heads", layer, y.reshape(b, t, heads, head_dim))
    return y @ p["out_proj"].T


__all__ = ["gated_norm", "mixer", "segsum", "ssd"]
