"""Faults on a real build: ``acc build`` of the tests' tiny spec (``tests/compress/_buildkit.py``: a
random 4-layer Llama parent, two data files, a contract it misses) killed with SIGKILL, interrupted
with SIGINT, or starved of disk space at a chosen point, then rerun; and two builds run at once.
What ``bench.faults`` and its CI sample are made of.

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

SIGINT goes to the build's process group, as Ctrl-C in its terminal would (``interrupt_trial``).
A full disk is real (``disk_full_trial``): the project, its work folder, output and cache live on
a small tmpfs mounted for the trial, and when the aimed stage starts writing (``STARTS``: its
temporary folder appears; else its start in the log), the build is paused (SIGSTOP) while a
filler file takes every free byte, so its next write, Python's or safetensors' Rust code's, fails
with ENOSPC. Where mounting is not permitted (not root), ``--simulate`` runs the build under
``python -m bench.lib.faults simulate-enospc``, which makes every write under the project fail
alike once the filler exists: ``open`` for writing and safetensors' ``serialize_file`` (with the
Rust error's own text) raise it. After either fault: what the build left (temporaries, sealed
stage folders that fail their checksums, the output against a previous one), then the same
command on the same folders, which must resume (every stage folder the faulted build committed is
reported cached) and end with the solo build's weights.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import importlib.util
import io
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autocompress import cache
from autocompress.build import lock

ROOT = Path(__file__).resolve().parents[2]
BUILDKIT = ROOT / "tests" / "compress" / "_buildkit.py"
EXPORTKIT = ROOT / "tests" / "export" / "_exportkit.py"
OUT = "out/tiny"  # the tiny spec's output, relative to its folder
WORK = "out/.tiny.acc"  # its work folder (beside the output: no --work)
INTERRUPTED = "interrupted: rerun the same command to resume"
DISK_FULL = "no space left on device writing "
# a committed stage folder, ``<name>-<key>`` (``build.stages``), and the rerun's line for one it found
STAGE_FOLDER = re.compile(r"^(?P<name>.+)-[0-9a-f]{20}$")
CACHED = re.compile(r"^\[[^\]]+\] cached \((?P<folder>[^,)]+)", re.M)
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


def _kit(name: str, path: Path):
    """A test kit by its file (pytest puts their folders on ``sys.path``; a benchmark does not)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _buildkit():
    """tests/compress/_buildkit.py (the tiny parent, data and spec of the build tests), and the
    kit it imports by name, tests/export/_exportkit.py (the offline tokenizer)."""
    _kit("_exportkit", EXPORTKIT)
    return _kit("_buildkit", BUILDKIT)


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
    simulate: Path | None = None  # the filler whose existence makes writes fail (``simulate_enospc``)
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
        if self.simulate is not None:
            cmd[1:3] = ["-m", "bench.lib.faults", "simulate-enospc", str(self.simulate), str(self.folder), "--"]
            env["PYTHONPATH"] = os.pathsep.join([*filter(None, [env.get("PYTHONPATH")]), str(ROOT)])  # bench.lib
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=self.folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, preexec_fn=default_sigint)
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


def footprint(folder: Path) -> int:
    """Bytes the files under ``folder`` take on disk (what a tmpfs must hold for a build there)."""
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def folder_digest(folder: Path) -> str | None:
    """sha256 of every file's relative name and bytes under ``folder`` (None when it is absent):
    equal digests, the same folder byte for byte."""
    if not folder.exists():
        return None
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


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


def strike_at(b: Build, stage: str, delay: float, act) -> float | None:
    """Call ``act()`` ``delay`` seconds after the build logged the end of the stage before ``stage``
    (its start, for the first); the time of the call in seconds since the build's start, or None
    when the build exited first."""
    before = NAMES.index(stage) - 1
    anchor = 0.0 if before < 0 else None
    while b.proc.poll() is None:
        if anchor is None and b.stage() > before:
            anchor = b.elapsed()
        if anchor is not None and b.elapsed() >= anchor + delay:
            t = b.elapsed()
            act()
            return t
        time.sleep(0.005)
    return None


