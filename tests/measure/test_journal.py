"""An interrupted interleaved schedule resumes from its journal, and no ratio spans the interruption."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autocompress.measure.interleave import measure_interleaved

TRUE = {"R": 1.0, "A": 1.3, "B": 0.7}


class Host:
    """A worker stand-in whose speed is ``level`` (set per session); it raises after ``stop_after`` runs."""

    def __init__(self, level: float, stop_after: int | None = None):
        self.level, self.stop_after, self.calls = level, stop_after, []

    def __call__(self, folder: Path, limits):
        if self.stop_after is not None and len(self.calls) == self.stop_after:
            raise KeyboardInterrupt
        self.calls.append(folder.name)
        v = TRUE[folder.name] * self.level
        return {"measurements": [{"workload": "w", "ttft_s": v / 10, "tpot_s": v, "e2e_s": 2 * v,
                                  "throughput_tok_s": 1 / v, "other_cpu": 0.0}], "peak_rss_bytes": 100}


def measure(run, journal, passes=2, models=("R", "A", "B")):
    return measure_interleaved({n: Path(n) for n in models}, "R", None, [], None, Path("."), passes=passes, run=run,
                               log=lambda m: None, journal=journal)


def journals(folder: Path) -> list[Path]:
    """The journal files in ``folder`` (one per key: ``journal-<key>.jsonl``)."""
    return sorted(folder.glob("journal-*.jsonl"))


@pytest.mark.parametrize("stop_after", [2, 3, 5, 7])  # after a model, after a reference, at the pass boundary
def test_a_resumed_schedule_measures_only_the_rest_and_its_ratios_hold(tmp_path, stop_after):
    """The second run's host is 40% slower: a model measured then is compared with references
    measured then, never with the first run's (a seam reference is measured where needed)."""
    j = tmp_path / "journal.jsonl"
    first = Host(1.0, stop_after)
    with pytest.raises(KeyboardInterrupt):
        measure(first, j)
    [f] = journals(tmp_path)
    assert len(f.read_text().splitlines()) == 1 + stop_after
    second = Host(1.4)
    res = measure(second, j)
    resumed = sum(bool(r.get("resumed")) for r in res.runs)
    seams = sum(r["role"] == "seam" for r in res.runs)
    assert seams == (stop_after != 5)  # a pass begins with a fresh reference: no seam at its boundary
    assert len(res.runs) == 10 + seams and len(second.calls) == len(res.runs) - resumed
    # every journaled run is reused but a model whose right-hand reference was never measured
    last_was_model = (["R", "A", "R", "B", "R"] * 2)[stop_after - 1] != "R"
    assert resumed == stop_after - last_was_model
    for m in ("A", "B"):
        assert res.ratio[m]["w"]["tpot_s"] == pytest.approx(TRUE[m], rel=1e-9)
        assert res.spread[m]["w"]["tpot_s"] == pytest.approx(0.0, abs=1e-9)
    assert journals(tmp_path) == [f]  # kept until the caller has saved the results
    res.close()
    assert journals(tmp_path) == []  # then a later call measures anew


def test_a_model_is_not_replayed_without_the_reference_after_it(tmp_path):
    j = tmp_path / "journal.jsonl"
    with pytest.raises(KeyboardInterrupt):
        measure(Host(1.0, stop_after=2), j, passes=1)  # R, A measured; A's right neighbour missing
    second = Host(1.4)
    measure(second, j, passes=1)
    assert second.calls == ["R", "A", "R", "B", "R"]  # a seam R, then A again


