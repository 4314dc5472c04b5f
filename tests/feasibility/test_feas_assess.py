"""``feasibility.assess`` end to end on tiny hand-built parents (no files, no weights).

The contracts below were found empirically against the built-in profiles and are pinned: if the
cost model or the profiles change, re-derive them (the comments say how each was chosen).
"""

from __future__ import annotations

import math

import pytest
from _feaskit import MiB, ms, serve, setup, spec_for, tiny_arch

from autocompress.feasibility.exact import evaluate
from autocompress.ir import Block


# ---- a contract the parent already meets ------------------------------------------------------

@pytest.fixture(scope="module")
def easy():
    s = setup(spec_for(serve(ttft=50 * ms, tpot=5 * ms), hardware="rtx-5070", memory=2048 * MiB))
    return s, s.assess()


def test_parent_meets_contract_is_feasible(easy):
    s, feas = easy
    assert feas.parent.ok
    assert feas.verdict == "feasible"
    assert feas.start is not None and feas.start.evaluation.ok
    assert all(c.ok and c.ratio <= 1.0 for c in feas.start.evaluation.checks)
    assert 0.0 < feas.start.importance <= 1.0 + 1e-9
    assert feas.diagnosis == ()  # only infeasible contracts are diagnosed
    assert feas.importance_source == "prior"
    # nothing forces pruning: the best starting point keeps (nearly) everything
    assert feas.start.importance >= 0.9


def test_start_evaluation_is_the_exact_model(easy):
    """The starting point's evaluation is what ``evaluate`` says of its architecture."""
    s, feas = easy
    again = evaluate(feas.start.evaluation.arch, s.spec, s.profile, s.device, s.limits)
    assert [(c.name, c.predicted, c.ok) for c in again.checks] == \
           [(c.name, c.predicted, c.ok) for c in feas.start.evaluation.checks]


def test_start_is_a_legal_point_of_the_space(easy):
    s, feas = easy
    arch, sp = feas.start.evaluation.arch, s.space
    assert arch.hidden_size in sp.hidden_grid
    assert arch.num_layers == s.arch.num_layers
    assert arch.blocks[0].attention is not None  # vLLM: layer 0 keeps attention (first_attention_fixed)
    for b in arch.blocks:
        if b.attention:
            assert b.attention.kv_heads in sp.kv_choices
        if b.ffn:
            assert b.ffn.width % sp.ffn_step == 0 and 0 < b.ffn.width <= 1024
    nonemb = lambda a: a.params() - a.embedding_params()  # noqa: E731
    assert nonemb(arch) >= sp.min_keep * nonemb(s.arch) * (arch.hidden_size / s.arch.hidden_size) - 1


def test_uniform_baseline_is_uniform_and_not_better(easy):
    s, feas = easy
    assert feas.uniform is not None and feas.uniform.evaluation.ok
    kept = {b for b in feas.uniform.evaluation.arch.blocks if b.mixer is not None or b.ffn is not None}
    assert len(kept) == 1  # identical sizes in every kept layer (whole layers may be dropped)
    # the uniform candidate is a point of the heterogeneous space: the start keeps at least as much
    assert feas.start.importance >= feas.uniform.importance - 1e-9


def test_lp_sweep_covers_the_hidden_grid(easy):
    s, feas = easy
    assert tuple(d for d, _, _ in feas.lp) == s.space.hidden_grid
    assert all(st == "optimal" for _, st, _ in feas.lp)
    # the parent is feasible at its own hidden size, so the LP there keeps (almost) everything
    assert feas.lp[0][2] == pytest.approx(1.0, abs=1e-3)


# ---- a contract only a heterogeneous architecture meets ---------------------------------------
# Tiny 6-layer parent on an H100 with vLLM: decode of a 256-wide model is overhead-bound, so TPOT
# falls mostly with the number of executed layers / sub-blocks, not with widths.
#   parent: 0.604 ms.  Two full layers (0 and 5) and four identity layers: 0.541 ms.
#   The best uniform candidate (any hidden/KV/FFN size on the grid, at most 50% of the layers
#   dropped -- DEPTH_SHARES -- and >= min_keep = 25% of the non-embedding parameters):
#   0.556 ms (hidden 128, 3 layers dropped). Uniform can neither drop a 4th layer (Minitron's 50%
#   depth limit) nor remove attention or FFN sub-blocks in some layers only; so at 0.545 ms only a
#   heterogeneous architecture (dropping 4 of 6 layers, still >= 25% of the parameters) fits.
HETERO_TPOT = 0.545 * ms


@pytest.fixture(scope="module")
def hetero():
    s = setup(spec_for(serve(tpot=HETERO_TPOT), hardware="h100-sxm"), tiny_arch(6))
    return s, s.assess()


