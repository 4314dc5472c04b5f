"""Faults on a real build: ``acc build`` of the tests' tiny spec (``tests/compress/_buildkit.py``: a
random 4-layer Llama parent, two data files, a contract it misses) killed with SIGKILL at a chosen
point and rerun, and two builds run at once. What ``bench.faults`` and its CI sample are made of.

Every build is a fresh process group (``python -m autocompress.cli build SPEC --quiet --no-verify``,
unbuffered) whose log lines are read as they come, each with its time since the start. Each build
runs one thread (``OMP_NUM_THREADS=1``: at this size, faster than two and the same weights), so
builds side by side on a few cores do not oversubscribe them; solo and faulted builds run alike.

The stage a build is in follows from its log: each stage of the recipe has a line that ends it
(``STAGES``), and a build is in the first stage whose end it has not logged. The export logs only
its start: its end is its output folder appearing (it is written under a temporary name and
renamed), or in a log alone, the evaluation's first line.

A kill point is a stage and a fraction of that stage's duration in a solo build of the same spec:
the build is killed (SIGKILL to its process group) that long after it logged the end of the stage
before. The stage it was really in is read back from its log, which can differ when a run is slower
or faster than the solo one; a kill that comes after the build exited kills nothing (a *no-op*
trial, still rerun and compared).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from autocompress.build import lock

ROOT = Path(__file__).resolve().parents[2]
BUILDKIT = ROOT / "tests" / "compress" / "_buildkit.py"
OUT = "out/tiny"  # the tiny spec's output, relative to its folder
# every build process writes and reads the bytecode of autocompress's modules here, as an installed
# package has it, rather than compiling them afresh where PYTHONDONTWRITEBYTECODE is set
PYCACHE = Path(tempfile.gettempdir()) / f"autocompress-{os.getuid()}" / "pycache"
# the benchmarks' few-document fixture (as every test build reads it): the accuracy stage runs
EVAL_DATA = ROOT / "tests" / "fixtures" / "eval-data"

# The recipe's stages in order (pipeline.run_build), each with the log line that ends it. "check" is
# the command's start: interpreter, imports, the check, the output lock, the derived settings (the
# parent's load falls in "data"); "report" is the build report written after the accuracy stage;
# "exit" is what runs after "built".
STAGES: tuple[tuple[str, str], ...] = (
    ("check", r"  \w[\w ]* {2,}\S"),  # the settings table's first row, logged once the output is locked
    ("data", r"\[data\] "),
    ("importance", r"\[removal KL"),
    ("teacher", r"\[teacher "),
    ("evaluate (parent)", r"\[evaluate parent: HumanEval\]"),
    ("search", r"\[search\] measured choice"),
    ("shortlist", r"\[shortlist\] short-distillation choice|\[distill\] \d+ steps x"),
    ("distill", r"\[export\] "),
    ("export", r"\[evaluate \("),  # or its output folder appears (renamed into place)
    ("evaluate", r"\[evaluate \(.*HumanEval\]"),
    ("accuracy", r"\[accuracy"),  # its last line: one per task and model (MANY)
    ("report", r"stage times:"),
    ("exit", r"built "),  # never an end: the last stage
)
NAMES = [s for s, _ in STAGES]
EXPORT = NAMES.index("export")
# stages that log many lines, their end the last: a solo build of the spec counts them
MANY = {NAMES.index("accuracy")}


def count_many(lines: list[str]) -> dict[int, int]:
    """How many lines each stage of ``MANY`` logged in a finished build."""
    return {i: sum(bool(re.match(STAGES[i][1], line)) for line in lines) for i in MANY}


class Tracker:
    """The stages a build has done, from its log lines fed in order. A stage ends at the first line
    matching its end, or for a stage of ``MANY`` at the ``expected``-th line matching it (as many
    as in a solo build). A stage that logged nothing (cached, or skipped) is passed when a later
    stage's line shows."""

    def __init__(self, expected: dict[int, int]):
        self.expected, self.seen, self.done = expected, dict.fromkeys(MANY, 0), 0

    def feed(self, line: str) -> int:
        for i in range(self.done, len(STAGES) - 1):
            if re.match(STAGES[i][1], line):
                if i in MANY:
                    self.seen[i] += 1
                    self.done = i + 1 if self.seen[i] >= self.expected.get(i, 1) else i
                else:
                    self.done = i + 1
                break
        return self.done


