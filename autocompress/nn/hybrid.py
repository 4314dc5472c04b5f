"""A functional decoder over the IR for the MoE and hybrid families (Mixtral, Qwen2-MoE, Qwen3-MoE,
NemotronH): one forward for teacher, importance probe (``tap``) and supernet (``HybridMasks``),
like ``nn.llama`` for Llama.

Weights live in one **canonical** dict, the same for every family (the family modules under
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
RMSNorm serves every family; ``nn.gemma3`` holds the rest of its globals).

Masks (``HybridMasks``) have the meaning of ``nn.llama.Masks`` for hidden channels, dense FFN
channels and KV-head options; ``moe[l]`` is a tuple of (weight, experts kept) options whose
routing weights are mixed (``nn.moe``); an empty tuple removes the FFN. Taps: the events of
``nn.llama.forward`` plus ``"mamba_heads"`` (``nn.mamba2``), ``"router"`` (l, routing weights
(N, E)) and ``"expert"`` (``nn.moe.experts``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from autocompress.ir import MLP, Architecture, Attention, Mamba2, MoE
from autocompress.nn import mamba2, moe
# the attention math is Llama's (RoPE, causal / windowed SDPA, KV pooling): one implementation
from autocompress.nn.llama import AttnOption, apply_rope, causal_attention, pool_kv, rms_norm, rope_tables


def pn(layer: int, name: str) -> str:
    return f"L{layer}.{name}"


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
    # Gemma 3 (``nn.gemma3``): token embeddings times sqrt(hidden), RoPE base of the sliding layers,
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
    act = moe.ACT[f.activation]
    z = act(h @ p[pn(l, "gate")].T) * (h @ p[pn(l, "up")].T) if f.gated else act(h @ p[pn(l, "up")].T)
    if tap:
        tap("ffn_act", l, z)
    if mask is not None:
        z = z * mask
    return z @ p[pn(l, "down")].T


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
    """Logits (B, T, V), or the final normed hidden states; ``start=(l, x)`` resumes at layer l
    (``nn.llama.forward``)."""
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


__all__ = ["HybridConfig", "HybridMasks", "attention", "forward", "mlp", "moe_layer", "param_shapes", "pn"]
