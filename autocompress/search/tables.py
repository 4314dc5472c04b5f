"""Per-layer cost tables for the differentiable search, from the same model as the relaxation.

For a fixed hidden size every bound of the contract is a sum over layers of what that layer's
choices cost, plus a constant (``relax``: the epigraph rows couple only a layer's own keep and
size variables). So the expected cost under independent per-layer choice distributions is exact
and differentiable in the probabilities:

    E[metric] = base + sum_l ( sum_c pa[l,c] A[l,c] + sum_c pf[l,c] F[l,c] - uw * P(a_l kept) P(f_l kept) )

where A / F are the metric's increase when layer l's attention / FFN takes option c (from a
model with every sub-block removed), and the last term removes the per-layer overhead counted
twice when both sub-blocks run. Values are normalized by each bound's limit (1 = on the bound).
Memory is linear in the same way except vLLM-CPU's whole-GiB KV rounding (the linear row charges
``max(KV, the smallest reservation)``; ``_kv_terms`` caps KV at the largest reservation any point
affords, a row of its own: ``refine.costs`` checks it for discrete states and router v2
charges it on the expected heads, ``router_v2.expected_costs``; the rest is left to the exact re-check
after decoding), and the profile's cost per distinct GEMM shape (vllm-cpu's oneDNN
handlers, ``cost.memory.gemm_shapes``): a count over the whole model, not a sum over layers. The
relaxation charges the parent's count. ``shape_count`` counts a discrete state's own; a width
palette (``search.palette``) prepays the count of every option it allows, which ``refine.costs``
charges, so the refinement can trade heterogeneity against memory. Charging each greedy
move its new shapes instead stops every first narrowing (``search.palette``). The
router's expected costs leave the count out (it is not differentiable in the probabilities); the
exact re-check sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from autocompress.cost.memory import GiB, gemm_shapes, memory_breakdown, sub_block_gemm_shapes
from autocompress.feasibility.metrics import A, G, K, W, Relaxation
from autocompress.feasibility.arrays import numeric, relaxed_batch
from autocompress.plan.options import LayerOptions, layer_options

KV_ROW = "memory.kv_reservation"  # the row name ``CostTables.row_names`` adds


def kv_row_value(kv, cap, mem_limit):
    """The KV-reservation row, for floats and torch tensors alike: the greedy's discrete choices
    (``CostTables.kv_row``) and router v2's expected heads (``router_v2.expected_costs``) share it."""
    return 1.0 + (kv - cap) / mem_limit


