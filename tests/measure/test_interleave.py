"""Interleaved measurement: the schedule, and ratios that cancel the host's drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from autocompress.measure.interleave import host_index, measure_interleaved


def fake_runner(true: dict, drift):
    """A worker stand-in: model ``m`` measures ``true[m] * drift(i)`` at its i-th run."""
    calls = []

    def run(folder: Path, limits):
        i = len(calls)
        calls.append(folder.name)
        v = true[folder.name] * drift(i)
        return {"measurements": [{"workload": "w", "ttft_s": v / 10, "tpot_s": v, "e2e_s": 2 * v,
                                  "throughput_tok_s": 1 / v, "other_cpu": 0.0}], "peak_rss_bytes": 100}
    return run, calls


def test_schedule_puts_the_reference_around_every_model():
    run, calls = fake_runner({"R": 1.0, "A": 2.0, "B": 0.5}, lambda i: 1.0)
    models = {n: Path(n) for n in ("R", "A", "B")}
    res = measure_interleaved(models, "R", None, [], None, Path("."), passes=2, run=run, log=lambda m: None)
    assert calls == ["R", "A", "R", "B", "R"] * 2
    assert res.ratio["A"]["w"]["tpot_s"] == pytest.approx(2.0) and res.ratio["B"]["w"]["tpot_s"] == pytest.approx(0.5)
    assert res.ratio["A"]["w"]["throughput_tok_s"] == pytest.approx(0.5)
    assert res.spread["A"]["w"]["tpot_s"] == pytest.approx(0.0)


def test_ratios_cancel_a_drift_that_absolute_numbers_do_not():
    """The host speeds up 40% over the run: absolute numbers are far off, ratios are not."""
    drift = lambda i: 1.0 + 0.04 * i  # noqa: E731 - linear in time: the neighbours' mean cancels it exactly
    run, _ = fake_runner({"R": 1.0, "A": 1.1}, drift)
    res = measure_interleaved({"R": Path("R"), "A": Path("A")}, "R", None, [], None, Path("."), passes=3, run=run,
                              log=lambda m: None)
    assert res.ratio["A"]["w"]["tpot_s"] == pytest.approx(1.1, rel=1e-9)
    assert abs(res.absolute["A"]["w"]["tpot_s"] / 1.1 - 1) > 0.1  # the absolute value carries the drift


def test_a_stored_run_reads_back_as_it_was_written():
    """``Interleaved.from_dict`` is ``as_dict``'s inverse (through JSON, as the bench scripts read it)."""
    import json

    from autocompress.measure.interleave import Interleaved

    run, _ = fake_runner({"R": 1.0, "A": 1.3}, lambda i: 1.0 + 0.1 * i)
    res = measure_interleaved({"R": Path("R"), "A": Path("A")}, "R", None, [], None, Path("."), passes=2, run=run,
                              log=lambda m: None)
    back = Interleaved.from_dict(json.loads(json.dumps(res.as_dict())))
    assert back.as_dict() == json.loads(json.dumps(res.as_dict()))
    assert back.ratio["A"]["w"]["tpot_s"] == pytest.approx(1.3) and len(back.runs) == 6


def test_host_index_compares_the_reference_with_its_calibration():
    now = {"w": {"tpot_s": 0.06, "ttft_s": 0.2, "e2e_s": 2.0, "throughput_tok_s": 16.0}}
    cal = {"w": {"tpot_s": 0.04, "ttft_s": 0.2, "e2e_s": 1.6, "throughput_tok_s": 20.0}}
    idx = host_index(now, cal)
    assert idx["w"]["tpot_s"] == pytest.approx(1.5) and idx["w"]["throughput_tok_s"] == pytest.approx(0.8)
    assert host_index(now, None) is None


def test_calibration_sets_hold_the_searchs_shapes_and_normalized_rows_remove_drift():
    from autocompress.lang.model import ParentRef
    from autocompress.calibrate.calibration import calibration_sets, normalized_rows
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    cal, held = calibration_sets(parent)
    assert cal[0].name == "parent" and {"narrow-many", "split", "uniform-w768"} <= {a.name for a in cal}
    assert {"alternating", "shallow-wide"} <= {a.name for a in held} and not {a.name for a in cal} & {a.name for a in held}
    narrow = next(a for a in cal if a.name == "narrow-many")
    assert max(b.ffn.width for b in narrow.blocks) <= 448 and any(b.mixer is None for b in narrow.blocks)
    qc, qh = calibration_sets(parent, quick=True)
    assert len(qc) == 4 and len(qh) == 2
    drift = lambda i: 1.0 + 0.05 * i  # noqa: E731
    true = {a.name: 1.0 + 0.1 * i for i, a in enumerate(qc)}
    run, _ = fake_runner(true, drift)
    res = measure_interleaved({a.name: Path(a.name) for a in qc}, "parent", None, [], None, Path("."), passes=1,
                              run=run, log=lambda m: None)
    wls = [{"name": "w", "mode": "serve", "concurrency": 1, "input_tokens": 1, "output_tokens": 2, "prefix_cache": 0}]
    rows = normalized_rows(res, qc, {a.name: None for a in qc}, wls)
    ref = res.absolute["parent"]["w"]["tpot_s"]
    for r in rows:  # every model at the reference's mean speed: the true ratio times the same number
        assert r["result"]["measurements"][0]["tpot_s"] == pytest.approx(true[r["arch"].name] * ref, rel=1e-9)


def test_a_run_disturbed_by_a_neighbour_is_redone():
    """The second run of A sees another process on the second core (2x slower): it is measured
    again, and the ratio is the undisturbed one; a run busy on every attempt is kept, marked."""
    calls = []

    def run(folder: Path, limits):
        calls.append(folder.name)
        busy = folder.name == "A" and len(calls) == 2
        v = {"R": 1.0, "A": 1.2}[folder.name] * (2.0 if busy else 1.0)
        return {"measurements": [{"workload": "w", "ttft_s": v / 10, "tpot_s": v, "e2e_s": 2 * v,
                                  "throughput_tok_s": 1 / v, "other_cpu": 0.9 if busy else 0.0}],
                "peak_rss_bytes": 100}
    logs = []
    res = measure_interleaved({"R": Path("R"), "A": Path("A")}, "R", None, [], None, Path("."), passes=1, run=run,
                              log=logs.append)
    assert calls == ["R", "A", "A", "R"] and any("measuring again" in m for m in logs)
    assert res.ratio["A"]["w"]["tpot_s"] == pytest.approx(1.2)
    assert [r["attempts"] for r in res.runs] == [1, 2, 1] and not any(r["busy"] for r in res.runs)

    def always_busy(folder: Path, limits):
        return {"measurements": [{"workload": "w", "ttft_s": 0.1, "tpot_s": 1.0, "e2e_s": 2.0,
                                  "throughput_tok_s": 1.0, "other_cpu": 0.9}], "peak_rss_bytes": 100}
    res = measure_interleaved({"R": Path("R")}, "R", None, [], None, Path("."), passes=1, run=always_busy,
                              log=lambda m: None, retries=1)
    assert res.runs[0]["busy"] and res.runs[0]["attempts"] == 2