def test_a_journal_of_other_settings_or_a_torn_line_is_not_replayed(tmp_path):
    j = tmp_path / "journal.jsonl"
    with pytest.raises(KeyboardInterrupt):
        measure(Host(1.0, stop_after=4), j, passes=2)
    other = Host(1.0)
    done = measure(other, j, passes=1)  # another schedule: nothing of the first is taken
    assert other.calls == ["R", "A", "R", "B", "R"]
    assert len(journals(tmp_path)) == 2  # each schedule has its own: the interrupted one is kept
    again = Host(1.0)
    measure(again, j, passes=1)  # not closed (as if the caller crashed writing it): replayed whole
    assert again.calls == []
    done.close()
    with pytest.raises(KeyboardInterrupt):
        measure(Host(1.0, stop_after=3), j, passes=1)
    [f] = [x for x in journals(tmp_path) if len(x.read_text().splitlines()) == 4]
    lines = f.read_text().splitlines()
    f.write_text("\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]) + "\n")  # killed mid-write
    again = Host(1.0)
    res = measure(again, j, passes=1)
    # the torn R goes, A without its right neighbour goes: the first R is replayed, then a seam R
    assert again.calls == ["R", "A", "R", "B", "R"] and res.ratio["A"]["w"]["tpot_s"] == pytest.approx(1.3)
    assert [(r["model"], r["role"], bool(r.get("resumed"))) for r in res.runs][:3] == [
        ("R", "ref", True), ("R", "seam", False), ("A", "model", False)]
    assert json.loads(lines[0])["key"].startswith(f.stem.split("-")[1])


def test_a_journal_not_written_for_a_day_is_not_replayed(tmp_path):
    import os
    import time

    from autocompress.measure.journal import MAX_AGE_S

    j = tmp_path / "journal.jsonl"
    with pytest.raises(KeyboardInterrupt):
        measure(Host(1.0, stop_after=3), j, passes=1)
    [f] = journals(tmp_path)
    old = time.time() - MAX_AGE_S - 60
    os.utime(f, (old, old))
    fresh = Host(1.0)
    measure(fresh, j, passes=1)
    assert fresh.calls == ["R", "A", "R", "B", "R"]


def test_the_key_follows_the_models_config(tmp_path):
    from autocompress.measure.journal import journal_key

    a = tmp_path / "a"
    a.mkdir()
    (a / "config.json").write_text('{"num_hidden_layers": 30}')
    k1 = journal_key({"a": a}, "a", None, [], None, 1, 2, {})
    (a / "config.json").write_text('{"num_hidden_layers": 29}')
    assert journal_key({"a": a}, "a", None, [], None, 1, 2, {}) != k1
    assert journal_key({"a": a}, "a", None, [], None, 2, 2, {}) != journal_key({"a": a}, "a", None, [], None, 1, 2, {})


def test_a_second_interruption_keeps_what_the_resumed_session_measured(tmp_path):
    """Stopped after R, A (A has no right-hand reference), resumed and stopped again after a seam R,
    A, R, B: the third run replays all of the second's runs, the replayed seam included."""
    j = tmp_path / "journal.jsonl"
    with pytest.raises(KeyboardInterrupt):
        measure(Host(1.0, stop_after=2), j, passes=1)
    second = Host(1.4, stop_after=4)
    with pytest.raises(KeyboardInterrupt):
        measure(second, j, passes=1)
    assert second.calls == ["R", "A", "R", "B"]
    third = Host(0.8)
    res = measure(third, j, passes=1)
    assert third.calls == ["R", "B", "R"]  # a seam (B's left neighbour is the second run's), B, R
    assert [(r["role"], bool(r.get("resumed"))) for r in res.runs] == [
        ("ref", True), ("seam", True), ("model", True), ("ref", True), ("seam", False), ("model", False),
        ("ref", False)]
    for m in ("A", "B"):
        assert res.ratio[m]["w"]["tpot_s"] == pytest.approx(TRUE[m], rel=1e-9)


def test_an_ab_measured_in_two_sessions_is_read_through_each_arms_references(tmp_path):
    """verify's model / baseline per pass: measured directly within a session, and through each
    one's own neighbouring references when a resume put them in different sessions."""
    from autocompress.measure.verify import per_pass

    truth = {"P": 1.0, "model": 0.8, "base": 0.9}

    class AB(Host):
        def __call__(self, folder, limits):
            if self.stop_after is not None and len(self.calls) == self.stop_after:
                raise KeyboardInterrupt
            self.calls.append(folder.name)
            v = truth[folder.name] * self.level
            return {"measurements": [{"workload": "w", "ttft_s": v, "tpot_s": v, "e2e_s": v, "throughput_tok_s": 1 / v,
                                      "other_cpu": 0.0}], "peak_rss_bytes": int(1000 * truth[folder.name])}

    def ab(run):
        return measure_interleaved({n: Path(n) for n in ("P", "model", "base")}, "P", None, [], None, Path("."),
                                   passes=1, run=run, log=lambda m: None, journal=tmp_path / "j.jsonl")
    with pytest.raises(KeyboardInterrupt):
        ab(AB(1.0, stop_after=3))  # P, model, P
    res = ab(AB(1.5))  # seam P, base, P on a host 50% slower
    assert {r["session"] for r in res.runs if r["model"] == "model"} != {r["session"] for r in res.runs
                                                                         if r["model"] == "base"}
    assert per_pass(res, "base", "tpot", "w") == pytest.approx([0.8 / 0.9])  # directly it would read 0.593
    assert per_pass(res, "base", "memory", None) == pytest.approx([0.8 / 0.9])