@dataclass(frozen=True)
class CostTables:
    d: int
    names: tuple[str, ...]  # bound names, normalized (value 1 = on the bound)
    base: np.ndarray  # (B,)
    attn: np.ndarray  # (B, L, Amax): increase of each bound per attention option (0 for "removed")
    ffn: np.ndarray  # (B, L, Fmax)
    both: np.ndarray  # (B,): per-layer overhead counted twice when attention and FFN both run
    options: LayerOptions  # ``plan.options``: the same option indices as the supernet and the router
    # distinct GEMM shapes: what each option contributes (``shapes[kind][l][c]``), the frozen
    # sub-blocks' and the LM head's (``fixed``), the count the relaxation charges, and one shape's
    # normalized memory (0: the profile has no such cost, and ``costs`` skips the count)
    shapes: tuple = field(default=((), ()), repr=False)
    fixed_shapes: frozenset = frozenset()
    charged_shapes: int = 0
    shape_memory: float = 0.0
    # vLLM-CPU's whole-GiB KV reservation (``_kv_terms``): KV bytes per KV head of each layer, per
    # workload, and the largest reservation any architecture can afford under the memory bound
    # (0: no such cap, and ``costs`` adds no KV row)
    kv_head_bytes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    kv_cap: float = 0.0
    mem_limit: float = 0.0
    # KV heads of each layer's attention options (L, Amax; 0 for "removed" and for frozen layers,
    # whose KV the base holds): a choice's heads by one gather, not a Python loop per greedy move
    kv_heads: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)

    @property
    def row_names(self) -> tuple[str, ...]:
        """The names of what ``refine.costs`` and the routers' expected costs return: the bounds,
        then the KV-reservation row where the engine rounds the reservation (``_kv_terms``)."""
        return self.names + (KV_ROW,) if self.kv_cap else self.names

    def kv_needed(self, ca) -> float:
        """KV bytes a discrete attention choice needs (the largest workload's), as ``evaluate`` counts."""
        if not self.kv_head_bytes.size:
            return 0.0
        heads = self.kv_heads[np.arange(len(ca)), np.asarray(ca, dtype=int)]
        return float((self.kv_head_bytes @ heads).max())

    def kv_row(self, kv: float) -> float:
        """The KV-reservation row at ``kv`` bytes: over 1 exactly when ``kv`` exceeds the cap."""
        return kv_row_value(kv, self.kv_cap, self.mem_limit)

    def shape_count(self, ca, cf) -> int:
        """Distinct GEMM shapes of a discrete choice, as ``cost.memory.gemm_shapes`` counts them."""
        found = set(self.fixed_shapes)
        for l, (a, f) in enumerate(zip(ca, cf)):
            if self.shapes[0][l]:
                found |= self.shapes[0][l][a]
            if self.shapes[1][l]:
                found |= self.shapes[1][l][f]
        return len(found)

    def one_hot(self, ca, cf) -> tuple[np.ndarray, np.ndarray]:
        """One-hot option matrices of a discrete choice (option index per layer), for ``expected``."""
        L = len(ca)
        pa = np.zeros((L, self.attn.shape[2]))
        pf = np.zeros((L, self.ffn.shape[2]))
        pa[np.arange(L), ca] = 1
        pf[np.arange(L), cf] = 1
        return pa, pf

    def expected(self, pa: np.ndarray, pf: np.ndarray) -> np.ndarray:
        """Expected normalized bound values for per-layer option probabilities (numpy)."""
        keep_a, keep_f = 1 - pa[:, 0], 1 - pf[:, 0]
        return (self.base + np.einsum("blc,lc->b", self.attn, pa) + np.einsum("blc,lc->b", self.ffn, pf)
                - self.both * (keep_a * keep_f).sum())


def cost_tables(relax: Relaxation) -> CostTables:
    """Exact per-option contributions, computed by differences of the relaxation's numeric model
    (which equals the exact cost model at integer points; batch decode up to its midpoint rule)."""
    L = relax.L
    opts = layer_options(relax.parent, relax.space)
    names = tuple(numeric(relax)["names"])
    x0 = relax.at.copy()
    for l in range(L):  # every compressible sub-block removed; frozen ones (Mamba, MoE) stay
        for keep, var in ((A, K), (G, W)):
            if (keep == A and opts.attn[l]) or (keep == G and opts.ffn[l]):
                x0[keep * L + l] = x0[var * L + l] = 0
    base = relaxed_batch(relax, x0[None, :])[0]
    amax = max((len(o) for o in opts.attn), default=1) or 1
    fmax = max((len(o) for o in opts.ffn), default=1) or 1
    At = np.zeros((len(names), L, amax))
    Ft = np.zeros((len(names), L, fmax))
    rows, where = [], []
    for l in range(L):
        for c, k in enumerate(opts.attn[l][1:], start=1):
            x = x0.copy()
            x[A * L + l], x[K * L + l] = 1, k
            rows.append(x)
            where.append(("a", l, c))
        for c, w in enumerate(opts.ffn[l][1:], start=1):
            x = x0.copy()
            x[G * L + l], x[W * L + l] = 1, w
            rows.append(x)
            where.append(("f", l, c))
    if rows:
        vals = relaxed_batch(relax, np.array(rows)) - base
        for (kind, l, c), v in zip(where, vals):
            (At if kind == "a" else Ft)[:, l, c] = v
    both = np.zeros(len(names))
    rows = relax.budget.rows  # the bound each row holds (memory: ``numeric``'s own row, no overhead term)
    for i, name in enumerate(names):
        if name in rows:
            both[i] = relax.metrics[rows[name].row].uw / rows[name].scale
    heads = np.zeros((L, amax))
    for l, o in enumerate(opts.attn):
        heads[l, :len(o)] = o
    return CostTables(relax.d, names, base, At, Ft, both, opts, **_shape_terms(relax, opts, names),
                      **_kv_terms(relax, names, base), kv_heads=heads)


