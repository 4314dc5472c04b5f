"""The vectorized pieces under ``assess`` against plain per-layer reference implementations: the
repair moves, their per-layer deltas, the uniform grid, the structure pre-check, the LP assembly."""

from __future__ import annotations

import numpy as np
import pytest
from _feaskit import MiB, batch, ms, serve, setup, spec_for, tiny_arch

from autocompress.feasibility import arrays, rounding, uniform
from autocompress.feasibility.metrics import A, G, K, W, Relaxation
from autocompress.feasibility.pins import drop_least_kept, fix_layers, fix_structure
from autocompress.feasibility.lp import assemble, solve
from autocompress.ir import MLP, Attention, Block

SPECS = {
    "serve": spec_for(serve("chat", 2, inp=1024, out=128, ttft=20 * ms, tpot=2 * ms), hardware="rtx-5080",
                      memory=1024 * MiB),
    "batch": spec_for(batch("offline", 8, inp=512, out=256, e2e=2.0, throughput=1000.0), hardware="l40s"),
}


def _mixed_parent():
    """Layers that differ (KV heads, widths), so ties between layers are rare."""
    blocks = tuple(Block(Attention(4, kv, 64), MLP(w)) for kv, w in ((2, 1024), (4, 768), (2, 512), (1, 1024), (4, 896)))
    return tiny_arch(5).with_blocks(blocks)


@pytest.fixture(scope="module", params=[("serve", "tiny"), ("batch", "tiny"), ("serve", "mixed")], ids=str)
def relaxation(request):
    spec, parent = request.param
    s = setup(SPECS[spec], tiny_arch(6) if parent == "tiny" else _mixed_parent())
    d = s.space.hidden_grid[1]
    return s, Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits)


def _points(relax, n=12, seed=0):
    """Legal points: the parent, the LP point rounded down, random roundings."""
    rng = np.random.default_rng(seed)
    lp = solve(relax).x
    base = lp if lp is not None else relax.at * 0.7
    pts = [relax.at.copy(), rounding.arch_to_x(relax, rounding.x_to_arch(relax, base, floor=True))]
    for _ in range(n):
        x = np.minimum(base * rng.uniform(0.2, 1.3, base.shape), relax.hi)
        pts.append(rounding.arch_to_x(relax, rounding.x_to_arch(relax, x, floor=bool(rng.integers(2)))))
    return pts


def reference_moves(relax, x, down):
    """The move list as first written: one layer at a time, each move a full copy of x."""
    L, sp, out = relax.L, relax.space, []
    kvs = sorted(sp.kv_choices)
    for l, p in enumerate(relax.parent.blocks):
        def put(**changes):
            y = x.copy()
            for kind, val in changes.values():
                y[kind * L + l] = val
            out.append(y)
        a, k, g, w = x[A * L + l], x[K * L + l], x[G * L + l], x[W * L + l]
        if isinstance(p.mixer, Attention) and kvs:
            if down and a:
                lower = [c for c in kvs if c < k]
                if lower:
                    put(k=(K, lower[-1]))
                if relax.lo[A * L + l] < 1:
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
            if down and g:
                for n in rounding.MULTI_STEPS:
                    if w - n * step >= step:
                        put(w=(W, w - n * step))
                if relax.lo[G * L + l] < 1:
                    put(g=(G, 0), w=(W, 0))
            elif not down:
                if not g:
                    put(g=(G, 1), w=(W, step))
                    put(g=(G, 1), w=(W, p.ffn.width))
                for n in rounding.MULTI_STEPS:
                    if g and w + n * step <= p.ffn.width:
                        put(w=(W, w + n * step))
    return np.array(out).reshape(len(out), 4 * L)


def test_moves_match_reference(relaxation):
    _, relax = relaxation
    for x in _points(relax):
        for down in (True, False):
            layers, Y = rounding._moves(relax, x, down)
            X = np.array([rounding._apply(relax, x, l, y) for l, y in zip(layers, Y)]).reshape(len(layers), 4 * relax.L)
            ref = reference_moves(relax, x, down)
            assert X.shape == ref.shape and (X == ref).all()