def stage_reached(lines: list[str], expected: dict[int, int], exported: bool = False) -> int:
    """Index in ``STAGES`` of the stage a build is in after logging ``lines`` (``expected``: the
    line counts of ``MANY`` in a solo build; ``exported``: its output folder exists): one past the
    last stage whose end it logged."""
    t = Tracker(expected)
    for line in lines:
        t.feed(line)
    return EXPORT + 1 if exported and t.done == EXPORT else t.done


def _buildkit():
    """tests/compress/_buildkit.py (the tiny parent, data and spec of the build tests)."""
    if "_buildkit" in sys.modules:
        return sys.modules["_buildkit"]
    spec = importlib.util.spec_from_file_location("_buildkit", BUILDKIT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_buildkit"] = mod
    spec.loader.exec_module(mod)
    return mod


def make_template(root: Path) -> Path:
    """The tiny project under ``root``: ``parent/``, ``data/``, ``spec.acspec`` and ``spec-b.acspec``
    (another spec on the same parent and data: 8 distillation steps instead of 6, output
    ``out/tiny-b``; its stages up to the shortlist are the same as the first's)."""
    spec = _buildkit().make_project(root)
    text = spec.read_text()
    b = text.replace("steps 6  seq_len", "steps 8  seq_len").replace(f'output "{OUT}"', f'output "{OUT}-b"')
    assert b.count("steps 8") == 1 and f'"{OUT}-b"' in b, "the tiny spec changed: update make_template"
    (root / "spec-b.acspec").write_text(b)
    return root


def project(template: Path, folder: Path) -> Path:
    """A fresh copy of the template at ``folder`` (its own outputs and, under ``cache/``, its own cache)."""
    shutil.copytree(template, folder, ignore=shutil.ignore_patterns("out", "cache", "work"))
    return folder


def weights_hash(out: Path) -> str | None:
    f = out / "model.safetensors"
    return hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else None


@dataclass
class Build:
    """One ``acc build`` in its own process group, its log read line by line as it comes."""

    folder: Path
    spec: str = "spec.acspec"
    work: str | None = None
    t0: float = 0.0
    lines: list[tuple[float, str]] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    reader: threading.Thread | None = None
    wall: float = 0.0  # seconds from the start to the exit
    expected: dict[int, int] = field(default_factory=dict)  # line counts of MANY in a solo build
    _tracker: Tracker | None = None
    _parsed: int = 0  # lines fed to the tracker

    def start(self) -> "Build":
        env = {**os.environ, "ACC_CACHE_DIR": str(self.folder / "cache"), "PYTHONUNBUFFERED": "1",
               "PYTHONPYCACHEPREFIX": str(PYCACHE), "OMP_NUM_THREADS": "1", "ACC_EVAL_DATA": str(EVAL_DATA)}
        for k in ("ACC_DEBUG", "ACC_CRASH_AT", "ACC_CRASH_RANK", "PYTHONDONTWRITEBYTECODE"):
            env.pop(k, None)
        cmd = [sys.executable, "-m", "autocompress.cli", "build", self.spec, "--quiet", "--no-verify"]
        if self.work:
            cmd += ["--work", self.work]
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=self.folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.perf_counter() - self.t0, line.rstrip("\n")))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def out(self) -> Path:
        name = OUT + ("-b" if self.spec == "spec-b.acspec" else "")
        return self.folder / name

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def stage(self) -> int:
        """Index in ``STAGES`` of the stage the build is in now (``stage_reached``, read incrementally)."""
        self._tracker = self._tracker or Tracker(self.expected)
        n = len(self.lines)
        for _, line in self.lines[self._parsed:n]:
            self._tracker.feed(line)
        self._parsed = n
        done = self._tracker.done
        return EXPORT + 1 if done == EXPORT and self.out().exists() else done

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float = 900.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            rc = self.proc.wait()
        self.wall = self.wall or self.elapsed()
        self.reader.join(30)
        return rc

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def run(folder: Path, spec: str = "spec.acspec", work: str | None = None) -> tuple[int, Build]:
    """One build to its end: (exit code, the build)."""
    b = Build(folder, spec, work).start()
    return b.wait(), b


