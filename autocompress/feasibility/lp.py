"""The relaxation as a linear program: assembly, one compiled cvxpy problem per hidden size, solve.

``metrics.Relaxation`` holds the cost rows of one hidden size; ``assemble`` lays them out as
``maximize c @ z s.t. Gm z <= h`` with bound rows and objective rows switched by right-hand sides,
``problem`` compiles it once (DPP parameters), and ``solve`` answers every question asked of it: the
importance LP, pinned structures (``pins``) and each bound's diagnosis (cvxpy + HiGHS, Clarabel as
fallback).
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from autocompress.feasibility.cvx_import import cvxpy
from autocompress.feasibility.metrics import A, G, K, W, Relaxation
from autocompress.ir import MLP, Attention, MoE

BIG = 1e9  # an "infinite" bound: far above any normalized value, small enough for HiGHS


def assemble(relax: Relaxation) -> None:
    """The LP's fixed data: maximize c @ z s.t. Gm z <= h, lo <= z <= hi (Gm sparse).

    Layout of z: x (4L) | u (L) | t (epigraph rows) | s, r (L each: KV / FFN curve hypographs)
    | one KV epigraph per workload (memory, in units of the limit) | one objective epigraph o.
    Bound rows and objective rows are switched on and off through their right-hand sides, so
    one compiled cvxpy problem (DPP: parameters for c, h, lo, hi) serves every solve at this
    hidden size: the importance LP, pinned structures, and each bound's diagnosis.
    """
    from scipy import sparse  # loaded with cvxpy

    L, nt, nw = relax.L, relax.nt, len(relax.mem_kvs)
    ou, ot = 4 * L, 5 * L
    os_, or_ = ot + nt, ot + nt + L
    om = or_ + L
    oo = om + nw
    n = oo + 1
    lo, hi = np.full(n, -BIG), np.full(n, BIG)
    lo[:4 * L], hi[:4 * L] = relax.lo, relax.hi
    lo[ou:ou + L], hi[ou:ou + L] = 0.0, 1.0
    ri: list = []  # sparse triplets of Gm, in blocks of rows (arrays) or one row (lists)
    ci: list = []
    vi: list = []
    h: list = []  # right-hand sides, in the same blocks
    nrows = 0

    def block(cols: np.ndarray, vals: np.ndarray, rhs: np.ndarray) -> None:
        """Add rows sum_e vals[r, e] * z[cols[r, e]] <= rhs[r] (zero coefficients dropped)."""
        nonlocal nrows
        k = len(rhs)
        keep = vals != 0
        ri.append(np.broadcast_to(np.arange(nrows, nrows + k)[:, None], vals.shape)[keep])
        ci.append(np.asarray(cols)[keep])
        vi.append(np.asarray(vals, float)[keep])
        h.append(np.asarray(rhs, float))
        nrows += k

    def le(entries, b: float) -> int:
        """Add the row sum(v * z[c] for c, v in entries) <= b; return its index."""
        i = nrows
        block(np.array([[c for c, _ in entries]], int).reshape(1, -1),
              np.array([[float(v) for _, v in entries]]).reshape(1, -1), np.array([b]))
        return i

    def dense(vec: np.ndarray, offset: int = 0):
        nz = np.nonzero(vec)[0]
        return [(offset + int(j), vec[j]) for j in nz]

    def pairs(*cols_vals) -> tuple[np.ndarray, np.ndarray]:
        """Rows from columns of (index, value) arrays, entries in the given order."""
        cols = np.stack([np.broadcast_to(c, np.shape(cols_vals[-1][1])) for c, _ in cols_vals], axis=-1)
        vals = np.stack([np.broadcast_to(np.asarray(v, float), cols.shape[:-1]) for _, v in cols_vals], axis=-1)
        return cols, vals

    layers = np.arange(L)
    # u >= a, u >= g: rows (a_l - u_l, g_l - u_l) per layer
    kinds = np.array([A, G])
    cols, vals = pairs((kinds[None, :] * L + layers[:, None], np.ones((L, 2))),
                       (np.broadcast_to(ou + layers[:, None], (L, 2)), -np.ones((L, 2))))
    block(cols.reshape(-1, 2), vals.reshape(-1, 2), np.zeros(2 * L))
    att = np.array([l for l, b in enumerate(relax.parent.blocks) if isinstance(b.mixer, Attention)], int)
    ffn = np.array([l for l, b in enumerate(relax.parent.blocks) if isinstance(b.ffn, (MLP, MoE))], int)
    for keep, var, ls in ((A, K, att), (G, W, ffn)):
        # kept_min * keep <= var <= hi * keep (KV heads: kv_min; FFN: step; MoE: top_k), two rows per layer
        c = np.stack([np.stack([keep * L + ls, var * L + ls], 1), np.stack([var * L + ls, keep * L + ls], 1)], 1)
        v = np.stack([np.stack([relax.kept_min[var * L + ls], -np.ones(len(ls))], 1),
                      np.stack([np.ones(len(ls)), -relax.hi[var * L + ls]], 1)], 1)
        block(c.reshape(-1, 2), v.reshape(-1, 2), np.zeros(2 * len(ls)))
    if nt:  # t >= P x, t >= Q x: two rows per epigraph variable
        e = np.array(relax.ep, dtype=float)
        ik, iv, t = e[:, 0].astype(int), e[:, 1].astype(int), ot + np.arange(nt)
        c = np.stack([ik, iv, t], 1)[:, None, :].repeat(2, axis=1)
        v = np.stack([np.stack([e[:, 2], e[:, 3], -np.ones(nt)], 1), np.stack([e[:, 4], e[:, 5], -np.ones(nt)], 1)], 1)
        block(c.reshape(-1, 3), v.reshape(-1, 3), np.zeros(2 * nt))
    imp = relax.importance
    # hypographs of the concave curves, s <= c_i + slope_i (size / parent's size - x_i) per
    # segment i, layer by layer (KV curve, then FFN curve); curves of one length at once
    att_set, ffn_set = set(att.tolist()), set(ffn.tolist())
    curves = []  # (s index, size index, curve), in row order
    for l in range(L):
        for off, var, table, present in ((os_, K, imp.kv_curves, l in att_set), (or_, W, imp.ffn_curves, l in ffn_set)):
            if present:
                curves.append((off + l, var * L + l, table[l]))
            else:
                lo[off + l] = hi[off + l] = 0.0
    parts = []  # (first row's rank, cols, vals, rhs) per curve length
    for n_pts in sorted({len(cv) for _, _, cv in curves}):
        idx = [i for i, (_, _, cv) in enumerate(curves) if len(cv) == n_pts]
        cv = np.array([curves[i][2] for i in idx], float)
        xs = np.linspace(0.0, 1.0, n_pts)
        slope = (cv[:, 1:] - cv[:, :-1]) / (xs[1:] - xs[:-1])
        s_col = np.array([curves[i][0] for i in idx])[:, None].repeat(n_pts - 1, axis=1)
        v_col = np.array([curves[i][1] for i in idx])[:, None].repeat(n_pts - 1, axis=1)
        cols = np.stack([s_col, v_col], axis=-1).reshape(-1, 2)
        vals = np.stack([np.ones_like(slope), -slope / relax.at[v_col]], axis=-1).reshape(-1, 2)
        rank = (np.array(idx)[:, None] * 1_000_000 + np.arange(n_pts - 1)[None, :]).ravel()
        parts.append((rank, cols, vals, (cv[:, :-1] - slope * xs[:-1]).ravel()))
    if parts:
        order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
        block(np.concatenate([p[1] for p in parts])[order], np.concatenate([p[2] for p in parts])[order],
              np.concatenate([p[3] for p in parts])[order])
    parent_params = float(relax.param_lin @ relax.at) * (relax.parent.hidden_size / relax.d)
    le(dense(-relax.param_lin / parent_params), -relax.space.min_keep)
    # memory, per workload (units of the limit): const + W(x) + max(kv_w(x), floor) <= limit
    bounds: dict[str, tuple[float, list]] = {}  # name -> (normalized const, normalized row entries)
    memory_rows = []  # one per workload: "memory" (the first) covers them all in ``solve``
    for i, (wname, kv) in enumerate(relax.mem_kvs):
        le(dense(kv / relax.mem_limit) + [(om + i, -1.0)], 0.0)
        lo[om + i] = relax.mem_floor / relax.mem_limit
        memory_rows.append("memory" if i == 0 else f"memory.{wname}")
        bounds[memory_rows[-1]] = (
            relax.mem_const / relax.mem_limit, dense(relax.mem_w / relax.mem_limit) + [(om + i, 1.0)])
    relax.memory_rows = frozenset(memory_rows)
    for name, (const, r5, limit) in relax.bound_rows().items():
        bounds[name] = (const / limit, dense(r5 / limit))
    relax.bound_index: dict[str, int] = {}
    relax.obj_index: dict[str, int] = {}
    for name, (const, entries) in bounds.items():  # bound <= 1
        relax.bound_index[name] = le(entries, 1.0 - const)
    for name, (const, entries) in bounds.items():  # objective epigraph: bound value <= o (off: rhs BIG)
        relax.obj_index[name] = le(entries + [(oo, -1.0)], -const)
    relax.bound_const = {name: const for name, (const, _) in bounds.items()}
    c = np.zeros(n)
    alpha, beta = np.array(imp.alpha), np.array(imp.beta)
    c[A * L:(A + 1) * L] = 0.5 * alpha
    c[os_:os_ + L] = 0.5 * alpha
    c[or_:or_ + L] = beta
    relax.c_importance = c
    relax.c_minimize = np.zeros(n)
    relax.c_minimize[oo] = -1.0
    relax.Gm = sparse.csr_matrix((np.concatenate(vi), (np.concatenate(ri), np.concatenate(ci))), shape=(nrows, n))
    relax.h, relax.zlo, relax.zhi, relax.n = np.concatenate(h), lo, hi, n


def problem(relax: Relaxation):
    """The compiled cvxpy problem at this hidden size (built once, DPP-parameterized).

    Variable bounds are the solver's column bounds (constant: cvxpy does not keep a problem
    with parametric bounds compiled), except for x, whose bounds move per solve (pinned
    structures): x's columns are boxed in [0, hi] and its bounds lo <= x <= hi are rows with
    parameters. Bounds as rows for all of z made HiGHS 2-3x slower and its warm start weak.
    """
    if getattr(relax, "_problem", None) is None:
        cp = cvxpy()
        assemble(relax)
        nx = 4 * relax.L
        c, h = cp.Parameter(relax.n), cp.Parameter(len(relax.h))
        lo, hi = cp.Parameter(nx), cp.Parameter(nx)
        zlo = relax.zlo.copy()
        zlo[:nx] = 0.0  # a pin may take a size below its box (KV heads 0: attention removed)
        z = cp.Variable(relax.n, bounds=[zlo, relax.zhi])
        ineq = relax.Gm @ z <= h
        prob = cp.Problem(cp.Maximize(c @ z), [ineq, z[:nx] >= lo, z[:nx] <= hi])
        relax._problem = (prob, z, c, h, lo, hi, ineq)
    return relax._problem


@dataclass(frozen=True)
class LPResult:
    d: int
    status: str
    value: float
    x: np.ndarray | None
    binding: tuple[str, ...]



def solve(relax: Relaxation, objective: str = "importance", drop: frozenset = frozenset(),
          fix: dict | None = None, basis_dir: str | None = None) -> LPResult:
    """Solve the LP at one hidden size with cvxpy + HiGHS (Clarabel as fallback).

    ``objective``: "importance" (maximize kept importance) or a bound's name (minimize its
    normalized value; "memory" covers every workload's memory row). ``drop``: bounds left out.
    ``fix``: variables pinned to a value (index into x -> value).

    Warm starts: a re-solve of this hidden size's problem starts from its previous solution
    (cvxpy's ``warm_start``: pinned structures and diagnosis objectives change bounds only, ~10x
    fewer simplex iterations on the 80-layer example). A first solve with ``basis_dir`` starts
    from the optimal basis of the previous first solve of an LP of the same shape (another hidden
    size: same rows and columns, other coefficients), passed through HiGHS' own basis-file options
    (~5x fewer iterations), and leaves its own there for the next.
    """
    prob, z, c, h, lo, hi, ineq = problem(relax)
    hv = relax.h.copy()
    for name, i in relax.bound_index.items():
        if name in drop or (name in relax.memory_rows and "memory" in drop):
            hv[i] = BIG
    for name, i in relax.obj_index.items():
        on = objective != "importance" and (name == objective or (objective == "memory" and name in relax.memory_rows))
        hv[i] = -relax.bound_const[name] if on else BIG
    lov, hiv = relax.zlo.copy(), relax.zhi.copy()
    for i, v in (fix or {}).items():
        lov[i] = hiv[i] = v
    c.value = relax.c_importance if objective == "importance" else relax.c_minimize
    h.value, lo.value, hi.value = hv, lov[:4 * relax.L], hiv[:4 * relax.L]  # only x is ever pinned
    attempts = [("HIGHS", {}), ("CLARABEL", {})]  # HiGHS first; the interior-point solver as fallback
    if basis_dir is not None and not getattr(relax, "_solved", False):
        basis = os.path.join(basis_dir, f"{relax.Gm.shape[0]}x{relax.Gm.shape[1]}.bas")
        start = {"read_basis_file": basis} if os.path.exists(basis) else {}
        attempts.insert(0, ("HIGHS", {**start, "write_basis_file": basis}))
    relax._solved = True
    status = None
    for solver, opts in attempts:
        try:
            with warnings.catch_warnings():  # "optimal_inaccurate" is judged below, not printed
                warnings.simplefilter("ignore")
                prob.solve(solver=solver, warm_start=True, **opts)
            status = prob.status
        except Exception as e:  # noqa: BLE001 - a solver failure is "no answer" (verdict not_found), never a crash
            status = f"solver_error ({solver}: {type(e).__name__})"
        if status in ("optimal", "optimal_inaccurate", "infeasible"):
            break
    if status not in ("optimal", "optimal_inaccurate"):
        return LPResult(relax.d, status, math.nan, None, ())
    if prob.status not in ("optimal", "optimal_inaccurate"):
        return LPResult(relax.d, prob.status, math.nan, None, ())
    duals = ineq.dual_value
    binding = tuple(sorted(nm for nm, i in relax.bound_index.items()
                           if nm not in drop and duals is not None and abs(duals[i]) > 1e-7))
    value = float(prob.value) if objective == "importance" else -float(prob.value)
    return LPResult(relax.d, prob.status, value, np.array(z.value[:4 * relax.L]), binding)


