"""Progress of long stages: one callback interface from the stages; only the CLI renders it.

A stage receives a ``Progress`` and opens one task per long loop::

    with progress.task("distill", total=cfg.steps, unit="step") as t:
        for step in ...:
            ...
            t.advance(loss=f"{loss:.4f}")

``Progress`` keeps the state (done, rate, ETA, fields) and forwards events to a sink: the CLI's
rich sink draws bars on a terminal, ``LineSink`` writes plain log lines with rate and ETA (not a
TTY, ``--quiet``, library use), and the default sink drops everything but log lines. Rendering
never happens in a stage, so the stages stay free of terminal code and tests see plain text.

The ETA is the remaining work at the mean rate so far (the rate of the last items misleads
when steps vary, e.g. a cached chunk followed by computed ones); a step that reports nothing
while it runs (an engine start) may carry the duration it took last time (``expected_s``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol


@dataclass
class TaskState:
    name: str
    total: float | None
    unit: str
    started: float = field(default_factory=time.perf_counter)
    done: float = 0.0
    skipped: float = 0.0  # items that came from a cache: not counted in the rate
    fields: dict = field(default_factory=dict)
    finished: float | None = None
    expected_s: float | None = None  # a duration known beforehand (a step that reports nothing while it runs)

    @property
    def elapsed_s(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    @property
    def rate(self) -> float | None:
        """Items per second over the work actually done here (cached items excluded)."""
        work = self.done - self.skipped
        return work / self.elapsed_s if work > 0 and self.elapsed_s > 0 else None

    @property
    def eta_s(self) -> float | None:
        if self.rate is None and self.expected_s is not None:
            return max(0.0, self.expected_s - self.elapsed_s)
        if self.total is None or self.rate is None:
            return None
        return max(0.0, self.total - self.done) / self.rate


class Sink(Protocol):
    def start(self, task: TaskState) -> None: ...
    def update(self, task: TaskState) -> None: ...
    def finish(self, task: TaskState) -> None: ...
    def log(self, message: str) -> None: ...


class LogOnly:
    """Log lines to ``write``; task events dropped (the default for library callers)."""

    def __init__(self, write: Callable[[str], None] = lambda m: None):
        self.write = write

    def start(self, task: TaskState) -> None:
        pass

    def update(self, task: TaskState) -> None:
        pass

    def finish(self, task: TaskState) -> None:
        pass

    def log(self, message: str) -> None:
        self.write(message)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def rate_text(task: TaskState) -> str:
    """``3.4 s/step``, ``112 s/chunk`` or ``125 tensor/s`` ("" before any work)."""
    r = task.rate
    if not r:
        return ""
    if r >= 1:
        return f"{r:,.3g} {task.unit}/s"
    per = 1 / r
    return f"{per:.2g} s/{task.unit}" if per < 10 else f"{per:,.0f} s/{task.unit}"


def describe(task: TaskState) -> str:
    """``[distill] 12/60 step  3.4 s/step  ETA 2m43s  loss 3.4102``: one line of a task's state."""
    count = f"{task.done:g}/{task.total:g}" if task.total is not None else f"{task.done:g}"
    parts = [f"[{task.name}] {count} {task.unit}".rstrip()]
    if task.rate:
        parts.append(rate_text(task))
    if task.finished is None and task.total is not None:
        parts.append(f"ETA {duration(task.eta_s)}")
    else:
        parts.append(f"in {duration(task.elapsed_s)}")
    parts += [f"{k} {v}" for k, v in task.fields.items()]
    return "  ".join(parts)


class LineSink(LogOnly):
    """Plain lines: a task's state at most every ``every_s`` seconds, and when it ends."""

    def __init__(self, write: Callable[[str], None], every_s: float = 10.0):
        super().__init__(write)
        self.every_s = every_s
        self._last: dict[int, float] = {}

    def start(self, task: TaskState) -> None:
        self._last[id(task)] = time.perf_counter()

    def update(self, task: TaskState) -> None:
        if task.total is not None and task.done >= task.total:
            return  # the task's last line comes with ``finish``
        now = time.perf_counter()
        if now - self._last.get(id(task), 0.0) >= self.every_s:
            self._last[id(task)] = now
            self.write(describe(task))

    def finish(self, task: TaskState) -> None:
        self._last.pop(id(task), None)
        self.write(describe(task))


class Task:
    def __init__(self, owner: "Progress", state: TaskState):
        self.owner, self.state = owner, state

    def advance(self, n: float = 1, cached: bool = False, total: float | None = None, **fields) -> None:
        """``n`` more items done; ``total``: a re-estimated total, reported in the same event."""
        if total is not None:
            self.state.total = total
        self.state.done += n
        if cached:
            self.state.skipped += n
        self.state.fields.update(fields)
        self.owner.sink.update(self.state)

    def set_total(self, total: float | None) -> None:
        """A total learnt (or re-estimated) while the task runs: a chunk count, a round estimate."""
        self.state.total = total
        self.owner.sink.update(self.state)

    def close(self) -> None:
        if self.state.finished is None:
            self.state.finished = time.perf_counter()
            self.owner.sink.finish(self.state)

    def __enter__(self) -> "Task":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Progress:
    """What stages report to. ``Progress()`` is silent; ``Progress(LineSink(print))`` prints."""

    def __init__(self, sink: Sink | None = None):
        self.sink: Sink = sink if sink is not None else LogOnly()

    def log(self, message: str) -> None:
        self.sink.log(message)

    def task(self, name: str, total: float | None = None, unit: str = "it") -> Task:
        state = TaskState(name, total, unit)
        self.sink.start(state)
        return Task(self, state)


def as_progress(progress: "Progress | Callable[[str], None] | None") -> Progress:
    """A ``Progress`` from what a caller passes: one, a log function, or nothing (silent)."""
    if isinstance(progress, Progress):
        return progress
    return Progress(LogOnly(progress)) if callable(progress) else Progress()
