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
EXACT_RETRIES = 8


def x_to_arch(relax: Relaxation, x: np.ndarray) -> Architecture:
    """Round an LP point to legal sizes."""
    L, sp, parent = relax.L, relax.space, relax.parent
    blocks = []
    for l, b in enumerate(parent.blocks):
        m, f = b.mixer, b.ffn
        if isinstance(m, Attention):
            if x[A * L + l] >= 0.5 or relax.lo[A * L + l] == 1:
                kv = min(sp.kv_choices or (m.kv_heads,), key=lambda c: (abs(c - x[K * L + l]), -c))
                m = replace(m, kv_heads=kv)
            else:
                m = None
        if isinstance(f, MLP):
            step = min(sp.ffn_step, f.width)
            width = int(round(x[W * L + l] / step)) * step
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
        L, nt = relax.L, len(relax.rows_f)
        rows = relax.bound_rows()
        cache["P"] = np.array(relax.rows_f).reshape(nt, 4 * L)
        cache["Q"] = np.array(relax.rows_g).reshape(nt, 4 * L)
        cache["names"] = list(rows) + ["memory"]
        cache["R"] = np.array([r / lim for _, r, lim in rows.values()]).reshape(len(rows), 5 * L + nt)
        cache["c"] = np.array([c / lim for c, _, lim in rows.values()])
        cache["kv"] = np.array([kv for _, kv in relax.mem_kvs])
    return cache


def relaxed_batch(relax: Relaxation, X: np.ndarray) -> np.ndarray:
    """Normalized bound values (> 1 violates) for each row of X: shape (n, bounds + memory)."""
    n = _numeric(relax)
    L = relax.L
    u = np.maximum(X[:, A * L:(A + 1) * L], X[:, G * L:(G + 1) * L])
    t = np.maximum(X @ n["P"].T, X @ n["Q"].T)
    vals = np.hstack([X, u, t]) @ n["R"].T + n["c"]
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
                if w > step:
                    put(w=(W, w - step))
                if can_drop:
                    put(g=(G, 0), w=(W, 0))
            elif not down:
                if not g:
                    put(g=(G, 1), w=(W, step))
                elif w + step <= p.ffn.width:
                    put(w=(W, w + step))
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
    s0, s = score(x), np.array([score(y) for y in X])
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


def repair_and_fill(relax: Relaxation, arch: Architecture, profile, device, fill: bool = True
                    ) -> tuple[Architecture, Evaluation, int]:
    """Make ``arch`` pass the exact check (if it can) and use leftover slack. Returns the moves made."""
    spec, parent = relax.spec, relax.parent
    score_x = relax.importance.scorer(parent)
    factor = relax.importance.hidden_factor(relax.d, parent.hidden_size)
    score = lambda y: score_x(y, factor)  # noqa: E731
    min_params = relax.space.min_keep * float(relax.param_lin @ relax.at) * (parent.hidden_size / relax.d)
    x, moves = arch_to_x(relax, arch), 0
    for _ in range(MAX_MOVES):  # repair under the numeric model
        bad = relaxed_batch(relax, x[None, :])[0] > 1.0
        if not bad.any():
            break
        y = _step(relax, x, score, min_params, True, bad)
        if y is None:
            break
        x, moves = y, moves + 1
    if fill and (relaxed_batch(relax, x[None, :])[0] <= 1.0).all():
        for _ in range(MAX_MOVES):
            y = _step(relax, x, score, min_params, False, None)
            if y is None:
                break
            x, moves = y, moves + 1
    ev = evaluate(x_to_arch(relax, x), spec, profile, device, relax.limits)
    for _ in range(EXACT_RETRIES):  # the exact model disagrees (batch decode quadrature): repair on
        if ev.ok:
            break
        names = _numeric(relax)["names"]
        bad = np.array([any(c.name == n and not c.ok for c in ev.checks) for n in names])
        y = _step(relax, x, score, min_params, True, bad if bad.any() else np.ones(len(names), bool))
        if y is None:
            break
        x, moves = y, moves + 1
        ev = evaluate(x_to_arch(relax, x), spec, profile, device, relax.limits)
    return ev.arch, ev, moves