def test_move_deltas_match_full_recomputation(relaxation):
    """A move's effect on every bound and on the score, from its layer alone, equals recomputing
    the whole point."""
    _, relax = relaxation
    obj = rounding._scorer(relax)
    for x in _points(relax):
        for down in (True, False):
            layers, Y = rounding._moves(relax, x, down)
            if not len(layers):
                continue
            Y0 = x[arrays.layer_terms(relax)["idx"][layers]]
            X = np.array([rounding._apply(relax, x, l, y) for l, y in zip(layers, Y)])
            full = arrays.relaxed_batch(relax, X) - arrays.relaxed_batch(relax, x[None, :])[0]
            assert np.allclose(arrays.move_deltas(relax, x, layers, Y, Y0), full, rtol=0, atol=1e-12)
            assert np.allclose(obj.delta(layers, Y, Y0), obj.score(X) - obj.score(x), rtol=0, atol=1e-12)


def test_relaxed_batch_blocks_agree(relaxation):
    """Rows are evaluated in blocks of ``BATCH_ROWS``: the result does not depend on the blocking."""
    _, relax = relaxation
    X = np.array(_points(relax, n=3 * arrays.BATCH_ROWS))
    whole = arrays.relaxed_batch(relax, X)
    rows = np.array([arrays.relaxed_batch(relax, x[None, :])[0] for x in X])
    assert np.allclose(whole, rows, rtol=1e-12, atol=0)


def test_uniform_grid_matches_reference(relaxation):
    _, relax = relaxation
    L = relax.L
    order = uniform.drop_order(relax)
    dropped = [order[:n] for n in (0, 1, 3)]
    kvs, widths = [4, 2, 1], [1024, 640, 256, 64]
    ref = []
    for layers in dropped:
        for kv in kvs:
            for width in widths:
                x = relax.at.copy()
                for l, b in enumerate(relax.parent.blocks):
                    x[K * L + l] = min(kv, relax.at[K * L + l]) if relax.at[K * L + l] else 0
                    if isinstance(b.ffn, MLP):
                        x[W * L + l] = min(width, relax.at[W * L + l])
                for l in layers:
                    for kind in (A, K, G, W):
                        x[kind * L + l] = 0
                ref.append(x)
    assert (uniform._uniform_grid(relax, dropped, kvs, widths) == np.array(ref)).all()


def test_structure_precheck_is_sound(relaxation):
    """A structure the pre-check rejects has an infeasible LP (it only skips hopeless solves)."""
    _, relax = relaxation
    x = solve(relax).x
    fixes = [fix_layers(relax, set(range(1, n))) for n in range(1, relax.L + 1)]
    if x is not None:
        fix = fix_structure(relax, x)
        while fix is not None:
            fixes.append(fix)
            fix = drop_least_kept(relax, x, fix)
    rejected = 0
    for fix in fixes:
        if rounding.structure_infeasible(relax, fix):
            rejected += 1
            assert solve(relax, fix=fix).x is None, fix
    assert rejected  # removing most layers breaks min_keep: the check has something to reject


