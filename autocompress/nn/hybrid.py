"""The functional decoder over the IR, one for every family (Llama, Mistral, DeciLM, Gemma 3,
Mixtral, Qwen2-MoE, Qwen3-MoE, NemotronH): one forward for teacher, importance probe (``tap``) and
supernet (``HybridMasks``).

Weights live in one **canonical** dict, the same for every family (the family packages under
``autocompress.families`` map their checkpoint names to it and back), with experts stacked::

    embed [V, d], norm_f [d], lm_head [V, d] (absent when tied)
    L{l}.mixer_norm, L{l}.ffn_norm [d]           pre-norms (NemotronH: the layer's one norm)
    L{l}.post_mixer_norm, L{l}.post_ffn_norm [d] post-norms (Gemma 3, ``arch.post_norms``)
    L{l}.q / k / v [n * hd, d], L{l}.o [d, H * hd]; L{l}.q_bias / k_bias / v_bias; L{l}.q_norm / k_norm [hd]
    L{l}.in_proj, conv_w [C, K], conv_b, A_log, D, dt_bias, ssm_norm, out_proj     (Mamba2, ``nn.mamba2``)
    L{l}.up / gate [I, d], L{l}.down [d, I]      dense MLP (gate only when gated)
    L{l}.router [E, d], router_bias [E]; e_up / e_gate [E, I, d], e_down [E, d, I];
    s_up / s_gate [Is, d], s_down [d, Is], s_router [1, d]                        (MoE, ``nn.moe``)

A block runs ``x += mixer(norm(x))`` then ``x += ffn(norm(x))`` for the sub-blocks it has
(Gemma 3: ``x += post_norm(mixer(norm(x)))``; its ``1 + w`` norms are stored as ``1 + w``, so one
RMSNorm serves every family; ``families.gemma3.forward`` holds the rest of its globals).

Masks (``HybridMasks``; ``search.supernet`` builds them from choice probabilities):

* ``hidden`` (d,) multiplies the residual stream after the embedding and every sub-block output, and
  RMSNorm divides the sum of squares by ``hidden_count`` instead of d. With a 0/1 prefix mask of d'
  ones and count d' this is exactly a model of width d' (pruned channels stay zero, linears see zeros
  in the pruned inputs, norms average over the kept channels).
* ``ffn[l]`` (I,) multiplies a dense FFN's intermediate act(gate) * up channel-wise before ``down``;
  the output is linear in it, so a probability-weighted sum of prefix indicators gives exactly the
  probability-weighted mixture of the narrower FFNs. A hard mask (no gradient, a prefix of ones)
  runs the sliced FFN, and an all-zero one skips it: the same result at the pruned model's cost.
* ``attn[l]``: options (weight, pool) whose attention outputs (before ``o``, which is linear) are
  summed with their weights; ``pool`` (k, K) mean-pools the layer's K KV heads into k (Minitron).
  RoPE rotates every head alike, so pooling rotated keys equals rotating pooled projections.
* ``moe[l]``: a tuple of (weight, experts kept) options whose routing weights are mixed
  (``nn.moe``); an empty tuple removes the FFN.

Taps ``tap(event, layer, *tensors)`` observe activations (importance): ``"norm", l, y`` for every
RMSNorm output (l = -1: the final norm); ``"heads", l, (B, T, H, hd)``; ``"ffn_act", l, (B, T, I)``;
``"attn"`` / ``"ffn"`` / ``"block", l, before, after`` for residual branches and whole layers;
``"mamba_heads"`` (``nn.mamba2``), ``"router"`` (l, routing weights (N, E)) and ``"expert"``
(``nn.moe.experts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from autocompress.ir import MLP, Architecture, Attention, Mamba2, MoE
from autocompress.nn import mamba2, moe


def pn(layer: int, name: str) -> str:
    return f"L{layer}.{name}"


# ---- pieces -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttnOption:
    weight: torch.Tensor | float  # scalar mixing weight
    pool: torch.Tensor | None  # (k, K) pooling of the layer's KV heads; None = keep them


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, count=None) -> torch.Tensor:
    """HF LlamaRMSNorm; ``count``: divide the sum of squares by it (masked hidden) instead of d."""
    ss = x.pow(2).mean(-1, keepdim=True) if count is None else x.pow(2).sum(-1, keepdim=True) / count
    return w * (x * torch.rsqrt(ss + eps))


def rope_tables(seq: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (seq, head_dim) of HF's default RoPE (inv_freq over even dims, halves concatenated)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    freqs = torch.arange(seq, dtype=torch.float32, device=device)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's rotary embedding of ``x`` (..., T, hd) with ``rope_tables``' cos and sin (halves rotated)."""
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def causal_attention(q, k, v, window: int | None) -> torch.Tensor:
    """Causal scaled dot-product attention (grouped KV heads), within a sliding ``window`` if given
    (HF: a query sees keys with ``q - kv < window``)."""
    T = q.shape[-2]
    if window is None or window >= T:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    i = torch.arange(T, device=q.device)
    allowed = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)


