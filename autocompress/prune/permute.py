"""Permutation to prefix order: the parent's weights reordered by importance, same function.

**Permutation** (``permute``): FFN channels, KV groups (with their query heads) and hidden channels are
sorted by decreasing importance (``autocompress.prune.importance``) and the weights permuted consistently, so the
permuted parent computes exactly the same function (tested) and every candidate keeps a *prefix*:

* FFN width w: intermediate channels [0, w);
* hidden width d': residual channels [0, d');
* k KV heads: query heads stay (the IR keeps them global); KV heads are merged by mean-pooling. Query
  head h of a k-head layer reads pooled KV head h // (H/k), whose K/V weights are the mean, over the
  query heads of its group, of the parent KV head each of them used (``pool_matrix``); when k divides K
  this is the plain mean of K/k adjacent (in importance order) parent groups (Minitron).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from autocompress.prune.importance import ImportanceStats
from autocompress.nn.llama import LlamaConfig, param_name


@dataclass(frozen=True)
class Permutation:
    """New index j holds old index ``order[j]`` (decreasing importance)."""

    hidden: torch.Tensor  # (d,)
    kv: tuple[torch.Tensor | None, ...]  # per layer (K_l,)
    ffn: tuple[torch.Tensor | None, ...]  # per layer (I_l,)


def _desc(scores: torch.Tensor) -> torch.Tensor:
    return torch.sort(scores, descending=True, stable=True).indices


def permutation_from(stats: ImportanceStats) -> Permutation:
    return Permutation(_desc(stats.hidden_channels),
                       tuple(None if s is None else _desc(s) for s in stats.kv_groups),
                       tuple(None if s is None else _desc(s) for s in stats.ffn_channels))


def _head_rows(order: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Row indices of whole heads taken in ``order``."""
    return (order[:, None] * head_dim + torch.arange(head_dim)[None, :]).reshape(-1)


def apply_permutation(params: Mapping[str, torch.Tensor], cfg: LlamaConfig, perm: Permutation
                      ) -> dict[str, torch.Tensor]:
    """The parent's weights with channels / groups reordered; same function (RMSNorm is permutation-
    invariant over channels, attention over whole GQA groups with their query heads)."""
    p = perm.hidden
    out: dict[str, torch.Tensor] = {}
    out["model.embed_tokens.weight"] = params["model.embed_tokens.weight"][:, p]
    out["model.norm.weight"] = params["model.norm.weight"][p]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = params["lm_head.weight"][:, p]
    H, hd = cfg.num_heads, cfg.head_dim
    for i in range(cfg.num_layers):
        K = cfg.kv_heads[i]
        if K is not None:
            g = perm.kv[i]
            r = H // K  # query heads per group move with their group
            q_heads = (g[:, None] * r + torch.arange(r)[None, :]).reshape(-1)
            q_rows, kv_rows = _head_rows(q_heads, hd), _head_rows(g, hd)
            out[param_name(i, "input_layernorm")] = params[param_name(i, "input_layernorm")][p]
            out[param_name(i, "self_attn.q_proj")] = params[param_name(i, "self_attn.q_proj")][q_rows][:, p]
            for n in ("k_proj", "v_proj"):
                out[param_name(i, f"self_attn.{n}")] = params[param_name(i, f"self_attn.{n}")][kv_rows][:, p]
            out[param_name(i, "self_attn.o_proj")] = params[param_name(i, "self_attn.o_proj")][p][:, q_rows]
        if cfg.ffn_widths[i] is not None:
            f = perm.ffn[i]
            out[param_name(i, "post_attention_layernorm")] = params[param_name(i, "post_attention_layernorm")][p]
            for n in ("gate_proj", "up_proj"):
                out[param_name(i, f"mlp.{n}")] = params[param_name(i, f"mlp.{n}")][f][:, p]
            out[param_name(i, "mlp.down_proj")] = params[param_name(i, "mlp.down_proj")][p][:, f]
    missing = set(params) - set(out)
    if missing:
        raise ValueError(f"unexpected parameters (biases?) not permuted: {sorted(missing)[:5]}")
    return {k: v.contiguous() for k, v in out.items()}


def permute(params: Mapping[str, torch.Tensor], cfg: LlamaConfig, stats: ImportanceStats
            ) -> tuple[dict[str, torch.Tensor], Permutation]:
    perm = permutation_from(stats)
    return apply_permutation(params, cfg, perm), perm


def pool_matrix(q_heads: int, kv_from: int, kv_to: int) -> torch.Tensor:
    """(kv_to, kv_from): new KV head j = mean over its query heads h (h // (H/kv_to) == j) of the parent
    KV head that h used (h // (H/kv_from)). Identity when kv_to == kv_from."""
    if q_heads % kv_from or q_heads % kv_to:
        raise ValueError(f"KV heads {kv_from} -> {kv_to} must divide {q_heads} query heads")
    h = torch.arange(q_heads)
    P = torch.zeros(kv_to, kv_from)
    P.index_put_((h // (q_heads // kv_to), h // (q_heads // kv_from)), torch.ones(q_heads), accumulate=True)
    return P / (q_heads // kv_to)