def test_lp_rows_match_reference():
    """The LP's constraint rows, built block by block, equal the row-by-row construction on a
    parent with uneven layers and importance curves of different lengths."""
    from autocompress.feasibility.objective import Importance

    s = setup(SPECS["serve"], _mixed_parent())
    rng = np.random.default_rng(1)

    def curve(n):
        v = np.sort(rng.random(n))
        v[0], v[-1] = 0.0, 1.0
        return tuple(float(c) for c in v)

    L = s.arch.num_layers
    imp = Importance("file", tuple(rng.random(L) / L), tuple(rng.random(L) / L),
                     tuple(curve(int(rng.integers(3, 10))) for _ in range(L)),
                     tuple(curve(int(rng.integers(3, 10))) for _ in range(L)), curve(9))
    relax = Relaxation(s.arch, s.space.hidden_grid[0], s.spec, s.profile, s.device, s.space, imp, s.limits)
    assemble(relax)
    rows, rhs = [], []
    for l in range(L):  # u >= a, u >= g
        for kind in (A, G):
            rows.append({kind * L + l: 1.0, 4 * L + l: -1.0})
            rhs.append(0.0)
    for keep, var in ((A, K), (G, W)):
        for l in range(L):
            rows.append({keep * L + l: relax.kept_min[var * L + l], var * L + l: -1.0})
            rows.append({var * L + l: 1.0, keep * L + l: -relax.hi[var * L + l]})
            rhs += [0.0, 0.0]
    nt = relax.nt
    for j, (ik, iv, pk, pv, qk, qv) in enumerate(relax.ep):
        rows.append({ik: pk, iv: pv, 5 * L + j: -1.0})
        rows.append({ik: qk, iv: qv, 5 * L + j: -1.0})
        rhs += [0.0, 0.0]
    for l in range(L):
        for off, var, curves in ((5 * L + nt, K, imp.kv_curves), (6 * L + nt, W, imp.ffn_curves)):
            c = curves[l]
            xs = np.linspace(0.0, 1.0, len(c))
            for i in range(len(c) - 1):
                slope = (c[i + 1] - c[i]) / (xs[i + 1] - xs[i])
                rows.append({off + l: 1.0, var * L + l: -slope / relax.at[var * L + l]})
                rhs.append(c[i] - slope * xs[i])
    dense = relax.Gm.toarray()
    for i, (row, b) in enumerate(zip(rows, rhs)):
        expect = np.zeros(relax.n)
        for col, v in row.items():
            expect[col] += v
        assert np.array_equal(dense[i], expect) and relax.h[i] == b, i


def test_trimmed_cvxpy_import_leaves_real_modules():
    """``cvx_import`` defers modules while cvxpy imports; afterwards every one of them is the real thing,
    whether reached by a fresh import or through the names cvxpy and scipy kept."""
    import subprocess
    import sys

    code = """
import sys
from autocompress.feasibility.cvx_import import cvxpy
cp = cvxpy()
import numpy, scipy.linalg, scipy.sparse.linalg, pydoc
import cvxpy.utilities.linalg as cl
import scipy._lib.array_api_compat.numpy as xp
assert xp.testing.assert_allclose is numpy.testing.assert_allclose  # a deferred name kept by scipy
assert type(sys.modules["scipy.linalg"]).__name__ == "module" and scipy.linalg.norm([3.0, 4.0]) == 5.0
assert cl.la.norm([3.0, 4.0]) == 5.0 and cl.sparla.eigsh is scipy.sparse.linalg.eigsh
assert numpy.testing.assert_allclose and numpy.ma.masked_array and type(numpy.f2py).__name__ == "module"
assert pydoc.getdoc(len)
import cvxpy.reductions.solvers.conic_solvers.cvxopt_conif as co
assert co.eigsh.__name__ == "eigsh"
x = cp.Variable(2)
assert abs(cp.Problem(cp.Minimize(cp.sum(x)), [x >= 1]).solve(solver="HIGHS") - 2.0) < 1e-9
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_shed_order_is_repeated_drop_least_kept(relaxation):
    from autocompress.feasibility.pins import shed_order

    _, relax = relaxation
    for x in _points(relax, n=4):
        fix = fix_structure(relax, x)
        expect, cur = [], fix
        while (cur := drop_least_kept(relax, x, cur)) is not None:
            expect.append(cur)
        got, cur = [], fix
        for i, v in shed_order(relax, x, fix):
            cur = {**cur, i: 0.0, v: 0.0}
            got.append(cur)
        assert got == expect


def test_structure_bound_bounds_the_pinned_lp(relaxation):
    """``structure_bound`` never undercuts a pinned structure's LP optimum, so a structure it rules
    out (below the seed's score) is one branch and bound would never have rounded."""
    from autocompress.feasibility.pins import structure_bound

    _, relax = relaxation
    x = solve(relax).x
    fixes = [fix_layers(relax, set(range(1, n))) for n in range(1, relax.L + 1)]
    if x is not None:
        fix = fix_structure(relax, x)
        while fix is not None:
            fixes.append(fix)
            fix = drop_least_kept(relax, x, fix)
    solved = 0
    for fix in fixes:
        r = solve(relax, fix=fix)
        if r.x is not None:
            solved += 1
            assert r.value <= structure_bound(relax, fix) + 1e-7, fix
    assert solved
