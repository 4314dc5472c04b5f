"""From the LP's continuous point to a legal architecture that the exact cost model accepts.

1. round every size to its legal grid (``space``): sub-blocks below half kept are removed;
2. **repair**: while a bound is violated, take the move (one FFN step down, one KV choice down,
   a sub-block removed) with the most violation removed per importance lost;
3. **fill** the slack rounding left: the reverse moves, best importance gained per cost added.

Moves are scored in the LP's own variables with its numeric model (vectorized over all candidate
moves at once). That model is exact at integer points except for the midpoint rule over a batch
workload's decode steps, so the exact cost model judges the result and, if it disagrees, the
repair continues under the exact model.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autocompress.feasibility.evaluate import Evaluation, evaluate
from autocompress.feasibility.relax import A, G, K, W, Relaxation
from autocompress.ir import MLP, Architecture, Attention, Block, MoE

MAX_MOVES = 256
MULTI_STEPS = (1, 4, 16)  # FFN moves of 1, 4 and 16 grid steps: long walks take few iterations
EXACT_RETRIES = 8


def x_to_arch(relax: Relaxation, x: np.ndarray, floor: bool = False) -> Architecture:
    """Round an LP point to legal sizes: to the nearest, or (``floor``) down, which keeps a
    feasible point feasible since every cost grows with every size."""
    L, sp, parent = relax.L, relax.space, relax.parent
    blocks = []
    for l, b in enumerate(parent.blocks):
        m, f = b.mixer, b.ffn
        if isinstance(m, Attention):
            if x[A * L + l] >= 0.5 or relax.lo[A * L + l] == 1:
                choices = sp.kv_choices or (m.kv_heads,)
                below = [c for c in choices if c <= x[K * L + l] + 1e-6]
                kv = (max(below) if below else min(choices)) if floor else \
                    min(choices, key=lambda c: (abs(c - x[K * L + l]), -c))
                m = replace(m, kv_heads=kv)
            else:
                m = None
        if isinstance(f, MLP):
            step = min(sp.ffn_step, f.width)
            q = x[W * L + l] / step
            width = int(np.floor(q + 1e-6) if floor else round(q)) * step
            f = replace(f, width=min(width, f.width)) if (x[G * L + l] >= 0.5 and width >= step) else None
        elif isinstance(f, MoE):
            if x[G * L + l] >= 0.5:
                e = min(sp.expert_choices or (f.experts,), key=lambda c: abs(c - x[W * L + l]))
                f = replace(f, experts=e)
            else:
                f = None
        blocks.append(Block(m, f))
    return relax.arch.with_blocks(tuple(blocks))


def arch_to_x(relax: Relaxation, arch: Architecture) -> np.ndarray:
    L = relax.L
    x = np.zeros(4 * L)
    for l, b in enumerate(arch.blocks):
        if b.mixer is not None:
            x[A * L + l] = 1
            if isinstance(b.mixer, Attention):
                x[K * L + l] = b.mixer.kv_heads
        if isinstance(b.ffn, MLP):
            x[G * L + l], x[W * L + l] = 1, b.ffn.width
        elif isinstance(b.ffn, MoE):
            x[G * L + l], x[W * L + l] = 1, b.ffn.experts
    return x


# ---- the numeric model, vectorized over candidates -------------------------------------------

def _numeric(relax: Relaxation) -> dict:
    cache = relax.__dict__.setdefault("_numeric", {})
    if not cache:
        from scipy import sparse  # already loaded by cvxpy; epigraph rows have two nonzeros each

        L, nt = relax.L, relax.nt
        rows = relax.bound_rows()
        cache["P"], cache["Q"] = relax.epigraph_matrices()
        cache["names"] = list(rows) + ["memory"]
        cache["R"] = sparse.csr_matrix(np.array([r / lim for _, r, lim in rows.values()]).reshape(len(rows), 5 * L + nt))
        cache["c"] = np.array([c / lim for c, _, lim in rows.values()])
        cache["kv"] = np.array([kv for _, kv in relax.mem_kvs])
    return cache


def relaxed_batch(relax: Relaxation, X: np.ndarray) -> np.ndarray:
    """Normalized bound values (> 1 violates) for each row of X: shape (n, bounds + memory)."""
    n = _numeric(relax)
    L = relax.L
    u = np.maximum(X[:, A * L:(A + 1) * L], X[:, G * L:(G + 1) * L])
    t = np.maximum(n["P"] @ X.T, n["Q"] @ X.T).T
    vals = (n["R"] @ np.hstack([X, u, t]).T).T + n["c"]
    kv = np.maximum(X @ n["kv"].T, relax.mem_floor).max(axis=1)
    mem = (relax.mem_const + X @ relax.mem_w + kv) / relax.mem_limit
    return np.hstack([vals, mem[:, None]])


def relaxed_values(relax: Relaxation, x: np.ndarray) -> dict[str, float]:
    """The same for one point, by name."""
    return dict(zip(_numeric(relax)["names"], relaxed_batch(relax, x[None, :])[0]))


# ---- moves ----------------------------------------------------------------------------------

def _moves(relax: Relaxation, x: np.ndarray, down: bool) -> np.ndarray:
    """All single moves from x as rows of a matrix (possibly empty)."""
    L, sp, out = relax.L, relax.space, []
    kvs = sorted(sp.kv_choices)
    for l, p in enumerate(relax.parent.blocks):
        def put(**changes):
            y = x.copy()
            for (kind, val) in changes.values():
                y[kind * L + l] = val
            out.append(y)
        a, k, g, w = x[A * L + l], x[K * L + l], x[G * L + l], x[W * L + l]
        if isinstance(p.mixer, Attention) and kvs:
            can_drop = relax.lo[A * L + l] < 1
            if down and a:
                lower = [c for c in kvs if c < k]
                if lower:
                    put(k=(K, lower[-1]))
                if can_drop:
                    put(a=(A, 0), k=(K, 0))
            elif not down:
                if not a and relax.hi[A * L + l]:
                    put(a=(A, 1), k=(K, kvs[0]))
                elif a:
                    higher = [c for c in kvs if k < c <= relax.hi[K * L + l]]
                    if higher:
                        put(k=(K, higher[0]))
        if isinstance(p.ffn, MLP) and relax.hi[W * L + l] > relax.lo[W * L + l]:
            step = min(sp.ffn_step, p.ffn.width)
            can_drop = relax.lo[G * L + l] < 1
            if down and g:
                for n in MULTI_STEPS:  # several step sizes: long walks take few iterations
                    if w - n * step >= step:
                        put(w=(W, w - n * step))
                if can_drop:
                    put(g=(G, 0), w=(W, 0))
            elif not down:
                if not g:  # re-add an FFN at the smallest width or at the parent's
                    put(g=(G, 1), w=(W, step))
                    put(g=(G, 1), w=(W, p.ffn.width))
                for n in MULTI_STEPS:
                    if g and w + n * step <= p.ffn.width:
                        put(w=(W, w + n * step))
        elif isinstance(p.ffn, MoE) and sp.expert_choices and g:
            es = sorted(sp.expert_choices)
            lower = [e for e in es if e < w]
            higher = [e for e in es if w < e <= p.ffn.experts]
            if down and lower:
                put(w=(W, lower[-1]))
            elif not down and higher:
                put(w=(W, higher[0]))
    return np.array(out).reshape(len(out), 4 * L)


def _step(relax, x, score, min_params, down: bool, bad: np.ndarray | None) -> np.ndarray | None:
    X = _moves(relax, x, down)
    if not len(X):
        return None
    X = X[X @ relax.param_lin >= min_params] if down else X
    if not len(X):
        return None
    base = relaxed_batch(relax, x[None, :])[0]
    vals = relaxed_batch(relax, X)
    s0, s = score(x), score(X)
    if down:  # most violation removed per importance lost
        gain = np.clip(base - vals, 0, None)[:, bad].sum(axis=1)
        ratio = gain / np.maximum(s0 - s, 1e-12)
        i = int(np.argmax(ratio))
        return X[i] if gain[i] > 0 else None
    ok = (vals <= 1.0).all(axis=1) & (s > s0)  # best importance gained per cost added
    if not ok.any():
        return None
    cost = np.clip(vals - base, 0, None).sum(axis=1) + 1e-12
    ratio = np.where(ok, (s - s0) / cost, -np.inf)
    return X[int(np.argmax(ratio))]


def _scorer(relax: Relaxation):
    parent = relax.parent
    score_x = relax.importance.scorer(parent)
    factor = relax.importance.hidden_factor(relax.d, parent.hidden_size)
    min_params = relax.space.min_keep * float(relax.param_lin @ relax.at) * (parent.hidden_size / relax.d)
    return (lambda y: score_x(y, factor)), min_params


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
        if (relaxed_batch(relax, up(mid)[None, :])[0] <= 1.0).all():
            lo = mid
        else:
            hi = mid - 1
    return up(lo)


def round_repair_fill(relax: Relaxation, x_lp: np.ndarray, fill: bool = True):
    """Round an LP point down, round up what fits, repair and fill under the numeric model:
    (x, moves, importance), or (x, moves, None) when no move sequence satisfies every bound."""
    score, min_params = _scorer(relax)
    x, moves = arch_to_x(relax, x_to_arch(relax, x_lp, floor=True)), 0
    if (relaxed_batch(relax, x[None, :])[0] <= 1.0).all():
        x = _round_up_prefix(relax, x_lp, x)
    for _ in range(MAX_MOVES):  # repair
        bad = relaxed_batch(relax, x[None, :])[0] > 1.0
        if not bad.any():
            break
        y = _step(relax, x, score, min_params, True, bad)
        if y is None:
            return x, moves, None
        x, moves = y, moves + 1
    if (relaxed_batch(relax, x[None, :])[0] > 1.0).any():
        return x, moves, None
    for _ in range(MAX_MOVES if fill else 0):  # fill
        y = _step(relax, x, score, min_params, False, None)
        if y is None:
            break
        x, moves = y, moves + 1
    return x, moves, score(x)


def exact_check(relax: Relaxation, x: np.ndarray, profile, device) -> tuple[Architecture, Evaluation, int]:
    """Judge x with the exact cost model; where it disagrees with the numeric model (the batch
    decode quadrature), keep repairing under the exact model for a few moves."""
    score, min_params = _scorer(relax)
    ev = evaluate(x_to_arch(relax, x), relax.spec, profile, device, relax.limits)
    moves = 0
    names = _numeric(relax)["names"]
    for _ in range(EXACT_RETRIES):
        if ev.ok:
            break
        bad = np.array([any(c.name == n and not c.ok for c in ev.checks) for n in names])
        y = _step(relax, x, score, min_params, True, bad if bad.any() else np.ones(len(names), bool))
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