def kill_at(b: Build, point: Point, solo: Solo) -> float | None:
    """SIGKILL the build's process group at ``point``; the kill time in seconds since its start, or
    None when the build exited first."""
    t = strike_at(b, point.stage, point.delay(solo), lambda: b.signal(signal.SIGKILL))
    if t is not None:
        b.wait()
    return t


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


# ---- after a fault: what the build left, and the rerun ------------------------------------------------

def temporaries(folder: Path) -> list[str]:
    """Temporary names left under ``folder`` (``cache.atomic_dir``'s ``.NAME.tmp-XXXX``,
    ``atomic_write_bytes``' ``.NAME.XXXX.tmp``), relative to it."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if ".tmp" in p.name)


def damaged(folder: Path) -> list[str]:
    """Sealed stage folders under ``folder`` (a ``DONE`` marker) that fail their checksums: what a
    rerun would have to refuse."""
    return sorted(d.parent.relative_to(folder).as_posix() for d in folder.rglob("DONE")
                  if d.is_file() and cache.corruption(d.parent) is not None)


def committed(work: Path) -> list[str]:
    """The stage names (``importance``, ``accuracy``: one per folder) of the folders committed in
    ``work``, sorted."""
    if not work.is_dir():
        return []
    return sorted(m.group("name") for d in work.iterdir()
                  if (d / "DONE").is_file() and (m := STAGE_FOLDER.match(d.name)))


def cached_stages(log: str) -> list[str]:
    """The stage names a build's log reports cached (``[importance] cached (importance-<key>)``)."""
    return sorted(m.group("name") for f in CACHED.findall(log) if (m := STAGE_FOLDER.match(f)))


def place_previous(previous: Path | None, folder: Path) -> str | None:
    """Copy an earlier build's output to the project's output folder; its digest (``folder_digest``)."""
    if previous is None:
        return None
    shutil.copytree(previous, folder / OUT)
    return folder_digest(folder / OUT)


def output_state(out: Path, previous: str | None, reference: str) -> str:
    """What the output folder holds after a fault: ``none``; ``previous, intact`` (byte for byte);
    ``new`` (exported, the solo weights; ``, no report yet`` when the fault came before the report);
    ``previous, changed`` or ``other weights`` (both wrong)."""
    if not out.exists():
        return "none"
    if previous is not None and folder_digest(out) == previous:
        return "previous, intact"
    if weights_hash(out) == reference:
        return "new" + ("" if (out / "autocompress-report.md").exists() else ", no report yet")
    return "previous, changed" if previous is not None else "other weights"


def output_ok(state: str, previous: str | None) -> bool:
    """No half output: none (when there was none before), the previous one intact, or a new whole one."""
    return state.startswith("new") or state == ("previous, intact" if previous is not None else "none")


def _rerun(folder: Path, reference: str, done: list[str]) -> dict:
    """The same command on the same folders after a fault: its exit, weights, and whether it resumed
    (every stage folder in ``done`` reported cached)."""
    rc, again = run(folder)
    log = again.text()
    cached = cached_stages(log)
    row = {"rerun_exit": rc, "hash": weights_hash(again.out()), "cached": len(cached),
           "resumed": not (Counter(done) - Counter(cached)), "corrupt": "corrupt" in log,
           "rerun_traceback": "Traceback" in log}
    row["equal"] = rc == 0 and row["hash"] == reference
    if rc != 0:
        row["log_tail"] = log[-3000:]
    return row


