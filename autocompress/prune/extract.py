"""The student sliced from the parent's permuted weights (never the supernet's temporaries), and
the functional module that distils it.

After ``prune.permute`` every candidate keeps a prefix (canonical names, ``nn.hybrid``):

* hidden d': the first d' channels of the embedding, every norm, every projection's hidden side;
* KV heads k: K / V (and their biases) pooled with ``permute.pool_matrix`` (mean over merged
  groups); query and ``o`` weights stay whole (query heads and head_dim are global);
* dense FFN width w: intermediate channels [0, w);
* experts e: the first e experts of the layer (router rows, score-correction bias, expert
  weights): the gate's softmax and top-k then run over the kept experts only (``nn.moe``);
* expert width w: channels [0, w) of every kept expert (global: one width for all MoE layers);
* Mamba2 heads h (global, group-aware): the first h / G heads of each of the G groups, with their
  z / x / dt rows of ``in_proj``, conv channels, A, D, dt bias, gated-norm weights and
  ``out_proj`` columns; every group keeps its B / C rows, so each kept head reads its own group's.

Removed sub-blocks lose their weights and norm. By construction the student equals the masked
supernet at the one-hot choice of the same architecture (tested).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import torch

from autocompress.families.checkpoint import check_shapes
from autocompress.ir import MLP, Architecture, Attention, Mamba2, MoE
from autocompress.nn.hybrid import HybridConfig, forward, param_shapes, pn
from autocompress.prune.permute import head_rows, pool_matrix


def mamba_heads_kept(parent: Mamba2, heads: int) -> torch.Tensor:
    """Head indices kept when ``parent`` keeps ``heads`` heads: a prefix of each group."""
    G, n = parent.groups, parent.heads // parent.groups
    if heads % G or not 0 < heads <= parent.heads:
        raise ValueError(f"Mamba2 heads {heads}: must be a positive multiple of the {G} groups, <= {parent.heads}")
    return (torch.arange(G)[:, None] * n + torch.arange(heads // G)[None, :]).reshape(-1)


def _check(cfg: HybridConfig, arch: Architecture) -> None:
    p = cfg.arch
    if arch.num_layers != p.num_layers or (arch.num_heads, arch.head_dim, arch.vocab_size) != \
            (p.num_heads, p.head_dim, p.vocab_size):
        raise ValueError("layers, query heads, head_dim and vocabulary must be the parent's")
    if not 0 < arch.hidden_size <= p.hidden_size:
        raise ValueError(f"hidden size {arch.hidden_size} not in 1..{p.hidden_size}")
    for l, (b, pb) in enumerate(zip(arch.blocks, p.blocks)):
        for mine, theirs in ((b.mixer, pb.mixer), (b.ffn, pb.ffn)):
            if mine is not None and type(mine) is not type(theirs):
                raise ValueError(f"block {l}: a {type(mine).__name__} cannot come from the parent's {theirs}")
        m, f = b.mixer, b.ffn
        if isinstance(m, Attention) and m.kv_heads > pb.mixer.kv_heads:
            raise ValueError(f"block {l}: {m.kv_heads} KV heads > the parent's {pb.mixer.kv_heads}")
        if isinstance(f, MLP) and f.width > pb.ffn.width:
            raise ValueError(f"block {l}: width {f.width} > the parent's {pb.ffn.width}")
        if isinstance(f, MoE) and (f.experts > pb.ffn.experts or f.expert_width > pb.ffn.expert_width):
            raise ValueError(f"block {l}: {f.experts} experts of width {f.expert_width} > the parent's "
                             f"{pb.ffn.experts} of {pb.ffn.expert_width}")


def extract(permuted: Mapping[str, torch.Tensor], cfg: HybridConfig, arch: Architecture
            ) -> tuple[dict[str, torch.Tensor], dict]:
    """(canonical state of ``arch``, extras for ``student`` / export) from the permuted parent."""
    _check(cfg, arch)
    P, d = permuted, arch.hidden_size
    sd = {"embed": P["embed"][:, :d], "norm_f": P["norm_f"][:d]}
    if not arch.tie_embeddings:
        sd["lm_head"] = (P["embed"] if cfg.arch.tie_embeddings else P["lm_head"])[:, :d]
    for l, (b, pb) in enumerate(zip(arch.blocks, cfg.arch.blocks)):
        g = lambda n: P[pn(l, n)]  # noqa: E731
        m, f = b.mixer, b.ffn
        if m is not None:
            sd[pn(l, "mixer_norm")] = g("mixer_norm")[:d]
            if cfg.arch.post_norms:
                sd[pn(l, "post_mixer_norm")] = g("post_mixer_norm")[:d]
        if isinstance(m, Attention):
            K, k, hd = pb.mixer.kv_heads, m.kv_heads, m.head_dim
            pool = pool_matrix(m.q_heads, K, k)
            sd[pn(l, "q")], sd[pn(l, "o")] = g("q")[:, :d], g("o")[:d]
            for n in ("k", "v"):
                sd[pn(l, n)] = torch.einsum("jk,khd->jhd", pool, g(n).view(K, hd, -1)).reshape(k * hd, -1)[:, :d]
                if cfg.attn_bias:
                    sd[pn(l, f"{n}_bias")] = (pool @ g(f"{n}_bias").view(K, hd)).reshape(-1)
            for n in ("q_bias", "q_norm", "k_norm"):
                if pn(l, n) in P:
                    sd[pn(l, n)] = g(n)
        elif isinstance(m, Mamba2):
            pm = pb.mixer
            heads = mamba_heads_kept(pm, m.heads)
            I, P_, gn = pm.d_inner, pm.head_dim, pm.groups * pm.state_size
            ch = head_rows(heads, P_)
            rows = torch.cat([ch, I + ch, 2 * I + torch.arange(2 * gn), 2 * I + 2 * gn + heads])
            sd[pn(l, "in_proj")] = g("in_proj")[rows][:, :d]
            conv = torch.cat([ch, I + torch.arange(2 * gn)])
            sd[pn(l, "conv_w")] = g("conv_w")[conv]
            if cfg.conv_bias:
                sd[pn(l, "conv_b")] = g("conv_b")[conv]
            for n in ("A_log", "D", "dt_bias"):
                sd[pn(l, n)] = g(n)[heads]
            sd[pn(l, "ssm_norm")], sd[pn(l, "out_proj")] = g("ssm_norm")[ch], g("out_proj")[:d][:, ch]
        if f is not None:
            sd[pn(l, "ffn_norm")] = g("ffn_norm")[:d]
            if cfg.arch.post_norms:
                sd[pn(l, "post_ffn_norm")] = g("post_ffn_norm")[:d]
        if isinstance(f, MLP):
            w = f.width
            sd[pn(l, "up")], sd[pn(l, "down")] = g("up")[:w, :d], g("down")[:d, :w]
            if f.gated:
                sd[pn(l, "gate")] = g("gate")[:w, :d]
        elif isinstance(f, MoE):
            e, w = f.experts, f.expert_width
            sd[pn(l, "router")] = g("router")[:e, :d]
            if pn(l, "router_bias") in P:
                sd[pn(l, "router_bias")] = g("router_bias")[:e]
            sd[pn(l, "e_up")], sd[pn(l, "e_down")] = g("e_up")[:e, :w, :d], g("e_down")[:e, :d, :w]
            if f.gated:
                sd[pn(l, "e_gate")] = g("e_gate")[:e, :w, :d]
            for n in ("s_up", "s_gate", "s_router"):
                if pn(l, n) in P:
                    sd[pn(l, n)] = g(n)[:, :d]
            if pn(l, "s_down") in P:
                sd[pn(l, "s_down")] = g("s_down")[:d]
    sd = {k: v.detach().clone().contiguous() for k, v in sd.items()}
    student = replace(cfg, arch=arch)
    want = param_shapes(student)
    if set(want) != set(sd) or any(tuple(sd[k].shape) != want[k] for k in want):
        raise AssertionError(f"extraction does not give the architecture's tensors: {sorted(set(want) ^ set(sd))[:4]}")
    return sd, {"cfg": cfg}


def _mangle(name: str) -> str:
    return name.replace(".", "__")


class HybridStudent(torch.nn.Module):
    """The student for distillation: the canonical weights as parameters, the functional forward."""

    def __init__(self, cfg: HybridConfig, state: Mapping[str, torch.Tensor]):
        super().__init__()
        self.cfg = cfg
        self.weights = torch.nn.ParameterDict({_mangle(k): torch.nn.Parameter(v.detach().clone().float())
                                               for k, v in state.items()})

    def canonical(self) -> dict[str, torch.Tensor]:
        return {k.replace("__", "."): v for k, v in self.weights.items()}

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return forward(self.canonical(), self.cfg, input_ids)


def student_model(arch: Architecture, state: Mapping[str, torch.Tensor], extras: dict) -> HybridStudent:
    return HybridStudent(replace(extras["cfg"], arch=arch), state)


def canonical_state(student_state: Mapping[str, torch.Tensor], cfg: HybridConfig) -> dict[str, torch.Tensor]:
    """Canonical weights from a ``HybridStudent`` state dict (or canonical weights), shape-checked."""
    out = {(k.removeprefix("weights.").replace("__", ".")): v for k, v in student_state.items()}
    check_shapes(out, param_shapes(cfg))
    return out


__all__ = ["HybridStudent", "canonical_state", "extract", "mamba_heads_kept", "student_model"]
