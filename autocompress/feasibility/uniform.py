"""The uniform (Minitron-style) baseline at the same budget: identical sizes in every layer.

Minitron searches a small grid of candidates (hidden, FFN width, KV heads, depth) under its
budget and keeps the best. We do the same on the contract's bounds: enumerate the grid, score each
candidate with the relaxation's numeric model (exact at integer points for serve workloads; the
batch decode sum uses a midpoint rule, so the exact model re-judges the winners), and return the
most important candidate that the exact cost model accepts. Depth is pruned by removing whole
layers, least important first (the first and last layers last, as ShortGPT and Minitron find).
"""

from __future__ import annotations

import numpy as np

from autocompress.feasibility.evaluate import evaluate
from autocompress.feasibility.relax import A, G, K, W, Relaxation
from autocompress.feasibility.rounding import arch_to_x, relaxed_batch, x_to_arch
from autocompress.ir import MLP, Attention

DEPTH_SHARES = (0.0, 0.125, 0.25, 0.375, 0.5)  # shares of layers removed (Minitron: up to ~50%)
EXACT_TRIES = 8


def drop_order(relax: Relaxation) -> list[int]:
    """Layers by increasing importance (alpha + beta); ties: later layers first, never layer 0."""
    imp = relax.importance
    L = relax.L
    score = [imp.alpha[l] + imp.beta[l] for l in range(L)]
    order = sorted(range(1, L), key=lambda l: (score[l], -l))
    return order


def _uniform_x(relax: Relaxation, dropped: set[int], kv: int, width: int) -> np.ndarray:
    L, x = relax.L, np.zeros(4 * relax.L)
    for l, b in enumerate(relax.parent.blocks):
        if l in dropped:
            continue
        if isinstance(b.mixer, Attention):
            x[A * L + l], x[K * L + l] = 1, min(kv, b.mixer.kv_heads)
        elif b.mixer is not None:
            x[A * L + l] = 1
        if isinstance(b.ffn, MLP):
            x[G * L + l], x[W * L + l] = 1, min(width, b.ffn.width)
        elif b.ffn is not None:
            x[G * L + l], x[W * L + l] = 1, relax.at[W * L + l]
    return x


def uniform_search(relaxes: dict[int, Relaxation], profile, device, limits=None):
    """(architecture, evaluation, importance) of the best uniform candidate, or None."""
    cands = []
    for d, relax in relaxes.items():
        L, sp = relax.L, relax.space
        order = drop_order(relax)
        widths = sorted({int(relax.at[W * L + l]) for l in range(L) if relax.at[W * L + l]}) or [0]
        i_max = max(widths)
        step = min(sp.ffn_step, i_max) if i_max else 1
        width_grid = list(range(i_max, 0, -step)) if sp.allows("ffn") else [i_max]
        kvs = sorted(sp.kv_choices or (0,), reverse=True)
        score_x = relax.importance.scorer(relax.parent)
        factor = relax.importance.hidden_factor(d, relax.parent.hidden_size)
        parent_params = float(relax.param_lin @ relax.at) * (relax.parent.hidden_size / d)
        shares = DEPTH_SHARES if sp.allows("depth") else (0.0,)
        X = np.array([_uniform_x(relax, set(order[:int(round(share * L))]), kv, width)
                      for share in shares for kv in kvs for width in width_grid])
        X = X[X @ relax.param_lin >= sp.min_keep * parent_params]
        if not len(X):
            continue
        ok = (relaxed_batch(relax, X) <= 1.0).all(axis=1)
        cands += [(score_x(x, factor), d, x) for x in X[ok]]
    cands.sort(key=lambda c: -c[0])
    for score, d, x in cands[:EXACT_TRIES]:
        arch = x_to_arch(relaxes[d], x)
        ev = evaluate(arch, relaxes[d].spec, profile, device, limits)
        if ev.ok:
            return arch, ev, score, d
    return None


__all__ = ["uniform_search", "drop_order", "arch_to_x"]
