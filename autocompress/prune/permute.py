"""Permutation to prefix order: the parent's weights reordered by importance, the same function.

Sorted by decreasing importance (``prune.importance``), consistently across every tensor that
shares the index (canonical names, ``nn.hybrid``), so the permuted parent computes exactly the
parent's function (tested; RMSNorm is permutation-invariant over channels, attention over whole
GQA groups with their query heads) and every candidate keeps a *prefix*:

* hidden channels: embedding and head columns, every norm, every projection's hidden side;
* KV groups with their query heads; dense FFN channels;
* experts of a MoE layer: router rows, score-correction bias and expert weights move together
  (top-k routing is permutation-equivariant); the channels of each expert, separately;
* Mamba2 heads: within their group only (a head reads its group's B and C; the gated norm
  averages per group), with their z / x / dt rows, conv channels, A, D, dt bias, norm weights and
  ``out_proj`` columns.

k KV heads (``pool_matrix``): query heads stay (the IR keeps them global); KV heads are merged by
mean-pooling. Query head h of a k-head layer reads pooled KV head h // (H/k), whose K/V weights are
the mean, over the query heads of its group, of the parent KV head each of them used; when k divides
K this is the plain mean of K/k adjacent (in importance order) parent groups (Minitron).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from autocompress.ir import MLP, Attention, Mamba2, MoE
from autocompress.nn.hybrid import HybridConfig, pn

IN_SIDE = ("q", "k", "v", "in_proj", "up", "gate", "router", "s_up", "s_gate", "s_router")  # columns = hidden
OUT_SIDE = ("o", "out_proj", "down", "s_down")  # rows = hidden


def head_rows(heads: torch.Tensor, size: int) -> torch.Tensor:
    """The rows (or channels) of the heads ``heads``, each ``size`` wide, in that order."""
    return (heads[:, None] * size + torch.arange(size)[None, :]).reshape(-1)


def pool_matrix(q_heads: int, kv_from: int, kv_to: int) -> torch.Tensor:
    """(kv_to, kv_from): new KV head j = mean over its query heads h (h // (H/kv_to) == j) of the parent
    KV head that h used (h // (H/kv_from)). Identity when kv_to == kv_from."""
    if q_heads % kv_from or q_heads % kv_to:
        raise ValueError(f"KV heads {kv_from} -> {kv_to} must divide {q_heads} query heads")
    h = torch.arange(q_heads)
    P = torch.zeros(kv_to, kv_from)
    P.index_put_((h // (q_heads // kv_to), h // (q_heads // kv_from)), torch.ones(q_heads), accumulate=True)
    return P / (q_heads // kv_to)


def _desc(scores: torch.Tensor) -> torch.Tensor:
    return torch.sort(scores, descending=True, stable=True).indices


def mamba_order(scores: torch.Tensor, groups: int) -> torch.Tensor:
    """Head order sorting each group's heads by decreasing score, groups in place."""
    n = len(scores) // groups
    return torch.cat([g * n + _desc(scores[g * n:(g + 1) * n]) for g in range(groups)])


def permute(params: Mapping[str, torch.Tensor], cfg: HybridConfig, stats) -> tuple[dict[str, torch.Tensor], dict]:
    """(permuted weights, the orders used: new index j holds old index ``order[j]``) for ``stats``
    (``importance.ImportanceStats``)."""
    hid = _desc(stats.hidden_channels)
    out = {k: v for k, v in params.items()}
    out["embed"], out["norm_f"] = params["embed"][:, hid], params["norm_f"][hid]
    if "lm_head" in params:
        out["lm_head"] = params["lm_head"][:, hid]
    orders: dict = {"hidden": hid}
    for l, b in enumerate(cfg.arch.blocks):
        def put(name, t):
            out[pn(l, name)] = t
        g = lambda n: out[pn(l, n)]  # noqa: E731
        for n in ("mixer_norm", "ffn_norm", "post_mixer_norm", "post_ffn_norm"):
            if pn(l, n) in out:
                put(n, g(n)[hid])
        for n in IN_SIDE:
            if pn(l, n) in out:
                put(n, g(n)[:, hid])
        for n in OUT_SIDE:
            if pn(l, n) in out:
                put(n, g(n)[hid])
        if pn(l, "e_up") in out:
            put("e_up", g("e_up")[:, :, hid])
            put("e_down", g("e_down")[:, hid])
            if pn(l, "e_gate") in out:
                put("e_gate", g("e_gate")[:, :, hid])
        m, f = b.mixer, b.ffn
        if isinstance(m, Attention):
            grp = _desc(stats.kv_groups[l])
            r, hd = m.q_heads // m.kv_heads, m.head_dim
            q_rows = head_rows((grp[:, None] * r + torch.arange(r)[None, :]).reshape(-1), hd)
            kv_rows = head_rows(grp, hd)
            put("q", g("q")[q_rows])
            put("o", g("o")[:, q_rows])
            for n in ("k", "v"):
                put(n, g(n)[kv_rows])
            for n, rows in (("q_bias", q_rows), ("k_bias", kv_rows), ("v_bias", kv_rows)):
                if pn(l, n) in out:
                    put(n, g(n)[rows])
            orders[pn(l, "kv")] = grp
        elif isinstance(m, Mamba2):
            heads = mamba_order(stats.mamba_heads[l], m.groups)
            I, gn = m.d_inner, m.groups * m.state_size
            ch = head_rows(heads, m.head_dim)
            rows = torch.cat([ch, I + ch, 2 * I + torch.arange(2 * gn), 2 * I + 2 * gn + heads])
            conv = torch.cat([ch, I + torch.arange(2 * gn)])
            put("in_proj", g("in_proj")[rows])
            put("conv_w", g("conv_w")[conv])
            if pn(l, "conv_b") in out:
                put("conv_b", g("conv_b")[conv])
            for n in ("A_log", "D", "dt_bias"):
                put(n, g(n)[heads])
            put("ssm_norm", g("ssm_norm")[ch])
            put("out_proj", g("out_proj")[:, ch])
            orders[pn(l, "mamba")] = heads
        if isinstance(f, MLP):
            c = _desc(stats.ffn_channels[l])
            put("up", g("up")[c])
            put("down", g("down")[:, c])
            if f.gated:
                put("gate", g("gate")[c])
            orders[pn(l, "ffn")] = c
        elif isinstance(f, MoE):
            e = _desc(stats.experts[l])
            put("router", g("router")[e])
            if pn(l, "router_bias") in out:
                put("router_bias", g("router_bias")[e])
            ch = torch.stack([_desc(s) for s in stats.expert_channels[l][e]])  # per kept expert, its channels
            idx = torch.arange(len(e))[:, None]
            put("e_up", g("e_up")[e][idx, ch])
            put("e_down", g("e_down")[e].transpose(1, 2)[idx, ch].transpose(1, 2))
            if f.gated:
                put("e_gate", g("e_gate")[e][idx, ch])
            orders[pn(l, "experts")] = e
    return {k: v.contiguous() for k, v in out.items()}, orders


__all__ = ["head_rows", "mamba_order", "permute", "pool_matrix"]
