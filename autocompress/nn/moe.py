"""Routed mixture of experts as plain torch functions: routers, experts, removed experts.

Two routers, as the served formats compute them (transformers 5.19 and vLLM 0.32 agree):

* ``softmax`` (Mixtral, Qwen2-MoE, Qwen3-MoE): p = softmax(x W_g^T) over the experts, keep the
  top-k, renormalize them when ``norm_topk`` (Mixtral always; Qwen per ``norm_topk_prob``).
* ``sigmoid`` (NemotronH): s = sigmoid(x W_g^T); the top-k of s + ``e_score_correction_bias``
  (within the best ``topk_group`` of ``n_group`` groups) are selected, weighted by s (no bias),
  renormalized when ``norm_topk`` (+1e-20), times ``routed_scaling_factor``.

**Removed experts and the gate's re-normalization.** A pruned layer keeps the first ``kept``
experts (importance order, ``prune.permute``) and the export slices the gate's rows, so
every normalization above runs over the kept experts only: the softmax's denominator, the
top-k renormalization and the top-k selection itself. ``route(..., kept=k)`` computes exactly that
on the unsliced weights by masking the removed experts' logits with -inf (softmax) or leaving
them out of the selection (sigmoid), so the masked supernet equals the sliced student.

**Options** (the supernet's soft choice between expert counts): the output is linear in the
routing weights, so a probability-weighted mixture of the layer with k_1, k_2, ... experts is the
layer run once with the mixed routing weights ``sum_o p_o route(kept=k_o)``.

Experts are evaluated sparsely: each expert runs on the tokens with a nonzero weight for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

ACT = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu,
       "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu2": lambda x: F.relu(x).square()}


@dataclass(frozen=True)
class Router:
    kind: str  # "softmax" | "sigmoid"
    top_k: int
    norm_topk: bool
    scaling: float = 1.0
    n_group: int = 1
    topk_group: int = 1


def route(logits: torch.Tensor, r: Router, kept: int | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Dense routing weights (N, E) (zero off the selected experts) of router logits (N, E);
    ``kept``: only the first ``kept`` experts exist (module docstring)."""
    logits = logits.float()
    E = logits.shape[-1]
    gone = None
    if kept is not None and kept < E:
        gone = torch.arange(E, device=logits.device) >= kept
    if r.kind == "softmax":
        p = F.softmax(logits if gone is None else logits.masked_fill(gone, -torch.inf), dim=-1)
        w, idx = torch.topk(p, r.top_k, dim=-1)
        if r.norm_topk:
            w = w / w.sum(dim=-1, keepdim=True)
        return torch.zeros_like(p).scatter(-1, idx, w)
    s = torch.sigmoid(logits)
    choice = s if bias is None else s + bias.float()
    if gone is not None:
        choice = choice.masked_fill(gone, -torch.inf)
    if r.n_group > 1:  # best topk_group groups by the sum of their two best scores
        g = choice.view(-1, r.n_group, E // r.n_group)
        best = torch.topk(torch.topk(g, 2, dim=-1).values.sum(-1), r.topk_group, dim=-1).indices
        keep = torch.zeros(g.shape[:2], dtype=torch.bool, device=g.device).scatter(1, best, True)
        choice = choice.masked_fill(~keep.repeat_interleave(E // r.n_group, dim=1), -torch.inf)
    idx = torch.topk(choice, r.top_k, dim=-1).indices
    w = s.gather(-1, idx)
    if r.norm_topk:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return torch.zeros_like(s).scatter(-1, idx, w * r.scaling)


def mixed_route(logits: torch.Tensor, r: Router, options: Sequence[tuple] | None,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """Routing weights of a mixture of expert counts: ``options`` = ((weight, kept), ...); None = all
    experts; () = the layer removed (zero weights)."""
    if options is None:
        return route(logits, r, None, bias)
    out = torch.zeros_like(logits, dtype=torch.float32)
    for weight, kept in options:
        out = out + weight * route(logits, r, kept, bias)
    return out


def experts(h: torch.Tensor, weights: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
            gate: torch.Tensor | None, act: str, tap=None, layer: int = 0) -> torch.Tensor:
    """sum_e weights[:, e] * expert_e(h) over tokens h (N, d); up / gate (E, I, d), down (E, d, I).
    Gated experts: down(act(gate h) * up h); non-gated: down(act(up h)). ``tap("expert", layer, e,
    w, z, y)`` per expert with its tokens' weights w, intermediate z and weighted-free output y."""
    f = ACT[act]
    out = torch.zeros_like(h)
    for e in range(weights.shape[-1]):
        tok = torch.nonzero(weights[:, e], as_tuple=True)[0]
        if tok.numel() == 0:
            continue
        x = h[tok]
        z = f(x @ gate[e].T) * (x @ up[e].T) if gate is not None else f(x @ up[e].T)
        y = z @ down[e].T
        w = weights[tok, e]
        if tap:
            tap("expert", layer, e, w, z, y)
        out = out.index_add(0, tok, w[:, None].to(y.dtype) * y)
    return out


__all__ = ["ACT", "Router", "experts", "mixed_route", "route"]