@dataclass(frozen=True)
class Solo:
    """What a solo build of ``spec.acspec`` tells the kill points: each stage's (start, end) in
    seconds since its start (a stage ends when its end is logged, the next starts there), and the
    line counts of ``MANY``."""

    spans: dict[str, tuple[float, float]]
    expected: dict[int, int]

    @classmethod
    def of(cls, b: Build) -> "Solo":
        expected = count_many([line for _, line in b.lines])
        ends, t = {}, Tracker(expected)
        for when, line in b.lines:
            before = t.done
            for i in range(before, t.feed(line)):
                ends[i] = when
        spans, start = {}, 0.0
        for i, name in enumerate(NAMES[:-1]):
            end = ends.get(i, start)
            spans[name] = (start, end)
            start = end
        return cls(spans, expected)


@dataclass(frozen=True)
class Point:
    """Kill ``fraction`` of the stage's solo duration after the stage before it ended."""

    stage: str
    fraction: float

    def delay(self, solo: Solo) -> float:
        a, b = solo.spans[self.stage]
        return self.fraction * (b - a)


def points(n: int, seed: int) -> list[Point]:
    """``n`` kill points: the stages in a shuffled round (every stage once per ``len(NAMES) - 1``
    trials, so a sweep covers all of them), each at a uniform fraction of its duration."""
    rng = random.Random(seed)
    stages: list[str] = []
    while len(stages) < n:
        stages += rng.sample(NAMES[:-1], len(NAMES) - 1)
    return [Point(s, round(rng.random(), 3)) for s in stages[:n]]


def kill_at(b: Build, point: Point, solo: Solo) -> float | None:
    """SIGKILL the build's process group at ``point``; the kill time in seconds since its start, or
    None when the build exited first."""
    before = NAMES.index(point.stage) - 1
    delay = point.delay(solo)
    anchor = 0.0 if before < 0 else None
    while b.proc.poll() is None:
        if anchor is None and b.stage() > before:
            anchor = b.elapsed()
        if anchor is not None and b.elapsed() >= anchor + delay:
            b.signal(signal.SIGKILL)
            t = b.elapsed()
            b.wait()
            return t
        time.sleep(0.005)
    return None


def kill_trial(template: Path, folder: Path, point: Point, solo: Solo, reference: str) -> dict:
    """A fresh project killed at ``point`` then rebuilt with the same command and cache: the row."""
    project(template, folder)
    b = Build(folder, expected=solo.expected).start()
    t = kill_at(b, point, solo)
    killed_rc = b.wait()
    no_op = t is None or killed_rc == 0  # it exited by itself, before the kill or as it came
    row = {"aimed": point.stage, "fraction": point.fraction, "delay_s": round(point.delay(solo), 3),
           "kill_s": None if no_op else round(t, 2), "exit_killed": killed_rc,
           "stage": "finished before the kill" if no_op else NAMES[b.stage()],
           "temporaries": sum(".tmp" in p.name for p in folder.rglob("*")),
           # the export renames a whole folder into place: after a kill there is none, or a whole one
           "output_left": None if not b.out().exists() else weights_hash(b.out()) == reference}
    rc, again = run(folder)
    log = again.text()
    row.update(rerun_exit=rc, hash=weights_hash(again.out()), equal=weights_hash(again.out()) == reference,
               stale_lock="taking over the stale lock" in log,
               resumed_checkpoint="resuming from the last checkpoint" in log,
               cached=len(re.findall(r"^\[[^\]]+\] cached", log, re.M)), corrupt="is corrupt" in log,
               traceback="Traceback" in log, no_op=no_op)
    if rc != 0:
        row["log_tail"] = log[-3000:]
    return row


