"""The progress interface: rate and ETA, totals learnt while running, a duration known beforehand,
plain lines for --quiet, and the worker's events turned into tasks."""

from __future__ import annotations

import json

from autocompress.measure.events import PROGRESS, WorkerEvents
from autocompress.progress import LineSink, Progress, TaskState, describe


class Recorder:
    def __init__(self):
        self.events = []

    def start(self, t):
        self.events.append(("start", t.name, t.total))

    def update(self, t):
        self.events.append(("update", t.name, t.done, t.total, t.eta_s))

    def finish(self, t):
        self.events.append(("finish", t.name, t.done))

    def log(self, m):
        self.events.append(("log", m))


def test_eta_is_remaining_work_at_the_mean_rate():
    t = TaskState("x", total=10, unit="step", started=0.0)
    t.done, t.finished = 4, 8.0  # 4 steps in 8 s: 2 s/step
    assert t.rate == 0.5
    t.finished = None
    import time

    t.started = time.perf_counter() - 8.0
    assert abs(t.eta_s - 12.0) < 0.1
    assert "ETA 12s" in describe(t) and "2 s/step" in describe(t)
    t.done = 0.05  # 160 s per step: whole seconds, not 1.6e+02
    assert "160 s/step" in describe(t)


def test_expected_duration_gives_an_eta_before_any_work():
    import time

    t = TaskState("engine start", total=1, unit="start", started=time.perf_counter() - 10.0, expected_s=35.0)
    assert abs(t.eta_s - 25.0) < 0.5
    t.expected_s = None
    assert t.eta_s is None


def test_set_total_reaches_the_sink_and_cached_items_do_not_count_in_the_rate():
    rec = Recorder()
    p = Progress(rec)
    with p.task("teacher", unit="chunk") as bar:
        bar.set_total(3)
        bar.advance(cached=True)
        assert bar.state.rate is None  # a chunk from the cache says nothing about the speed
        bar.advance()
    assert ("start", "teacher", None) in rec.events
    assert any(e[0] == "update" and e[3] == 3 for e in rec.events)
    assert rec.events[-1] == ("finish", "teacher", 2)


def test_line_sink_prints_rate_and_eta_at_most_every_interval_and_at_the_end():
    lines = []
    p = Progress(LineSink(lines.append, every_s=3600))
    with p.task("importance", total=4, unit="batch") as bar:
        for _ in range(4):
            bar.advance()
    assert len(lines) == 1 and lines[0].startswith("[importance] 4/4 batch") and " in " in lines[0]
    lines.clear()
    p = Progress(LineSink(lines.append, every_s=0.0))
    with p.task("distill", total=2, unit="step") as bar:
        bar.advance(loss="1.0")
    assert "ETA" in lines[0] and "loss 1.0" in lines[0]
    lines.clear()
    with p.task("removal", total=2, unit="block") as bar:
        bar.advance(2)  # the last item: one line, from finish, not an "ETA 0s" line before it
    assert len(lines) == 1 and "in " in lines[0] and "ETA" not in lines[0], lines


def test_worker_events_become_tasks_with_totals(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path))
    rec = Recorder()
    ev = WorkerEvents(Progress(rec), "verify", "vllm")
    line = lambda **k: PROGRESS + json.dumps(k) + "\n"  # noqa: E731
    ev.line(line(event="load", engine="vllm"))
    ev.line("INFO some engine log line\n")
    ev.line(line(event="loaded", seconds=31.5))
    ev.line(line(event="workload", name="ask", mode="serve"))
    for i in range(1, 4):
        ev.line(line(event="tick", done=i, total=3))
    ev.close()
    names = [e[1] for e in rec.events if e[0] == "start"]
    assert names == ["verify: vllm start", "verify: ask"]
    assert ("finish", "verify: ask", 3) in rec.events
    assert list(ev.tail) == ["INFO some engine log line"]  # kept for the error message
    # the next start of this engine has an ETA from this one
    rec2 = Recorder()
    ev2 = WorkerEvents(Progress(rec2), "verify", "vllm")
    ev2.line(line(event="load", engine="vllm"))
    assert ev2.task.state.expected_s == 31.5
    ev2.close()