def interrupt_trial(template: Path, folder: Path, point: Point, solo: Solo, reference: str,
                    previous: Path | None = None) -> dict:
    """A fresh project (with a copy of ``previous`` as its output when given) sent SIGINT at ``point``,
    then rebuilt with the same command: the row. ``ok``: exit 130 with the one line and no traceback,
    no temporaries or damaged stage folders left, no half output, and a rerun that resumes and ends
    with the solo weights (a build that exited before the signal: only the rerun's part)."""
    project(template, folder)
    before = place_previous(previous, folder)
    b = Build(folder, expected=solo.expected).start()
    at = []  # the stage at the signal: as the interrupt unwinds, a stage's progress line can look like its end

    def interrupt() -> None:
        at.append(NAMES[b.stage()])
        b.signal(signal.SIGINT)

    t = strike_at(b, point.stage, point.delay(solo), interrupt)
    rc = b.wait()
    text = b.text()
    no_op = t is None or rc == 0
    row = {"fault": "SIGINT", "aimed": point.stage, "fraction": point.fraction,
           "delay_s": round(point.delay(solo), 3), "at_s": None if no_op else round(t, 2), "exit": rc,
           "stage": "finished before the signal" if no_op else at[0],
           "message": INTERRUPTED in text, "traceback": "Traceback" in text,
           "temporaries": temporaries(folder), "damaged": damaged(folder), "previous": before is not None,
           "output": output_state(b.out(), before, reference), "committed": committed(folder / WORK),
           "no_op": no_op}
    if not no_op and not (rc == 130 and row["message"] and not row["traceback"]):
        row["log"] = text if len(text) < 8000 else text[:3000] + "\n[...]\n" + text[-5000:]
    row.update(_rerun(folder, reference, row["committed"]))
    row["ok"] = (no_op or (rc == 130 and row["message"] and not row["traceback"] and not row["temporaries"]
                           and not row["damaged"] and output_ok(row["output"], before))) and \
        row["equal"] and row["resumed"] and not row["rerun_traceback"]
    return row


# ---- a full disk: a small tmpfs, filled when the aimed stage starts --------------------------------------

def default_sigint() -> None:
    """In the child before it runs: SIGINT back to its default. A process started in the background
    by a shell without job control (a CI runner, ``cmd &``) inherits SIGINT *ignored*, and Python then
    never turns it into KeyboardInterrupt; a terminal's Ctrl-C reaches a foreground build with the
    default, which is what the SIGINT rows stand for."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (root, or a user namespace that allows it)."""
    with tempfile.TemporaryDirectory(prefix="acc-mount-") as d:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d], capture_output=True).returncode:
            return False
        _umount(Path(d))
        return True


def _umount(where: Path) -> None:
    for args in (["umount", str(where)], ["umount", "-l", str(where)]):  # lazily when a file is still open
        if subprocess.run(args, capture_output=True).returncode == 0:
            return


def fill(filler: Path) -> int:
    """Take every free byte of ``filler``'s filesystem with it (``posix_fallocate`` of what statvfs
    says is free, then 64 KiB and 4 KiB writes until ENOSPC, while a build may write beside it);
    its size in bytes."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        st = os.statvfs(filler.parent)
        for spare in (0, 4 << 20):  # the build may have taken some meanwhile
            try:
                os.posix_fallocate(fd, 0, max(4096, st.f_bavail * st.f_frsize - spare))
                break
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        size = os.fstat(fd).st_size
        for chunk in (b"\0" * 65536, b"\0" * 4096):
            while True:
                try:
                    size += os.pwrite(fd, chunk, size)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        return size
    finally:
        os.close(fd)


# Where a stage starts writing, for a full disk: its temporary folder appears (``cache.atomic_dir``; the
# teacher's top-k cache folder). The log shows a stage's end before its folder is committed, so a
# disk filled at that line fails the commit of the stage before; the others start at their log line.
STARTS = {"importance": f"{WORK}/.importance-*.tmp-*", "teacher": f"{WORK}/teacher-*",
          "evaluate (parent)": f"{WORK}/.parent-quality-*.tmp-*", "search": f"{WORK}/.search-*.tmp-*",
          "shortlist": f"{WORK}/.shortlist-*.tmp-*", "distill": f"{WORK}/.distill-*.tmp-*",
          "export": f"{Path(OUT).parent}/.{Path(OUT).name}.tmp-*", "evaluate": f"{WORK}/.evaluate-*.tmp-*",
          "accuracy": f"{WORK}/.accuracy-*.tmp-*"}


def when(b: Build, ready, act) -> float | None:
    """Call ``act()`` as soon as ``ready()`` holds; its time since the build's start, or None when
    the build exited first."""
    while b.proc.poll() is None:
        if ready():
            t = b.elapsed()
            act()
            return t
        time.sleep(0.002)
    return None


# the stage that writes a folder, by the folder's name (a stage folder ``<name>-<key>``, its
# ``.partial`` checkpoints, the teacher's top-k, the token cache), first match
FOLDER_STAGE = (("importance", "importance"), ("teacher", "teacher"), ("held", "teacher"),
                ("parent-quality", "evaluate (parent)"), ("search", "search"), ("shortlist", "shortlist"),
                ("runoff", "shortlist"), ("distill", "distill"), ("evaluate", "evaluate"), ("accuracy", "accuracy"),
                ("tokens", "data"))


def failed_in(logged: str, where: str | None, folder: Path) -> str:
    """The stage whose write failed, from the folder the disk-full line names (``where``): the
    stage that writes it, the export or the report for the output (by the log: the report comes
    after the accuracy stage), else the stage the log shows running at the exit (``logged``; a
    stage's progress line, printed as the error unwinds, can make it look ended)."""
    if not where or not Path(where).is_relative_to(folder):
        return logged
    rel = Path(where).relative_to(folder)
    if rel in (Path(OUT), Path(OUT).parent):
        return "report" if NAMES.index(logged) >= NAMES.index("report") else "export"
    for part in rel.parts:
        m = STAGE_FOLDER.match(part.removesuffix(".partial"))
        name = m.group("name") if m else part
        for prefix, stage in FOLDER_STAGE:
            if name == prefix or name.startswith(prefix + "-"):
                return stage
    return logged


def disk_full_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(DISK_FULL)]