def two_specs(template: Path, folder: Path) -> dict:
    """``spec.acspec`` and ``spec-b.acspec`` built at once, sharing one cache and one ``--work``
    folder: the row (``judge`` compares its weights with the solo builds'). Counts the stages one
    waited for and those it found computed by the other."""
    project(template, folder)
    builds = [Build(folder, spec, work="work").start() for spec in ("spec.acspec", "spec-b.acspec")]
    rcs = [b.wait() for b in builds]
    logs = "\n".join(b.text() for b in builds)
    row = {"case": "two specs, one cache and work folder, at once", "specs": ["spec.acspec", "spec-b.acspec"],
           "exits": rcs, "hashes": [weights_hash(b.out()) for b in builds],
           "waited": len(re.findall(r"waiting for ", logs)),
           "shared": len(re.findall(r"computed by another process", logs)),
           "corrupt": "is corrupt" in logs, "traceback": "Traceback" in logs}
    if rcs != [0, 0]:
        row["log_tail"] = [b.text()[-2000:] for b in builds]
    return row


def same_spec(template: Path, folder: Path) -> dict:
    """Two builds of ``spec.acspec`` started at once in one folder: the row (``judge`` compares the
    weights with the solo build's). The one whose pid the output's lock file names holds the lock;
    it is paused (SIGSTOP) until the other has exited, so the two overlap however slow the machine,
    then resumed. The other must refuse with exit 2 naming the holder's pid."""
    row = {"case": "the same spec twice at once", "specs": ["spec.acspec"], "refused": False}
    project(template, folder)
    builds = [Build(folder).start(), Build(folder).start()]
    lock_file = lock.lock_path(folder / OUT)  # build.pipeline's output lock
    first = None
    while first is None and any(b.proc.poll() is None for b in builds):
        pid = lock.holder(lock_file).get("pid")
        first = next((b for b in builds if b.pid == pid), None)
        if first:
            first.signal(signal.SIGSTOP)
        time.sleep(0.002)
    if first is None:  # both exited, neither having held the lock
        return {**row, "exits": [b.wait() for b in builds], "hashes": [None],
                "log_tail": [b.text()[-2000:] for b in builds]}
    second = builds[1] if first is builds[0] else builds[0]
    second_rc = second.wait()
    first.signal(signal.SIGCONT)
    first_rc = first.wait()
    refusal = next((line for _, line in second.lines if "locked by" in line), "").replace(str(folder), "<folder>")
    refusal = refusal.replace(str(lock_file), "<lock file>")
    row.update(exits=[first_rc, second_rc], hashes=[weights_hash(first.out())], refusal=refusal,
               refused=second_rc == 2 and f"pid {first.pid}" in refusal,
               traceback="Traceback" in first.text() + second.text())
    if not (row["refused"] and first_rc == 0):
        row["log_tail"] = [first.text()[-2000:], second.text()[-2000:]]
    return row


def judge(row: dict, references: dict[str, str]) -> dict:
    """A concurrency row with ``equal``: every build of it that was to finish (one per spec of the
    row, in order) exited 0 with the weights of its spec's solo build."""
    n = len(row["specs"])
    row["equal"] = row["exits"][:n] == [0] * n and row["hashes"] == [references[s] for s in row["specs"]]
    return row


__all__ = ["NAMES", "STAGES", "Build", "Point", "Solo", "judge", "kill_trial", "make_template", "points", "project",
           "run", "same_spec", "stage_reached", "two_specs", "weights_hash"]
