"""The engine worker's progress, rendered in the parent process.

The worker (``measure.worker``, a fresh process) writes one JSON event per line on stderr, marked
with ``worker.PROGRESS``: ``load`` (the engine starts), ``loaded``, ``workload`` (one begins) and
``tick`` (a generate call or a request finished: done / total, warm-up included). ``WorkerEvents``
turns them into ``progress`` tasks, so ``acc verify`` and ``acc profile`` show a rate and an ETA
per workload like every other long stage; any other stderr line is kept for the error message.

An engine start reports nothing while it runs (vLLM on CPU takes ~30-40 s here), so its ETA is
the last start of the same engine on this machine (``start_times.json`` in the acc cache), or
unknown the first time.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from autocompress.cache import atomic_write_json, cache_root
from autocompress.progress import Progress

PROGRESS = "@acc-progress "  # the worker's marker (measure.worker.PROGRESS is the same string)


def _starts_file() -> Path:
    return cache_root() / "engine" / "start_times.json"


def last_start_s(engine: str) -> float | None:
    try:
        return float(json.loads(_starts_file().read_text())[engine])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_start_s(engine: str, seconds: float) -> None:
    path = _starts_file()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    atomic_write_json(path, {**known, engine: round(float(seconds), 1)})


class WorkerEvents:
    """Feed it the worker's stderr lines (``line``); ``close`` ends any open task."""

    def __init__(self, progress: Progress | None, label: str, engine: str):
        self.progress = progress or Progress()
        self.label, self.engine = label, engine
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.task = None

    def _open(self, name: str, total, unit: str, expected_s: float | None = None) -> None:
        self.close()
        self.task = self.progress.task(name, total=total, unit=unit)
        self.task.state.expected_s = expected_s

    def line(self, text: str) -> None:
        if not text.startswith(PROGRESS):
            self.tail.append(text.rstrip("\n"))
            return
        try:
            ev = json.loads(text[len(PROGRESS):])
        except ValueError:
            self.tail.append(text.rstrip("\n"))
            return
        kind = ev.get("event")
        if kind == "load":
            self._open(f"{self.label}: {self.engine} start", 1, "start", last_start_s(self.engine))
        elif kind == "loaded":
            if self.task is not None:
                self.task.advance()
            self.close()
            record_start_s(self.engine, ev.get("seconds", 0.0))
        elif kind == "workload":
            unit = "generate" if ev.get("mode") == "batch" else "request"
            self._open(f"{self.label}: {ev.get('name')}", None, unit)
        elif kind == "tick" and self.task is not None:
            self.task.set_total(ev["total"])
            self.task.advance(ev["done"] - self.task.state.done)

    def close(self) -> None:
        if self.task is not None:
            self.task.close()
            self.task = None
