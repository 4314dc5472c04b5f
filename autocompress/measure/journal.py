"""The run journal of an interleaved measurement: an interrupted schedule resumes where it stopped.

An interleaved run of the fidelity benchmark takes 80 minutes, a two-pass verify of a build with
its baseline 15; losing one to a closed terminal or an ended session costs all of it. Every engine
run is appended to ``journal.jsonl`` in the measurement's work folder (one JSON line, flushed and
fsynced) under a key of everything that shapes a measurement: the models' configs, tokenizers and
weight sizes, the reference, workloads, engine limits, target, passes, threads, the busy-run rule,
this machine, its engine versions, the worker's environment and the measurement code. A later call
with the same key replays the journaled runs in schedule order and measures only the rest.

Why the replay is still drift-proof: a ratio is a model over the mean of its two neighbouring
references, and those must be minutes apart, not a session apart. So a model is replayed only
together with the reference after it, and when the first fresh model would follow a replayed
reference, a fresh *seam* reference is measured first and taken as its left neighbour
(``measure_interleaved``). The caller removes the journal once it has saved the results
(``Interleaved.close``), so a crash while it writes them loses nothing and a later call measures
anew; a journal not written for ``MAX_AGE_S`` is not replayed, and the log says so.

Each line carries the sha256 of its content (``sum``). A damaged *last* line is what a kill
mid-append leaves: it is dropped with a warning and the lines before it are replayed. A damaged
line with lines after it is not a torn append but a damaged file: the log warns and the journal is
not trusted (the schedule is measured afresh).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import deque
from dataclasses import asdict, is_dataclass
from pathlib import Path

from autocompress.cache import code_digest
from autocompress.cost.machine import this_machine
from autocompress.measure.runner import engine_versions, target_dict
from autocompress.parents.resolve import WEIGHT_SUFFIXES

MAX_AGE_S = 24 * 3600  # a day: the host's level has moved by then, but the seam keeps ratios honest


def folder_signature(folder: Path) -> dict:
    """What of an exported folder shapes its measurement: the config (shapes, dtypes, formats;
    without the ``autocompress`` block, which a build rewrites with its timings and a verify with
    its measurements), the tokenizer files, and the name and size of every weight file. Not the
    weights' values: a model with the same shapes runs the same kernels, and hashing 500 MB per
    model would cost seconds. Reports, plots and cards beside the model are not part of it."""
    folder = Path(folder)
    cfg = folder / "config.json"
    config = None
    if cfg.is_file():
        d = json.loads(cfg.read_text())
        d.pop("autocompress", None)
        config = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()
    tok = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("tokenizer*")) if p.is_file()}
    weights = sorted((p.relative_to(folder).as_posix(), p.stat().st_size) for p in folder.rglob("*")
                     if p.is_file() and p.suffix in WEIGHT_SUFFIXES + (".gguf",))
    return {"config": config, "tokenizer": tok, "weights": weights}


def journal_key(models: dict, reference: str, target, workloads, limits, passes, threads, rule) -> str:
    """sha256 of everything the schedule's results depend on (see the module docstring): the
    models in schedule order, the settings, this machine and its engine versions, the environment
    the worker reads, and the measurement code."""
    def plain(x):
        return asdict(x) if is_dataclass(x) else x
    lim = {n: plain(v) for n, v in limits.items()} if isinstance(limits, dict) else plain(limits)
    engine = getattr(target, "engine", None) or "none"
    doc = {"order": list(models), "models": {n: folder_signature(f) for n, f in models.items()}, "reference": reference,
           "target": target_dict(target) if target is not None else None, "workloads": workloads,
           "limits": lim, "passes": passes, "threads": threads, "rule": rule,
           "machine": this_machine(engine).fingerprint, "versions": engine_versions(engine),
           "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("OMP_", "ACC_MEASURE", "VLLM_"))},
           "code": code_digest("autocompress.measure.worker", "autocompress.measure.interleave")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _line(entry: dict) -> str:
    """One journal line: the entry and the sha256 of its canonical JSON (``sum``, checked on read)."""
    body = json.dumps(entry, sort_keys=True)
    return json.dumps({**entry, "sum": hashlib.sha256(body.encode()).hexdigest()[:16]}, sort_keys=True) + "\n"


def _checked(line: str) -> dict | None:
    """The entry of a line ``_line`` wrote, or None when it is not JSON or fails its checksum."""
    try:
        entry = json.loads(line)
        got = entry.pop("sum")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return entry if hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()[:16] == got else None


class RunJournal:
    """``replay``: the journaled runs still to be taken, in order; ``append`` records a fresh one.

    ``path`` names the journal (``<work>/journal.jsonl``); the file is that name with the key's
    first 16 hex digits (``journal-<key>.jsonl``), so measurements of other models or settings in
    the same work folder (``acc profile`` of another parent) keep their own journals. Journals in
    the folder untouched for ``MAX_AGE_S`` are removed."""

    def __init__(self, path: Path, key: str, log=print):
        path = Path(path)
        self.path, self.key = path.with_name(f"{path.stem}-{key[:16]}{path.suffix}"), key
        self.replay: deque = deque()
        self.taken: list[dict] = []  # the journaled runs replayed so far: the file's valid prefix
        now = time.time()
        for old in path.parent.glob(f"{path.stem}-*{path.suffix}"):
            try:
                if old != self.path and now - old.stat().st_mtime > MAX_AGE_S:
                    old.unlink()
            except OSError:
                pass
        lines = self._read(log)
        age = now - self.path.stat().st_mtime if lines else 0.0  # since its last run was written
        if lines and lines[0].get("key") == key and age <= MAX_AGE_S:
            self.head, runs = lines[0], lines[1:]
            self.replay.extend(runs)
            log(f"[measure] resuming: {len(runs)} engine run(s) from {self.path} (begun "
                f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(self.head['created']))}, last written "
                f"{age / 60:.0f} min ago); a fresh reference is measured beside the first new model")
            self._rewrite([self.head] + runs)  # drops a torn last line
            return
        if lines:
            log(f"[measure] {self.path}: a journal last written {age / 3600:.0f} h ago; starting afresh")
        self.head = {"key": key, "created": now}
        self._rewrite([self.head])

    def _read(self, log=print) -> list[dict]:
        try:
            text = self.path.read_text()
        except (OSError, ValueError):  # unreadable, or not UTF-8 text
            return []
        raw = text.splitlines()
        out = []
        for i, ln in enumerate(raw):
            entry = _checked(ln)
            if entry is None and i == len(raw) - 1:  # killed mid-append: the torn line is dropped
                log(f"[measure] warning: {self.path}: its last line is truncated or damaged; dropped")
                break
            if entry is None:
                log(f"[measure] warning: {self.path} is corrupt (line {i + 1} of {len(raw)}: checksum mismatch or "
                    "not JSON); not trusted, measuring afresh")
                return []
            out.append(entry)
        return out

    def _rewrite(self, lines: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write("".join(_line(x) for x in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def next_is(self, *expected: tuple[str, str]) -> bool:
        """Whether the next journaled runs are these (model, role) pairs, in order."""
        return len(self.replay) >= len(expected) and all(
            (e["model"], e["role"]) == x for e, x in zip(self.replay, expected))

    def take(self) -> dict:
        e = self.replay.popleft()
        self.taken.append(e)
        return e

    def drop_rest(self) -> None:
        """Nothing journaled after the runs taken so far will be used: the file keeps only those,
        so that what this run measures next follows them and a later resume can replay it."""
        if self.replay:
            self.replay.clear()
            self._rewrite([self.head] + self.taken)

    def append(self, model: str, role: str, result: dict, run: dict) -> None:
        self.drop_rest()  # after the first fresh run nothing journaled later is reused
        e = {"model": model, "role": role, "result": result, "run": run}
        with open(self.path, "a") as f:
            f.write(_line(e))
            f.flush()
            os.fsync(f.fileno())
        self.taken.append(e)

    def finish(self) -> None:
        """The caller saved the results (``Interleaved.close``): a later call measures anew."""
        self.path.unlink(missing_ok=True)