def named_folder(line: str) -> str:
    """The folder a disk-full line names (``no space left on device writing <folder>: ...``)."""
    return re.split(r"[:;] ", line[len(DISK_FULL):], maxsplit=1)[0]


def shown(text: str, folder: Path) -> str:
    """``text`` with paths relative to the project ``folder`` and stage keys cut to 6 hex digits
    (for the table: no machine paths)."""
    return re.sub(r"-([0-9a-f]{6})[0-9a-f]{14}\b", r"-\1…", text.replace(str(folder) + os.sep, ""))


def disk_full_trial(template: Path, root: Path, stage: str, solo: Solo, reference: str, previous: Path | None,
                    size: int, simulate: bool = False) -> dict:
    """A fresh project on a tmpfs of ``size`` bytes mounted at ``root`` (with a copy of ``previous`` as
    its output when given), filled up when ``stage`` starts writing (``STARTS``, else its start in
    the log), then, the filler
    removed, rebuilt with the same command: the row. ``simulate``: no mount; the filler's existence
    makes the build's writes fail (``simulate_enospc``). ``ok``: exit 7 with one line naming a
    folder of the project or its cache and no traceback, no temporaries or damaged stage folders
    left, the previous output intact (or a new whole one when the write failed after the export),
    and a rerun that resumes and ends with the solo weights."""
    root.mkdir(parents=True)
    if not simulate:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)], check=True,
                       capture_output=True)
    b = None
    try:
        folder = project(template, root / "project")
        before = place_previous(previous, folder)
        filler = root / "filler"
        b = Build(folder, expected=solo.expected, simulate=filler if simulate else None).start()
        took = {}

        def full() -> None:  # the build paused meanwhile: a short stage (the export) cannot write past it
            t0 = time.perf_counter()
            b.signal(signal.SIGSTOP)
            try:
                if simulate:
                    filler.touch()
                else:
                    took["bytes"] = fill(filler)
            finally:
                b.signal(signal.SIGCONT)
            took["s"] = time.perf_counter() - t0

        if stage in STARTS:  # the stage's own first write: the one before is committed
            t = when(b, lambda: any(folder.glob(STARTS[stage])), full)
        else:
            t = strike_at(b, stage, 0.0, full)
        rc = b.wait()
        text = b.text()
        lines = disk_full_lines(text)
        where = named_folder(lines[0]) if lines else None
        no_op = t is None or rc == 0
        row = {"fault": "ENOSPC (simulated)" if simulate else "ENOSPC", "aimed": stage,
               "at_s": None if t is None else round(t, 2), "fill_s": round(took.get("s", 0.0), 3),
               "filled_mib": round(took.get("bytes", 0) / 2**20, 1), "exit": rc,
               "stage": "finished before the disk was full" if no_op else failed_in(NAMES[b.stage()], where, folder),
               "lines": len(lines), "message": shown(lines[0], folder) if lines else None,
               "folder": shown(where, folder) if where else None,
               "folder_inside": bool(where) and Path(where).resolve().is_relative_to(root.resolve()),
               "traceback": "Traceback" in text, "temporaries": temporaries(folder), "damaged": damaged(folder),
               "previous": before is not None, "output": output_state(b.out(), before, reference),
               "committed": committed(folder / WORK), "no_op": no_op}
        if not no_op and (rc != 7 or row["traceback"]):
            row["log"] = text if len(text) < 8000 else text[:3000] + "\n[...]\n" + text[-5000:]
        filler.unlink(missing_ok=True)
        row.update(_rerun(folder, reference, row["committed"]))
        row["ok"] = (no_op or (rc == 7 and len(lines) == 1 and row["folder_inside"] and not row["traceback"]
                               and not row["temporaries"] and not row["damaged"]
                               and output_ok(row["output"], before))) and \
            row["equal"] and row["resumed"] and not row["rerun_traceback"]
        return row
    finally:
        if b is not None and b.proc.poll() is None:
            b.signal(signal.SIGKILL)
            b.wait()
        if not simulate:
            _umount(root)


