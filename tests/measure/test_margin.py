"""The memory safety margin a calibration derives from its own held-out errors and RSS repeatability."""

import statistics

import pytest

from autocompress.measure.interleave import measure_interleaved
from autocompress.calibrate.margin import safety_margin

MiB = 2**20
DEFAULT = (0.05, 150 * MiB)


def test_under_prediction_sets_the_fraction_and_rss_spread_the_bytes():
    # predicted / measured - 1: the 5th model is under-predicted by 3% (measured 1/0.97 - 1 = 3.1% above)
    errs = [0.01, 0.02, -0.005, 0.015, -0.03]
    rss = [3600 * MiB, 3640 * MiB, 3610 * MiB, 3660 * MiB, 3620 * MiB]
    f, b, basis = safety_margin(errs, rss, *DEFAULT)
    under = sorted(max(0.0, 1 / (1 + e) - 1) for e in errs)
    assert f == pytest.approx(under[3] + 0.8 * (under[4] - under[3]), abs=1e-4)  # interpolated p95
    assert 0.025 < f < 0.031
    assert b == pytest.approx(2 * statistics.stdev(rss), abs=1)
    assert basis["heldout"] == 5 and basis["reference_runs"] == 5 and basis["bytes"] == b


def test_a_model_that_over_predicts_everything_keeps_its_median_error():
    f, _, basis = safety_margin([0.02, 0.03, 0.025], [100 * MiB, 101 * MiB], *DEFAULT)
    assert basis["p95_under_prediction"] == 0.0 and f == pytest.approx(0.025)


def test_the_margin_never_exceeds_the_default_it_replaces():
    f, b, _ = safety_margin([-0.2, -0.3], [1000 * MiB, 2000 * MiB], *DEFAULT)
    assert (f, b) == DEFAULT


def test_without_evidence_the_default_stands():
    f, b, basis = safety_margin([], [123], *DEFAULT)
    assert (f, b) == DEFAULT and "heldout" not in basis and "reference_runs" not in basis


def test_every_interleaved_run_records_its_peak_rss():
    rss = iter([100, 110, 120, 130, 140])

    def run(folder, limits):
        return {"measurements": [{"workload": "w", "ttft_s": 0.1, "tpot_s": 1.0, "e2e_s": 2.0,
                                  "throughput_tok_s": 1.0, "other_cpu": 0.0}], "peak_rss_bytes": next(rss)}
    from pathlib import Path

    res = measure_interleaved({"R": Path("R"), "A": Path("A"), "B": Path("B")}, "R", None, [], None, Path("."),
                              passes=1, run=run, log=lambda m: None)
    assert [(r["model"], r["peak_rss_bytes"]) for r in res.runs] == [("R", 100), ("A", 110), ("R", 120),
                                                                     ("B", 130), ("R", 140)]
    assert [r["peak_rss_bytes"] for r in res.results_of("R")] == [100, 120, 140]


def test_reports_say_where_the_margin_comes_from():
    from dataclasses import replace

    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import load_profile
    from autocompress.plan.derive import margin_row

    shipped = load_profile(None, resolve_device("cpu"), "vllm")
    assert margin_row(shipped) == ("memory safety margin", "5.0% of non-KV memory + 150 MiB",
                                   "the profile's fixed allowance, not derived from a calibration")
    f, b, basis = safety_margin([0.01, -0.02, 0.03], [3600 * MiB, 3650 * MiB, 3620 * MiB], *DEFAULT)
    fitted = replace(shipped, memory=replace(shipped.memory, margin_fraction=f, margin_bytes=b), margin_basis=basis)
    _, value, why = margin_row(fitted)
    assert value == f"{f:.1%} of non-KV memory + {b / MiB:.0f} MiB" and "3 held-out architectures" in why
    assert "over 3 runs" in why and "derived by the profile's calibration" in why


def test_leave_one_out_errors_join_the_held_out_ones():
    """A quick calibration holds out 2 models; the calibration models, each predicted by a memory fit
    without it, add their errors, and the basis counts both kinds."""
    f, _, basis = safety_margin([0.0, 0.001], [1, 2], *DEFAULT, loo_errors=[-0.04, 0.01, -0.002, 0.003])
    assert basis["heldout"] == 2 and basis["leave_one_out"] == 4
    # the -4% model (measured 4.2% above predicted) now sets the p95 under-prediction
    assert 0.02 < f == basis["p95_under_prediction"] < 0.042


def test_leave_one_out_refits_the_memory_terms_without_each_model(monkeypatch):
    """Rows whose residual is exactly nt + c * shapes leave-one-out to zero error; a model off that
    line by 100 MiB shows it (its own fit would have absorbed part of it)."""
    from autocompress.calibrate import fit

    nt, c = 900 * MiB, 10 * MiB
    shapes = [7, 9, 12, 15, 20]
    rss = [3000 * MiB + i * 50 * MiB for i in range(5)]
    rows = [{"result": {"peak_rss_bytes": r}} for r in rss]
    resid = [nt + c * s for s in shapes]
    monkeypatch.setattr(fit, "memory_residuals", lambda rows_, prof, target: (list(resid), list(shapes)))
    assert fit.loo_memory_errors(rows, None, object()) == pytest.approx([0.0] * 5, abs=1e-6)
    resid[2] += 100 * MiB
    errs = fit.loo_memory_errors(rows, None, object())
    assert errs[2] == pytest.approx(-100 * MiB / rss[2], rel=0.02)  # under-predicted by the 100 MiB
    assert fit.loo_memory_errors(rows[:2], None, object()) == []  # too few to refit
