"""From the LP's continuous point to a legal architecture that the exact cost model accepts.

1. round every size to its legal grid (``space``): sub-blocks below half kept are removed;
2. **repair**: while a bound is violated, take the move (one FFN step down, one KV choice down,
   a sub-block removed) with the most violation removed per importance lost;
3. **fill** the slack rounding left: the reverse moves, best importance gained per cost added.

Moves are scored in the LP's own variables with its numeric model (``arrays``), all candidate
moves at once and each from its own layer's terms. That model is exact at integer points except
for the midpoint rule over a batch workload's decode steps, so the exact cost model judges the
result and, if it disagrees, the repair continues under the exact model.

Distinct GEMM shapes (vllm-cpu profiles price each, ``cost.memory.gemm_shapes``) are a count over
the model, which the relaxation charges at the parent's value. Where the profile prices them the
values here add the point's own count (``_true``), and the down moves include merging an FFN into
a narrower width another layer already has: narrowing one FFN to a new width adds two shapes and
can cost more memory than it frees, so without merges the repair of a heterogeneous rounding never
reaches the bound (the README's contract on a freshly calibrated machine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autocompress.feasibility.arrays import layer_terms, move_deltas, numeric, relaxed_batch
from autocompress.feasibility.exact import Evaluation, evaluate
from autocompress.feasibility.shapes import shape_count as _shape_count, shape_price as _shape_price
from autocompress.feasibility.metrics import A, G, K, W, Relaxation, arch_to_x, x_to_arch
from autocompress.ir import MLP, Architecture, Attention, MoE

MAX_MOVES = 256
MULTI_STEPS = (1, 4, 16)  # FFN moves of 1, 4 and 16 grid steps: long walks take few iterations
EXACT_RETRIES = 8


def structure_floor(relax: Relaxation, fix: dict) -> np.ndarray:
    """The smallest point of a pinned structure (``relax.fix_structure``'s dicts): removed
    sub-blocks at 0, kept ones at their smallest size, free keep variables at their lower bound."""
    L = relax.L
    x = np.zeros(4 * L)
    for keep, var in ((A, K), (G, W)):
        k = slice(keep * L, (keep + 1) * L)
        v = slice(var * L, (var + 1) * L)
        x[k] = relax.lo[k]
        for i, val in fix.items():
            if keep * L <= i < (keep + 1) * L:
                x[i] = val
        x[v] = np.where(x[k] > 0, np.maximum(relax.lo[v], relax.kept_min[v]), 0.0)
    for i, val in fix.items():  # sizes pinned explicitly (to 0 with their sub-block)
        if i // L in (K, W):
            x[i] = val
    return x


def structure_infeasible(relax: Relaxation, fix: dict, margin: float = 1e-6) -> bool:
    """True when the structure's LP is infeasible for a reason seen without solving it: its smallest
    point already violates a bound (every cost grows with every size), or its largest keeps too few
    parameters (the space's ``min_keep``). ``margin`` stays clear of the solver's tolerance."""
    low = structure_floor(relax, fix)
    if (relaxed_batch(relax, low[None, :])[0] > 1.0 + margin).any():
        return True
    L = relax.L
    high = low.copy()
    for keep, var in ((A, K), (G, W)):
        kept = low[keep * L:(keep + 1) * L] > 0
        high[var * L:(var + 1) * L] = np.where(kept, relax.hi[var * L:(var + 1) * L], low[var * L:(var + 1) * L])
    parent_params = float(relax.param_lin @ relax.at) * (relax.parent.hidden_size / relax.d)
    return float(high @ relax.param_lin) < relax.space.min_keep * parent_params * (1.0 - margin)


# ---- moves ----------------------------------------------------------------------------------

def _layers(relax: Relaxation) -> dict:
    """Per-layer constants of the move generator (what each layer has and may lose)."""
    cache = relax.__dict__.setdefault("_layers", {})
    if not cache:
        L, sp, lo, hi = relax.L, relax.space, relax.lo, relax.hi
        blocks = relax.parent.blocks
        cache["att"] = np.array([isinstance(b.mixer, Attention) for b in blocks]) & bool(sp.kv_choices)
        cache["mlp"] = np.array([isinstance(b.ffn, MLP) for b in blocks]) & (hi[W * L:] > lo[W * L:])
        cache["moe"] = np.array([isinstance(b.ffn, MoE) for b in blocks]) & bool(sp.expert_choices)
        cache["width"] = np.array([b.ffn.width if isinstance(b.ffn, MLP) else 0 for b in blocks], float)
        cache["step"] = np.minimum(sp.ffn_step, cache["width"])
        cache["experts"] = np.array([b.ffn.experts if isinstance(b.ffn, MoE) else 0 for b in blocks], float)
        cache["kvs"] = np.array(sorted(sp.kv_choices) or [0], float)
        cache["es"] = np.array(sorted(sp.expert_choices) or [0], float)
        cache["drop_a"], cache["drop_g"] = lo[A * L:(A + 1) * L] < 1, lo[G * L:(G + 1) * L] < 1
        cache["hi_a"], cache["hi_k"] = hi[A * L:(A + 1) * L] > 0, hi[K * L:(K + 1) * L]
    return cache


def _true(relax: Relaxation, X: np.ndarray) -> np.ndarray:
    """``relaxed_batch`` plus each point's own distinct-shape count beyond the parent's."""
    vals = relaxed_batch(relax, X)
    price = _shape_price(relax)
    if price:
        if "_parent_shapes" not in relax.__dict__:  # once per relaxation: _true runs in the repair's loops
            relax.__dict__["_parent_shapes"] = _shape_count(relax, relax.at)
        base = relax.__dict__["_parent_shapes"]
        vals = vals.copy()
        vals[:, -1] += np.array([_shape_count(relax, x) - base for x in X]) * price
    return vals


def _moves(relax: Relaxation, x: np.ndarray, down: bool) -> tuple[np.ndarray, np.ndarray]:
    """All single moves from x, layer by layer, each layer's in a fixed order (attention, then
    FFN; smaller steps first): (layer of each move, its sizes (a, k, g, w) there), possibly empty.
    Every move changes one layer."""
    c, L = _layers(relax), relax.L
    a, k, g, w = (x[kind * L:(kind + 1) * L] for kind in (A, K, G, W))
    on_a, on_g = a != 0, g != 0
    kvs, es, step = c["kvs"], c["es"], c["step"]
    slots: list[tuple[np.ndarray, list]] = []  # (valid per layer, [(kind, value per layer)])
    if down:
        i = np.searchsorted(kvs, k, "left") - 1  # the largest KV choice below k
        slots.append((c["att"] & on_a & (i >= 0), [(K, kvs[np.maximum(i, 0)])]))
        slots.append((c["att"] & on_a & c["drop_a"], [(A, 0.0), (K, 0.0)]))
        for n in MULTI_STEPS:  # several step sizes: long walks take few iterations
            slots.append((c["mlp"] & on_g & (w - n * step >= step), [(W, w - n * step)]))
        slots.append((c["mlp"] & on_g & c["drop_g"], [(G, 0.0), (W, 0.0)]))
        if _shape_price(relax):  # merge into the next narrower width another FFN already has
            used = np.unique(w[c["mlp"] & on_g])
            m = np.searchsorted(used, w, "left") - 1
            slots.append((c["mlp"] & on_g & (m >= 0), [(W, used[np.maximum(m, 0)] if len(used) else w)]))
        j = np.searchsorted(es, w, "left") - 1
        slots.append((c["moe"] & on_g & (j >= 0), [(W, es[np.maximum(j, 0)])]))
    else:
        slots.append((c["att"] & ~on_a & c["hi_a"], [(A, 1.0), (K, kvs[0])]))
        i = np.searchsorted(kvs, k, "right")  # the smallest KV choice above k
        nxt = kvs[np.minimum(i, len(kvs) - 1)]
        slots.append((c["att"] & on_a & (i < len(kvs)) & (nxt <= c["hi_k"]), [(K, nxt)]))
        # re-add an FFN at the smallest width or at the parent's
        slots.append((c["mlp"] & ~on_g, [(G, 1.0), (W, step)]))
        slots.append((c["mlp"] & ~on_g, [(G, 1.0), (W, c["width"])]))
        for n in MULTI_STEPS:
            slots.append((c["mlp"] & on_g & (w + n * step <= c["width"]), [(W, w + n * step)]))
        j = np.searchsorted(es, w, "right")
        nxt_e = es[np.minimum(j, len(es) - 1)]
        slots.append((c["moe"] & on_g & (j < len(es)) & (nxt_e <= c["experts"]), [(W, nxt_e)]))
    valid = np.stack([v for v, _ in slots], axis=1)  # (L, slots): row-major order = layer by layer
    layer, slot = np.nonzero(valid)
    Y = x[layer_terms(relax)["idx"][layer]]
    for s, (_, changes) in enumerate(slots):
        rows = np.nonzero(slot == s)[0]
        for kind, value in changes:
            Y[rows, kind] = value[layer[rows]] if isinstance(value, np.ndarray) else value
    return layer, Y


def _apply(relax: Relaxation, x: np.ndarray, layer: int, y: np.ndarray) -> np.ndarray:
    out = x.copy()
    out[layer_terms(relax)["idx"][layer]] = y
    return out


def _step(relax, x, obj: _Objective, down: bool, bad: np.ndarray | None) -> np.ndarray | None:
    """The best single move from x: down, the most violation removed (of the ``bad`` values) per
    importance lost; up, the most importance gained per normalized cost added, among moves that
    keep every bound. Moves are scored by their layer's change (``move_deltas``); the chosen up
    move is re-checked on the whole point."""
    layers, Y = _moves(relax, x, down)
    if not len(layers):
        return None
    c = layer_terms(relax)
    Y0 = x[c["idx"][layers]]
    if down:
        params = float(x @ relax.param_lin) + ((Y - Y0) * c["params"][layers]).sum(axis=1)
        keep = params >= obj.min_params
        layers, Y, Y0 = layers[keep], Y[keep], Y0[keep]
        if not len(layers):
            return None
    dv = move_deltas(relax, x, layers, Y, Y0)
    price = _shape_price(relax)
    if price:  # each move's change of the point's own shape count
        n0 = _shape_count(relax, x)
        dv[:, -1] += np.array([_shape_count(relax, _apply(relax, x, l, y)) - n0 for l, y in zip(layers, Y)]) * price
    ds = obj.delta(layers, Y, Y0)
    if down:  # most violation removed per importance lost
        gain = np.clip(-dv, 0, None)[:, bad].sum(axis=1)
        ratio = gain / np.maximum(-ds, 1e-12)
        i = int(np.argmax(ratio))
        return _apply(relax, x, layers[i], Y[i]) if gain[i] > 0 else None
    base = _true(relax, x[None, :])[0]
    ok = (base + dv <= 1.0).all(axis=1) & (ds > 0)  # best importance gained per cost added
    cost = np.clip(dv, 0, None).sum(axis=1) + 1e-12
    ratio = np.where(ok, ds / cost, -np.inf)
    while ratio.size and np.isfinite(ratio.max()):
        i = int(np.argmax(ratio))
        y = _apply(relax, x, layers[i], Y[i])
        if (_true(relax, y[None, :])[0] <= 1.0).all():  # rounding in the deltas: judge the whole point
            return y
        ratio[i] = -np.inf
    return None


@dataclass(frozen=True)
class _Objective:
    score: Callable  # x -> importance kept (with the hidden factor)
    delta: Callable  # (layers, Y, Y0) -> change of the score when layer layers[i] goes from Y0[i] to Y[i]
    min_params: float  # the space's floor on kept parameters


def _scorer(relax: Relaxation) -> _Objective:
    parent, imp = relax.parent, relax.importance
    score_x, part = imp.scorer(parent), imp.layer_scorer(parent)
    factor = imp.hidden_factor(relax.d, parent.hidden_size)
    min_params = relax.space.min_keep * float(relax.param_lin @ relax.at) * (parent.hidden_size / relax.d)
    return _Objective(lambda y: score_x(y, factor),
                      lambda layers, Y, Y0: factor * (part(layers, Y) - part(layers, Y0)), min_params)


def _round_up_prefix(relax: Relaxation, x_lp: np.ndarray, x: np.ndarray) -> np.ndarray:
    """From the floored point x, round up the FFN widths with the largest fractional parts first,
    as many as the bounds allow (binary search: costs grow with every width, so feasibility is
    monotone in how many are rounded up)."""
    L, step = relax.L, relax.space.ffn_step
    frac = []
    for l, b in enumerate(relax.parent.blocks):
        if isinstance(b.ffn, MLP) and x[G * L + l] and x[W * L + l] + step <= b.ffn.width:
            frac.append((x_lp[W * L + l] / step - x[W * L + l] / step, l))
    order = [l for f, l in sorted(frac, reverse=True) if f > 1e-6]

    def up(j: int) -> np.ndarray:
        y = x.copy()
        for l in order[:j]:
            y[W * L + l] += step
        return y
    lo, hi = 0, len(order)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if (_true(relax, up(mid)[None, :])[0] <= 1.0).all():
            lo = mid
        else:
            hi = mid - 1
    return up(lo)


def round_repair_fill(relax: Relaxation, x_lp: np.ndarray, fill: bool = True):
    """Round an LP point down, round up what fits, repair and fill under the numeric model:
    (x, moves, importance), or (x, moves, None) when no move sequence satisfies every bound."""
    obj = _scorer(relax)
    x, moves = arch_to_x(relax, x_to_arch(relax, x_lp, floor=True)), 0
    if (_true(relax, x[None, :])[0] <= 1.0).all():
        x = _round_up_prefix(relax, x_lp, x)
    for _ in range(MAX_MOVES):  # repair
        bad = _true(relax, x[None, :])[0] > 1.0
        if not bad.any():
            break
        y = _step(relax, x, obj, True, bad)
        if y is None:
            return x, moves, None
        x, moves = y, moves + 1
    if (_true(relax, x[None, :])[0] > 1.0).any():
        return x, moves, None
    for _ in range(MAX_MOVES if fill else 0):  # fill
        y = _step(relax, x, obj, False, None)
        if y is None:
            break
        x, moves = y, moves + 1
    return x, moves, obj.score(x)


def exact_check(relax: Relaxation, x: np.ndarray, profile, device) -> tuple[Architecture, Evaluation, int]:
    """Judge x with the exact cost model; where it disagrees with the numeric model (the batch
    decode quadrature), keep repairing under the exact model for a few moves."""
    obj = _scorer(relax)
    ev = evaluate(x_to_arch(relax, x), relax.spec, profile, device, relax.limits)
    moves = 0
    names = numeric(relax)["names"]
    for _ in range(EXACT_RETRIES):
        if ev.ok:
            break
        bad = np.array([any(c.name == n and not c.ok for c in ev.checks) for n in names])
        y = _step(relax, x, obj, True, bad if bad.any() else np.ones(len(names), bool))
        if y is None:
            break
        x, moves = y, moves + 1
        ev = evaluate(x_to_arch(relax, x), relax.spec, profile, device, relax.limits)
    return ev.arch, ev, moves


def repair_and_fill(relax: Relaxation, arch: Architecture, profile, device, fill: bool = True
                    ) -> tuple[Architecture, Evaluation, int]:
    """Repair and fill a legal architecture, then judge it with the exact model."""
    x, moves, _ = round_repair_fill(relax, arch_to_x(relax, arch), fill)
    arch, ev, more = exact_check(relax, x, profile, device)
    return arch, ev, moves + more
