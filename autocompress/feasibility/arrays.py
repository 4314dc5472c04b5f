"""The relaxation's numeric model as plain arrays, for the rounding, repair and uniform loops.

``relaxed_batch`` evaluates every bound of the contract (normalized: > 1 violates) at many points
at once, from the LP's own rows (``Relaxation.bound_rows``, the epigraph rows, memory): exact at
integer points, like the LP. ``layer_terms`` splits the same model by layer: every term involves
one layer's sizes (a, k, g, w), so the effect of a move within one layer is the change of that
layer's terms (``move_deltas``), without re-evaluating the other layers.
"""

from __future__ import annotations

import numpy as np

from autocompress.feasibility.metrics import A, G, Relaxation


def numeric(relax: Relaxation) -> dict:
    """The bound rows of the relaxation as dense blocks over x, u and t (a few rows each), and the
    epigraph rows as index and coefficient vectors (each has two nonzeros: keep and size)."""
    cache = relax.__dict__.setdefault("_numeric", {})
    if not cache:
        L = relax.L
        rows = relax.bound_rows()
        R = np.array([r / lim for _, r, lim in rows.values()]).reshape(len(rows), 5 * L + relax.nt)
        cache["names"] = list(rows) + ["memory"]
        cache["Rx"], cache["Ru"], cache["Rt"] = R[:, :4 * L].T.copy(), R[:, 4 * L:5 * L].T.copy(), R[:, 5 * L:].T.copy()
        e = np.array(relax.ep, dtype=float).reshape(len(relax.ep), 6)
        cache["ik"], cache["iv"] = e[:, 0].astype(int), e[:, 1].astype(int)
        cache["pk"], cache["pv"], cache["qk"], cache["qv"] = e[:, 2], e[:, 3], e[:, 4], e[:, 5]
        cache["c"] = np.array([c / lim for c, _, lim in rows.values()])
        cache["kv"] = np.array([kv for _, kv in relax.mem_kvs]).T.copy()
    return cache


BATCH_ROWS = 64  # rows per block: the (rows x epigraph rows) temporaries stay in cache (6x faster at 640 rows)


def relaxed_batch(relax: Relaxation, X: np.ndarray) -> np.ndarray:
    """Normalized bound values (> 1 violates) for each row of X: shape (n, bounds + memory)."""
    if len(X) > BATCH_ROWS:
        return np.vstack([relaxed_batch(relax, X[i:i + BATCH_ROWS]) for i in range(0, len(X), BATCH_ROWS)])
    n = numeric(relax)
    L = relax.L
    u = np.maximum(X[:, A * L:(A + 1) * L], X[:, G * L:(G + 1) * L])
    xk, xv = X[:, n["ik"]], X[:, n["iv"]]
    t = np.maximum(xk * n["pk"] + xv * n["pv"], xk * n["qk"] + xv * n["qv"])
    vals = X @ n["Rx"] + u @ n["Ru"] + t @ n["Rt"] + n["c"]
    kv = np.maximum(X @ n["kv"], relax.mem_floor).max(axis=1)
    mem = (relax.mem_const + X @ relax.mem_w + kv) / relax.mem_limit
    return np.hstack([vals, mem[:, None]])


def relaxed_values(relax: Relaxation, x: np.ndarray) -> dict[str, float]:
    """The same for one point, by name."""
    return dict(zip(numeric(relax)["names"], relaxed_batch(relax, x[None, :])[0]))


def layer_terms(relax: Relaxation) -> dict:
    """The numeric model split by layer: every term of a bound value involves one layer's sizes
    (a, k, g, w), so a move's effect is the change of its layer's terms. Epigraph rows are
    grouped by layer (padded with zero rows to the longest group)."""
    cache = relax.__dict__.setdefault("_terms", {})
    if not cache:
        n, L = numeric(relax), relax.L
        idx = np.arange(L)[:, None] + L * np.arange(4)[None, :]  # (L, 4): x indices of a, k, g, w
        layer = n["ik"] % L
        counts = np.bincount(layer, minlength=L)
        m = int(counts.max()) if len(layer) else 0
        order = np.argsort(layer, kind="stable")
        slot = np.arange(len(layer)) - np.repeat(np.cumsum(counts) - counts, counts)
        ep = {key: np.zeros((L, m), int if key in ("kpos", "vpos") else float) for key in
              ("kpos", "vpos", "pk", "pv", "qk", "qv")}
        for key, vals in (("kpos", n["ik"] // L), ("vpos", n["iv"] // L), ("pk", n["pk"]), ("pv", n["pv"]),
                          ("qk", n["qk"]), ("qv", n["qv"])):
            ep[key][layer[order], slot] = vals[order]
        wt = np.zeros((L, m, n["Rt"].shape[1]))
        wt[layer[order], slot] = n["Rt"][order]
        cache.update(ep, idx=idx, Rx=n["Rx"][idx], Ru=n["Ru"], Wt=wt, mem_w=relax.mem_w[idx], kv=n["kv"][idx],
                     params=relax.param_lin[idx])
    return cache


def layer_values(relax: Relaxation, layers: np.ndarray, Y: np.ndarray):
    """What layer ``layers[i]`` with sizes ``Y[i]`` adds to each normalized bound value, to the
    weight bytes and to each workload's KV bytes."""
    c = layer_terms(relax)
    rows = np.arange(len(layers))[:, None]
    keep, var = Y[rows, c["kpos"][layers]], Y[rows, c["vpos"][layers]]
    t = np.maximum(c["pk"][layers] * keep + c["pv"][layers] * var, c["qk"][layers] * keep + c["qv"][layers] * var)
    bounds = (np.einsum("ni,nib->nb", Y, c["Rx"][layers])
              + np.maximum(Y[:, A], Y[:, G])[:, None] * c["Ru"][layers]
              + np.einsum("nm,nmb->nb", t, c["Wt"][layers]))
    return bounds, np.einsum("ni,ni->n", Y, c["mem_w"][layers]), np.einsum("ni,niw->nw", Y, c["kv"][layers])


def move_deltas(relax: Relaxation, x: np.ndarray, layers: np.ndarray, Y: np.ndarray, Y0: np.ndarray) -> np.ndarray:
    """Change of every normalized value (bounds, then memory) when layer ``layers[i]`` of x takes
    sizes ``Y[i]`` instead of ``Y0[i]``: shape (n, bounds + memory)."""
    b1, w1, k1 = layer_values(relax, layers, Y)
    b0, w0, k0 = layer_values(relax, layers, Y0)
    kv_x = x @ numeric(relax)["kv"]
    w_x = relax.mem_const + float(x @ relax.mem_w)
    mem0 = (w_x + np.maximum(kv_x, relax.mem_floor).max()) / relax.mem_limit
    kv = np.maximum(kv_x + (k1 - k0), relax.mem_floor).max(axis=1)
    mem = (w_x + (w1 - w0) + kv) / relax.mem_limit
    return np.hstack([b1 - b0, (mem - mem0)[:, None]])