def test_only_heterogeneous_meets_contract(hetero):
    s, feas = hetero
    assert not feas.parent.ok
    assert feas.verdict == "feasible"
    assert feas.uniform is None
    arch = feas.start.evaluation.arch
    assert feas.start.evaluation.ok
    assert not arch.is_homogeneous()
    # it does so by removing sub-blocks in some layers only
    assert any(b.mixer is None or b.ffn is None for b in arch.blocks)
    assert any(b.mixer is not None and b.ffn is not None for b in arch.blocks)
    assert "chat.tpot" in feas.binding or feas.start.evaluation.checks[0].slack < 0.05


def test_hetero_contract_why_uniform_fails(hetero):
    """Pin the explanation above: two full layers meet the bound, the 50%-depth uniform model does not."""
    s, _ = hetero
    full, empty = s.arch.blocks[0], Block(None, None)
    two = s.arch.with_blocks((full,) + (empty,) * 4 + (full,))
    assert evaluate(two, s.spec, s.profile, s.device, s.limits).ok
    three = s.arch.with_blocks((full,) + (empty,) * 3 + (full,) * 2)  # uniform's deepest cut, full width
    assert not evaluate(three, s.spec, s.profile, s.device, s.limits).ok


# ---- infeasible contracts and their diagnosis --------------------------------------------------

@pytest.fixture(scope="module")
def out_of_reach():
    # TPOT far below what any architecture reaches (two layers: 0.54 ms); TTFT easy on its own.
    s = setup(spec_for(serve(ttft=20 * ms, tpot=0.3 * ms), hardware="h100-sxm"), tiny_arch(6))
    return s, s.assess()


def _meets(d) -> bool:
    return d.best >= d.value if d.op == ">=" else d.best <= d.value


def _assert_out_of_reach(d) -> None:
    """A bound no architecture reaches: no best value (with a note saying why), or a worse one."""
    if d.best is None:
        assert d.note and "within reach" not in d.note
    else:
        assert not _meets(d) and "out of reach" in d.note


def _assert_within_reach(d) -> None:
    """A bound satisfiable in isolation: its best value (others kept, else alone) meets it."""
    assert d.best is not None and _meets(d), d
    assert "within reach" in d.note and "out of reach" not in d.note


def test_unreachable_tpot_is_infeasible_and_diagnosed(out_of_reach):
    s, feas = out_of_reach
    assert feas.verdict == "infeasible"
    assert feas.start is None and feas.binding == ()
    diag = {d.bound: d for d in feas.diagnosis}
    assert set(diag) == {"chat.ttft", "chat.tpot"}  # no memory line: the spec states no memory bound
    tpot = diag["chat.tpot"]
    assert tpot.value == pytest.approx(0.3 * ms) and tpot.op == "<="
    _assert_out_of_reach(tpot)


def test_satisfiable_bound_is_within_reach(out_of_reach):
    s, feas = out_of_reach
    diag = {d.bound: d for d in feas.diagnosis}
    ttft = diag["chat.ttft"]
    _assert_within_reach(ttft)
    # the parent itself already meets TTFT, so the best value is at most the parent's
    parent_ttft = next(c for c in feas.parent.checks if c.name == "chat.ttft").predicted
    assert ttft.best <= parent_ttft * (1 + 1e-6)


@pytest.fixture(scope="module")
def memory_floor():
    # 100 MiB is below the engine's fixed terms (CUDA context, graphs, activations) of any candidate.
    s = setup(spec_for(serve(ttft=20 * ms, tpot=5 * ms), hardware="rtx-5070", memory=100 * MiB))
    return s, s.assess()


def test_memory_below_floor_is_infeasible(memory_floor):
    s, feas = memory_floor
    assert feas.verdict == "infeasible" and feas.start is None
    diag = {d.bound: d for d in feas.diagnosis}
    assert set(diag) == {"chat.ttft", "chat.tpot", "memory"}
    mem = diag["memory"]
    assert mem.metric == "memory" and mem.value == 100 * MiB
    _assert_out_of_reach(mem)
    # the latency bounds are satisfiable on their own (the parent meets them): within reach
    for name in ("chat.ttft", "chat.tpot"):
        assert next(c for c in feas.parent.checks if c.name == name).ok
        _assert_within_reach(diag[name])


def test_diagnosis_note_matches_best(memory_floor, out_of_reach):
    for _, feas in (memory_floor, out_of_reach):
        for d in feas.diagnosis:
            if d.best is None:
                continue
            assert math.isfinite(d.best) and d.best > 0
            assert ("out of reach" in d.note) == (not _meets(d)), d


# ---- regressions: bugs found by these tests and fixed ---------------------------------------

def test_solver_failure_does_not_escape_assess():
    s = setup(spec_for(serve(tpot=0.5817 * ms), hardware="rtx-5070"), tiny_arch(6))
    feas = s.assess(diagnose=False)
    assert feas.verdict in ("feasible", "infeasible")


def test_verdict_monotone_in_bound(hetero):
    s, feas = hetero
    looser = setup(spec_for(serve(tpot=0.55 * ms), hardware="h100-sxm"), tiny_arch(6))
    witness = feas.start.evaluation.arch
    assert evaluate(witness, looser.spec, looser.profile, looser.device, looser.limits).ok
    assert looser.assess(diagnose=False).verdict == "feasible"