def _kv_terms(relax: Relaxation, names: tuple[str, ...], base: np.ndarray) -> dict:
    """vLLM-CPU reserves KV space in whole GiB (``cost.memory``), which the linear memory row charges
    as ``max(KV, the smallest reservation)``: a state needing 1.12 GiB is charged 1.12 GiB and the
    exact model 2 GiB. Without the cap the refinement's states were repaired afterwards (on the
    README's cpu-vllm contract every candidate kept all 30 attention layers, 1,147 MiB of KV, and
    5-20 repair moves cost up to 0.43 nats). The cap is the largest whole-GiB reservation that fits beside the
    least non-KV memory of any point (every compressible sub-block removed, no activation: a lower
    bound, so the cap never forbids a reservation some architecture could afford); ``refine.costs`` adds the
    row ``1 + (KV - cap) / limit``, so greedy moves see KV above it as over the bound."""
    if "memory" not in names or not relax.mem_floor:
        return {}
    mem = memory_breakdown(relax.arch, relax.spec.target, relax.spec.workloads, relax.profile, relax.device,
                           relax.limits)
    # the linear row holds the parent's activation (an upper bound); without it, a lower bound
    least_non_kv = (float(base[names.index("memory")]) * relax.mem_limit - relax.mem_floor
                    - (1 + relax.profile.memory.margin_fraction) * mem.peak_activation_bytes)
    cap = max(relax.mem_floor, (relax.mem_limit - least_non_kv) // GiB * GiB)
    L = relax.L
    per_head = np.array([kv[K * L:K * L + L] for _, kv in relax.mem_kvs])  # (workloads, L)
    return {"kv_head_bytes": per_head, "kv_cap": float(cap), "mem_limit": relax.mem_limit}


def _shape_terms(relax: Relaxation, opts: LayerOptions, names: tuple[str, ...]) -> dict:
    """Each option's GEMM shapes at this hidden size, and one shape's normalized memory (with the
    safety margin's fraction, which the exact model applies to all non-KV memory)."""
    mt, tp, d = relax.profile.memory, relax.spec.target.tensor_parallel, relax.d
    if not mt.gemm_shape_bytes or "memory" not in names:
        return {}
    attn, ffn, fixed = [], [], {("lm_head", relax.parent.vocab_size // tp, d)}
    for l, b in enumerate(relax.parent.blocks):
        attn.append(tuple(sub_block_gemm_shapes(replace(b.mixer, kv_heads=k) if k else None, d, tp)
                          for k in opts.attn[l]))
        ffn.append(tuple(sub_block_gemm_shapes(_sized(b.ffn, w) if w else None, d, tp) for w in opts.ffn[l]))
        if not opts.attn[l]:  # frozen (Mamba2) or absent: the parent's own
            fixed |= sub_block_gemm_shapes(b.mixer, d, tp)
        if not opts.ffn[l]:
            fixed |= sub_block_gemm_shapes(b.ffn, d, tp)
    per_shape = (1 + mt.margin_fraction) * mt.gemm_shape_bytes / relax.mem_limit
    return {"shapes": (tuple(attn), tuple(ffn)), "fixed_shapes": frozenset(fixed),
            "charged_shapes": gemm_shapes(relax.arch, tp), "shape_memory": per_shape}


def _sized(ffn, size: int):
    """An FFN at option size ``size``: an MLP's width, a MoE layer's routed experts (``plan.options``)."""
    return replace(ffn, width=size) if hasattr(ffn, "width") else replace(ffn, experts=size)