def simulate_enospc(filler: Path, root: Path, argv: list[str]) -> int:
    """``acc`` (``argv``) in this process, every write under ``root`` failing with ENOSPC once
    ``filler`` exists: opening a file for writing (``open``, ``io.open``: ``Path.write_text``,
    ``os.fdopen``, ``shutil``'s copies) raises ``OSError(ENOSPC)``, and safetensors' Rust writer
    raises its own error with the text it has for a full disk. Patched before the package loads,
    so every ``from safetensors.torch import save_file`` binds the patched writer."""
    import safetensors  # light: the Rust extension, no torch

    real_open, real_serialize = io.open, safetensors.serialize_file
    base = str(root.resolve()) + os.sep

    def full(path) -> bool:
        if not filler.exists():
            return False
        if isinstance(path, int):
            try:
                path = os.readlink(f"/proc/self/fd/{path}")
            except OSError:
                return False
        return os.path.realpath(os.fspath(path)).startswith(base)

    def open_(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and full(file):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), None if isinstance(file, int) else os.fspath(file))
        return real_open(file, mode, *args, **kwargs)

    def serialize_file(tensors, filename, *args, **kwargs):
        if full(filename):
            raise safetensors.SafetensorError(
                f"Error while serializing: I/O error: {os.strerror(errno.ENOSPC)} (os error {errno.ENOSPC})")
        return real_serialize(tensors, filename, *args, **kwargs)

    io.open = builtins.open = open_
    safetensors.serialize_file = serialize_file
    from autocompress.cli.main import main  # after the patches: the writers bind them

    return main(argv)


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
    refusal = re.sub(r"[^\s(]*/(autocompress/cli/__main__\.py)", r"\1", refusal)  # the package's copy: no machine paths
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


__all__ = ["DISK_FULL", "INTERRUPTED", "NAMES", "OUT", "STAGES", "WORK", "Build", "Point", "Solo", "can_mount",
           "default_sigint",
           "disk_full_trial", "footprint", "interrupt_trial", "judge", "kill_trial", "make_template", "points",
           "project", "run", "same_spec", "simulate_enospc", "stage_reached", "two_specs", "weights_hash"]


if __name__ == "__main__":
    # python -m bench.lib.faults simulate-enospc FILLER ROOT -- ACC-ARGS (``Build`` with ``simulate``)
    if len(sys.argv) < 5 or sys.argv[1] != "simulate-enospc" or sys.argv[4] != "--":
        sys.exit("usage: python -m bench.lib.faults simulate-enospc FILLER ROOT -- ACC-ARGS")
    sys.exit(simulate_enospc(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[5:]))