def pool_kv(x: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """(B, K, T, hd) -> (B, k, T, hd) with ``pool`` (k, K)."""
    return torch.einsum("jk,bktd->bjtd", pool, x)


def hard_prefix(mask: torch.Tensor | None) -> int | None:
    """k when ``mask`` is k ones then zeros and carries no gradient (a discrete choice), else None."""
    if mask is None or mask.requires_grad:
        return None
    k = int((mask != 0).sum())
    return k if bool((mask[:k] == 1).all()) else None


@dataclass(frozen=True)
class HybridConfig:
    """What the forward needs besides the weights: the IR (per-layer sizes) and the globals."""

    arch: Architecture
    eps: float = 1e-5
    rope_theta: float | None = 10000.0  # None: no positional encoding (NemotronH attention)
    attn_bias: bool = False  # q/k/v biases (Qwen2-MoE)
    qk_norm: bool = False  # RMSNorm of each query/key head (Qwen3-MoE)
    router: moe.Router | None = None  # None when the model has no MoE layer
    shared_gate: bool = False  # sigmoid gate on the shared expert (Qwen2-MoE)
    dt_min: float = 0.0  # Mamba2 time-step floor (transformers: time_step_min)
    conv_bias: bool = True  # Mamba2 conv1d bias (use_conv_bias)
    # Gemma 3 (``families.gemma3.forward``): token embeddings times sqrt(hidden), RoPE base of the sliding layers,
    # query_pre_attn_scalar ** -0.5 instead of head_dim ** -0.5, tanh soft cap of the logits
    embed_scale: float | None = None
    rope_local_theta: float | None = None
    query_scale: float | None = None
    final_softcap: float | None = None
    native: Mapping[str, Any] = field(default_factory=dict, compare=False)  # the parent's config.json

    @property
    def num_layers(self) -> int:
        return self.arch.num_layers


@dataclass(frozen=True)
class HybridMasks:
    hidden: torch.Tensor | None = None
    hidden_count: torch.Tensor | float | None = None
    ffn: tuple[torch.Tensor | None, ...] | None = None  # dense MLP channel masks
    attn: tuple[tuple[AttnOption, ...] | None, ...] | None = None
    moe: tuple[tuple | None, ...] | None = None  # ((weight, experts kept), ...)


def param_shapes(cfg: HybridConfig) -> dict[str, tuple[int, ...]]:
    """Canonical name -> shape of every weight ``cfg.arch`` has (removed sub-blocks have none)."""
    A = cfg.arch
    d = A.hidden_size
    out: dict[str, tuple[int, ...]] = {"embed": (A.vocab_size, d), "norm_f": (d,)}
    if not A.tie_embeddings:
        out["lm_head"] = (A.vocab_size, d)
    for l, b in enumerate(A.blocks):
        m, f = b.mixer, b.ffn
        if m is not None:
            out[pn(l, "mixer_norm")] = (d,)
            if A.post_norms:
                out[pn(l, "post_mixer_norm")] = (d,)
        if isinstance(m, Attention):
            hd = m.head_dim
            for n, rows in (("q", m.q_heads * hd), ("k", m.kv_heads * hd), ("v", m.kv_heads * hd)):
                out[pn(l, n)] = (rows, d)
                if cfg.attn_bias:
                    out[pn(l, f"{n}_bias")] = (rows,)
            out[pn(l, "o")] = (d, m.q_heads * hd)
            if cfg.qk_norm:
                out[pn(l, "q_norm")] = out[pn(l, "k_norm")] = (hd,)
        elif isinstance(m, Mamba2):
            inner, conv = m.d_inner, m.d_inner + 2 * m.groups * m.state_size
            out.update({pn(l, "in_proj"): (inner + conv + m.heads, d), pn(l, "conv_w"): (conv, m.conv_kernel),
                        pn(l, "A_log"): (m.heads,), pn(l, "D"): (m.heads,),
                        pn(l, "dt_bias"): (m.heads,), pn(l, "ssm_norm"): (inner,), pn(l, "out_proj"): (d, inner)})
            if cfg.conv_bias:
                out[pn(l, "conv_b")] = (conv,)
        if f is not None:
            out[pn(l, "ffn_norm")] = (d,)
            if A.post_norms:
                out[pn(l, "post_ffn_norm")] = (d,)
        if isinstance(f, MLP):
            out[pn(l, "up")], out[pn(l, "down")] = (f.width, d), (d, f.width)
            if f.gated:
                out[pn(l, "gate")] = (f.width, d)
        elif isinstance(f, MoE):
            E, I = f.experts, f.expert_width
            out[pn(l, "router")], out[pn(l, "e_up")], out[pn(l, "e_down")] = (E, d), (E, I, d), (E, d, I)
            if f.gated:
                out[pn(l, "e_gate")] = (E, I, d)
            if cfg.router is not None and cfg.router.kind == "sigmoid":
                out[pn(l, "router_bias")] = (E,)
            if f.shared_experts:
                s = f.shared_experts * f.shared_width
                out[pn(l, "s_up")], out[pn(l, "s_down")] = (s, d), (d, s)
                if f.gated:
                    out[pn(l, "s_gate")] = (s, d)
                if cfg.shared_gate:
                    out[pn(l, "s_router")] = (1, d)
    return out


def attention(p: Mapping[str, torch.Tensor], cfg: HybridConfig, l: int, a: Attention, h: torch.Tensor,
              rope, options=None) -> torch.Tensor | None:
    """Per-head outputs (B, T, H, hd) before ``o``; None when no option contributes."""
    B, T, _ = h.shape

    def proj(name, n):
        y = h @ p[pn(l, name)].T
        if cfg.attn_bias:
            y = y + p[pn(l, f"{name}_bias")]
        y = y.view(B, T, n, a.head_dim)
        if cfg.qk_norm and name in ("q", "k"):
            y = rms_norm(y, p[pn(l, f"{name}_norm")], cfg.eps)
        return y.transpose(1, 2)
    q, k, v = proj("q", a.q_heads), proj("k", a.kv_heads), proj("v", a.kv_heads)
    if rope is not None:
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    if cfg.query_scale is not None:  # SDPA divides by sqrt(head_dim)
        q = q * (cfg.query_scale * a.head_dim ** 0.5)
    if options is None:
        return causal_attention(q, k, v, a.sliding_window).transpose(1, 2)
    out = None
    for opt in options:
        ko, vo = (k, v) if opt.pool is None else (pool_kv(k, opt.pool), pool_kv(v, opt.pool))
        o = opt.weight * causal_attention(q, ko, vo, a.sliding_window)
        out = o if out is None else out + o
    return None if out is None else out.transpose(1, 2)


def mlp(p, l: int, f: MLP, h: torch.Tensor, mask=None, tap=None) -> torch.Tensor:
    """The dense FFN; a hard prefix ``mask`` (``hard_prefix``) runs the sliced weights instead."""
    act = moe.ACT[f.activation]
    up, down, gate = p[pn(l, "up")], p[pn(l, "down")], p.get(pn(l, "gate"))
    k = hard_prefix(mask)
    if k is not None:
        up, down, gate, mask = up[:k], down[:, :k], None if gate is None else gate[:k], None
    z = act(h @ gate.T) * (h @ up.T) if f.gated else act(h @ up.T)
    if tap:
        tap("ffn_act", l, z)
    if mask is not None:
        z = z * mask
    return z @ down.T


def moe_layer(p, cfg: HybridConfig, l: int, f: MoE, h: torch.Tensor, options=None, tap=None) -> torch.Tensor:
    shape = h.shape
    x = h.reshape(-1, shape[-1])
    w = moe.mixed_route(x @ p[pn(l, "router")].T, cfg.router, options, p.get(pn(l, "router_bias")))
    if tap:
        tap("router", l, w)
    out = moe.experts(x, w, p[pn(l, "e_up")], p[pn(l, "e_down")], p.get(pn(l, "e_gate")), f.activation, tap, l)
    if f.shared_experts:
        act = moe.ACT[f.activation]
        s = act(x @ p[pn(l, "s_gate")].T) * (x @ p[pn(l, "s_up")].T) if f.gated else act(x @ p[pn(l, "s_up")].T)
        s = s @ p[pn(l, "s_down")].T
        if cfg.shared_gate:
            s = torch.sigmoid(x @ p[pn(l, "s_router")].T) * s
        if options is not None:  # a removed layer loses its shared expert too
            s = s * sum((wt for wt, _ in options), torch.zeros(()))
        out = out + s
    return out.reshape(shape)


def forward(params: Mapping[str, torch.Tensor], cfg: HybridConfig, input_ids: torch.Tensor,
            masks: HybridMasks | None = None, tap=None, return_hidden: bool = False,
            start: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
    """Logits (B, T, V) for ``input_ids`` (B, T), or the final normed hidden states with ``return_hidden``.

    ``start=(l, x)``: resume at layer l from the residual stream x entering it (as a ``"block"``
    tap saw it), skipping the layers before: the measured search scores many variants that differ
    from one model only from some layer on."""
    m = masks or HybridMasks()
    hm, count, eps = m.hidden, m.hidden_count, cfg.eps
    first, x = start if start is not None else (0, params["embed"][input_ids])
    if cfg.embed_scale is not None and start is None:
        x = x * cfg.embed_scale
    if hm is not None and start is None:
        x = x * hm
    a0 = next((b.attention for b in cfg.arch.blocks if b.attention), None)
    rope = local = None
    if a0 is not None and cfg.rope_theta is not None:
        rope = local = rope_tables(input_ids.shape[1], a0.head_dim, cfg.rope_theta, x.device)
        if cfg.rope_local_theta is not None:
            local = rope_tables(input_ids.shape[1], a0.head_dim, cfg.rope_local_theta, x.device)
    post = cfg.arch.post_norms
    for i in range(first, cfg.num_layers):
        b, x_in = cfg.arch.blocks[i], x
        if b.mixer is not None:
            h = rms_norm(x, params[pn(i, "mixer_norm")], eps, count)
            if tap:
                tap("norm", i, h)
            if isinstance(b.mixer, Attention):
                heads = attention(params, cfg, i, b.mixer, h, local if b.mixer.sliding_window else rope,
                                  None if m.attn is None else m.attn[i])
                if heads is not None and tap:
                    tap("heads", i, heads)
                a = None if heads is None else heads.flatten(2) @ params[pn(i, "o")].T
            else:
                mb: Mamba2 = b.mixer
                sub = {k: params[pn(i, k)] for k in ("in_proj", "conv_w", "A_log", "D", "dt_bias", "ssm_norm",
                                                     "out_proj")}
                if pn(i, "conv_b") in params:
                    sub["conv_b"] = params[pn(i, "conv_b")]
                a = mamba2.mixer(sub, h, mb.heads, mb.head_dim, mb.groups, mb.state_size, eps, cfg.dt_min, tap, i)
            if a is not None and post:  # over the kept hidden channels, as the student's
                a = rms_norm(a if hm is None else a * hm, params[pn(i, "post_mixer_norm")], eps, count)
            if a is not None:
                x_new = x + (a if hm is None else a * hm)
                if tap:
                    tap("attn", i, x, x_new)
                x = x_new
        if b.ffn is not None:
            cw = None if m.ffn is None else m.ffn[i]
            opts = None if m.moe is None else m.moe[i]
            removed = (isinstance(b.ffn, MoE) and opts == ()) or (cw is not None and not cw.requires_grad
                                                                  and not bool(cw.any()))
            if not removed:
                h = rms_norm(x, params[pn(i, "ffn_norm")], eps, count)
                if tap:
                    tap("norm", i, h)
                f = (mlp(params, i, b.ffn, h, cw, tap) if isinstance(b.ffn, MLP)
                     else moe_layer(params, cfg, i, b.ffn, h, opts, tap))
                if post:
                    f = rms_norm(f if hm is None else f * hm, params[pn(i, "post_ffn_norm")], eps, count)
                x_new = x + (f if hm is None else f * hm)
                if tap:
                    tap("ffn", i, x, x_new)
                x = x_new
        if tap:
            tap("block", i, x_in, x)
    h = rms_norm(x, params["norm_f"], eps, count)
    if tap:
        tap("norm", -1, h)
    if return_hidden:
        return h
    logits = h @ (params["embed"] if cfg.arch.tie_embeddings else params["lm_head"]).T
    if cfg.final_softcap is not None:
        logits = torch.tanh(logits / cfg.final_softcap) * cfg.final_softcap
    return logits


__all__ = ["AttnOption", "HybridConfig", "HybridMasks", "apply_rope", "attention", "causal_attention", "forward",
           "hard_prefix", "mlp", "moe_layer", "param_shapes", "pn", "pool_kv", "rms_norm", "rope_tables"]
