"""Pinned structures: keep decisions fixed to 0/1 so the LP re-optimizes only the sizes.

The LP is loose on fixed per-sub-block costs when a keep variable is fractional; ``assess`` pins
the LP's own rounding, variants that shed more sub-blocks, and whole-layer structures, and bounds
what each can reach (``structure_bound``) before solving it.
"""

from __future__ import annotations

import numpy as np

from autocompress.feasibility.metrics import A, G, K, W, Relaxation
from autocompress.ir import MLP, Attention, MoE


def fix_structure(relax: Relaxation, x: np.ndarray) -> dict:
    """Pin the keep variables of an LP point to 0/1 (>= 0.5 kept), with KV heads / widths pinned to
    0 where removed (``drop_least_kept`` sheds more)."""
    L, fix = relax.L, {}
    for kind, var in ((A, K), (G, W)):
        for l in range(L):
            if relax.lo[kind * L + l] < relax.hi[kind * L + l]:
                on = 1.0 if x[kind * L + l] >= 0.5 else 0.0
                fix[kind * L + l] = on
                if not on:
                    fix[var * L + l] = 0.0
    return fix


def fix_layers(relax: Relaxation, dropped: set[int]) -> dict:
    """Pin a whole-layer structure: ``dropped`` layers removed, every other sub-block kept."""
    L, fix = relax.L, {}
    for l in range(L):
        for kind, var in ((A, K), (G, W)):
            if relax.lo[kind * L + l] < relax.hi[kind * L + l]:
                fix[kind * L + l] = 0.0 if l in dropped else 1.0
                if l in dropped:
                    fix[var * L + l] = 0.0
    return fix


def structure_bound(relax: Relaxation, fix: dict) -> float:
    """An upper bound on the LP objective (before the hidden factor) over a pinned structure,
    without solving it: every kept sub-block at the maximum of its importance curve, a removed one
    at the curve's value at 0 (a concave curve's hypograph at 0), free keep variables kept."""
    L, imp = relax.L, relax.importance
    total = 0.0
    for l, b in enumerate(relax.parent.blocks):
        a = fix.get(A * L + l, relax.hi[A * L + l])
        g = fix.get(G * L + l, relax.hi[G * L + l])
        total += 0.5 * imp.alpha[l] * a  # the objective's coefficients (``_assemble``: c)
        if isinstance(b.mixer, Attention):
            curve = imp.kv_curves[l]
            total += 0.5 * imp.alpha[l] * (max(curve) if a > 0 else curve[0])
        if isinstance(b.ffn, (MLP, MoE)):
            curve = imp.ffn_curves[l]
            total += imp.beta[l] * (max(curve) if g > 0 else curve[0])
    return total


def shed_order(relax: Relaxation, x: np.ndarray, fix: dict) -> list[tuple[int, int]]:
    """The order in which ``drop_least_kept`` removes the sub-blocks of ``fix``, all at once:
    (keep index, size index) pairs, least kept first (ties: the later layer). Removing one never
    changes the others' ranks, so one sort replaces a search per removal."""
    L = relax.L
    cands = sorted((x[i], -(i % L), i, var * L + i % L) for kind, var in ((A, K), (G, W))
                   for i in range(kind * L, (kind + 1) * L) if fix.get(i) == 1.0 and relax.lo[i] < 1)
    return [(i, v) for _, _, i, v in cands]


def drop_least_kept(relax: Relaxation, x: np.ndarray, fix: dict) -> dict | None:
    """One more sub-block removed from a pinned structure: the kept one the LP kept least
    (ties: the later layer). None when nothing removable is left."""
    L = relax.L
    cands = []
    for kind, var in ((A, K), (G, W)):
        for l in range(L):
            i = kind * L + l
            if fix.get(i) == 1.0 and relax.lo[i] < 1:
                cands.append((x[i], -l, i, var * L + l))
    if not cands:
        return None
    _, _, i, v = min(cands)
    out = dict(fix)
    out[i], out[v] = 0.0, 0.0
    return out

