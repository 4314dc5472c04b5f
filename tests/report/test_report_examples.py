"""Every example checks clean with its expected verdict; the SmolLM2 build examples need pruning."""

from __future__ import annotations

import pytest
from _reportkit import EXAMPLES, GEMMA3_BUILDS, INFEASIBLE, NOT_FOUND, SMOLLM2_BUILDS, example_params, example_result

from autocompress.report.feasibility import layer_runs


def test_examples_are_all_listed():
    names = {p.stem for p in EXAMPLES}
    assert INFEASIBLE <= names and NOT_FOUND <= names and set(SMOLLM2_BUILDS) <= names
    assert len(names) >= 7


@pytest.mark.parametrize("name", example_params())
def test_example_checks_clean_with_expected_verdict(name):
    report, warnings = example_result(name)  # a SpecError would raise here
    assert not warnings, warnings
    expected = "infeasible" if name in INFEASIBLE else "not_found" if name in NOT_FOUND else "feasible"
    assert report["verdict"] == expected
    if expected == "feasible":
        start = report["start"]
        assert start["ok"] and all(c["ok"] and c["ratio"] <= 1.0 for c in start["checks"])
        assert [c["name"] for c in start["checks"]] == [c["name"] for c in report["parent_costs"]["checks"]]
        assert 0 < start["architecture"]["importance_kept"] <= 1.0
        assert start["architecture"]["params"] <= report["parent"]["architecture"]["params"]
        assert set(report["binding"]) <= {c["name"] for c in start["checks"]}
        assert len(start["architecture"]["layers"]) == len(report["parent"]["architecture"]["layers"])
        assert layer_runs(start["architecture"])  # renders
    elif expected == "infeasible":  # proved: the report says how, and what would make it feasible
        assert report["start"] is None and report["diagnosis"] and report["reason"]
        assert not report["parent_costs"]["ok"]
    else:  # not found: nothing proved, so no "what would make it feasible" either
        assert report["start"] is None and not report["diagnosis"]
        assert "nothing is proved" in report["reason"]
    if report["uniform"] is not None:
        assert report["uniform"]["ok"] and report["uniform"]["architecture"]["homogeneous"] in (True, False)


@pytest.mark.parametrize("name", example_params())
def test_start_keeps_at_least_the_uniform_importance(name):
    """The uniform baseline is a point of the heterogeneous space: the start must score at least as well."""
    report, _ = example_result(name)
    if report["uniform"] is None:
        pytest.skip("no uniform baseline meets this contract")
    u, s = report["uniform"]["architecture"], report["start"]["architecture"]
    assert s["importance_kept"] >= u["importance_kept"] - 1e-4, (s["importance_kept"], u["importance_kept"])


@pytest.mark.parametrize("name", SMOLLM2_BUILDS + GEMMA3_BUILDS)
def test_smollm2_examples_need_real_pruning(name):
    """The parent misses at least one bound by >= 1.3x; the starting point meets them all."""
    report, _ = example_result(name)
    assert report["parent"]["architecture"]["hidden"] == (640 if name in GEMMA3_BUILDS else 576)
    parent_worst = max(c["ratio"] for c in report["parent_costs"]["checks"])
    assert parent_worst >= 1.3, [(c["name"], c["ratio"]) for c in report["parent_costs"]["checks"]]
    assert report["start"]["ok"]
    assert all(c["ok"] for c in report["start"]["checks"])


def test_infeasible_example_diagnosis():
    report, _ = example_result("npc-5070-infeasible")
    diag = {d["bound"]: d for d in report["diagnosis"]}
    assert set(diag) == {c["name"] for c in report["parent_costs"]["checks"]}
    tpot = diag["npc.tpot"]  # the bound below the engine's per-step overhead
    assert tpot["best"] is None or tpot["best"] > tpot["value"]
    for d in diag.values():
        if d["best"] is not None:
            ok = d["best"] >= d["value"] if d["op"] == ">=" else d["best"] <= d["value"]
            assert ("out of reach" in d["note"]) == (not ok)


def test_a_full_card_memory_bound_gets_one_line_and_the_largest_legal_value():
    """memory <= 12 GiB on a 12 GiB card: vLLM's CUDA context sits outside its pool, so no
    architecture fits; the verdict is proved and the one diagnosis gives 11.5 GiB, with no
    contradicting "within reach" lines."""
    report, _ = example_result("npc-5070-full-card")
    assert report["verdict"] == "infeasible" and "CUDA context" in report["reason"]
    assert [(d["bound"], d["basis"]) for d in report["diagnosis"]] == [("memory", "engine")]
    assert report["diagnosis"][0]["best"] == pytest.approx(11.5 * 2 ** 30, rel=1e-3)  # reports keep 4 digits
    from autocompress.report.feasibility import render_markdown

    md = render_markdown(report)
    assert "largest memory bound that can hold is 11.50 GiB" in md and "within reach" not in md


def test_the_not_found_example_is_between_a_proof_and_a_feasible_contract(tmp_path):
    """The same contract is proved infeasible 3% tighter and feasible 3% looser: the verdicts are
    ordered as the bound moves, and the middle one claims nothing."""
    from autocompress.checker import compute

    src = (EXAMPLES[0].parent / "batch-h100-not-found.acspec").read_text()
    verdicts = []
    for bound in ("88 ms", "91 ms", "94 ms"):
        p = tmp_path / f"e2e-{bound.split()[0]}.acspec"
        p.write_text(src.replace("e2e <= 91 ms", f"e2e <= {bound}"))
        verdicts.append(compute(str(p), None)[0]["verdict"])
    assert verdicts == ["infeasible", "not_found", "feasible"]
