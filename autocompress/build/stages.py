"""Content-addressed, atomic, resumable stages.

A stage's result lives in ``<work>/<name>-<key>/`` where the key hashes everything the result
depends on (spec, parent, data, settings, upstream keys, and the source of the code it runs). The folder is filled under a
temporary name and renamed into place when complete, with a ``DONE`` marker holding the stage's
small JSON summary, so an interrupted build leaves either nothing or a whole result, and a
rerun skips every stage whose folder exists. The folder is sealed last with ``CHECKSUMS.json``
(``cache.write_checksums``: the sha256 of each file) and checked before it is used: a missing,
truncated or altered file is a warning (``cached <stage> at <folder> is corrupt (<file>: checksum
mismatch); recomputing``) and a recompute, never a load. Long stages that checkpoint (distillation) keep
their checkpoints in ``<work>/<name>-<key>.partial/``, which survives a crash and is removed when
the stage completes.

Under a launcher (``build.dist``) rank 0 alone decides whether the stage is done, fills the
folder and commits it; a *collective* stage (its function uses every rank: importance, search,
distillation) runs on every rank, the others writing into a scratch folder that is dropped, and a
rank-0 stage runs there alone while the others wait. Every rank then reads the committed folder.

Processes sharing a work folder (two specs built with one ``--work``): a stage is computed under
its lock (``build.lock.wait_for``, at ``lock.lock_path`` of its folder), so a process that needs a stage
another is computing logs ``waiting for <stage> (pid N)``, then finds it done and uses it: one
computation, no folder written twice.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autocompress import cache
from autocompress.cache import atomic_dir
from autocompress.build import dist, lock


def crash_point(name: str) -> None:
    """Die like a SIGKILL (no cleanup, exit 137) when ``$ACC_CRASH_AT`` names this point.

    Fault injection for the resume tests: a kill at a chosen point must not depend on timing.
    Points: a stage's name (before its result is committed) or ``distill:N`` (after checkpoint N).
    Under a launcher ``$ACC_CRASH_RANK`` kills that rank alone (one machine of a job dying), in the
    launch's first attempt only (a torchrun ``--max-restarts`` restart then runs through).
    """
    only = os.environ.get("ACC_CRASH_RANK")
    if os.environ.get("ACC_CRASH_AT") == name and (only is None or (
            int(only) == dist.rank() and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0")):
        os._exit(137)


@dataclass(frozen=True)
class StageResult:
    name: str
    key: str
    path: Path
    summary: dict
    cached: bool


def stage_key(name: str, code: tuple[str, ...], *parts: str | bytes) -> str:
    """The key of a stage result: its name, the digest of the code it runs (``code``: the stage's
    modules; everything they import from autocompress is hashed too) and its inputs (``parts``:
    upstream keys and every setting that shapes the result)."""
    return cache.key("stage", name, cache.code_digest(*code) if code else "", *parts)[:20]


def run_stage(work: Path, name: str, key: str, fn: Callable[[Path, Path], dict],
              log: Callable[[str], None] = print, collective: bool = False) -> StageResult:
    """Run ``fn(tmp_dir, partial_dir) -> summary`` unless ``<work>/<name>-<key>`` exists.

    ``collective``: under a launcher ``fn`` runs on every rank (else on rank 0 alone)."""
    if dist.active():
        return _run_stage_ranks(work, name, key, fn, log, collective)
    work.mkdir(parents=True, exist_ok=True)
    final = work / f"{name}-{key}"
    hit = _cached(final, name, log)
    if hit is not None:
        return StageResult(name, key, final, hit, True)
    with lock.wait_for(lock.lock_path(final), final.name, log):
        hit = _cached(final, name, log, quiet=True)  # finished by the process we waited for
        if hit is not None:
            log(f"[{name}] cached ({final.name}, computed by another process)")
            return StageResult(name, key, final, hit, True)
        partial = work / f"{name}-{key}.partial"
        partial.mkdir(exist_ok=True)
        for stale in [*work.glob(f".{final.name}.tmp-*"), *work.glob(f".{final.name}.rank*")]:  # a killed run's
            shutil.rmtree(stale, ignore_errors=True)
        # a folder of this stage that failed its checks (or an older version's, without them) is replaced
        with atomic_dir(final, replace=True) as tmp:
            summary = fn(tmp, partial) or {}
            crash_point(name)  # fault injection for the crash tests: the work is done, not yet committed
            _seal(tmp, summary)
        shutil.rmtree(partial, ignore_errors=True)
    return StageResult(name, key, final, summary, False)


def _seal(tmp: Path, summary: dict) -> None:
    """The ``DONE`` marker, then the checksums of every file (``CHECKSUMS.json``, last)."""
    cache.atomic_write_json(tmp / "DONE", summary)
    cache.write_checksums(tmp)


def _cached(final: Path, name: str, log: Callable[[str], None], quiet: bool = False) -> dict | None:
    """The summary of a complete, intact stage folder, else None (with a warning when the folder is
    there but fails its checksums: it is then recomputed and replaced). ``quiet``: the second look,
    under the stage's lock, says nothing the first said."""
    if not (final / "DONE").exists():
        return None
    why = cache.corruption(final)
    if why is None:
        try:
            summary = json.loads((final / "DONE").read_text())
            if isinstance(summary, dict):
                if not quiet:
                    log(f"[{name}] cached ({final.name})")
                return summary
            why = "DONE: not a JSON object"
        except (OSError, ValueError) as e:
            why = f"DONE: unreadable ({e})"
    if not quiet:
        log(f"warning: cached {name} at {final} is corrupt ({why}); recomputing")
    return None


def _run_stage_ranks(work: Path, name: str, key: str, fn: Callable[[Path, Path], dict], log, collective: bool
                     ) -> StageResult:
    final, partial = work / f"{name}-{key}", work / f"{name}-{key}.partial"
    if dist.from_main(_cached(final, name, log) is not None if dist.is_main() else False):
        return StageResult(name, key, final, json.loads((final / "DONE").read_text()), True)
    if dist.is_main():
        work.mkdir(parents=True, exist_ok=True)
        partial.mkdir(exist_ok=True)
        for stale in [*work.glob(f".{final.name}.tmp-*"), *work.glob(f".{final.name}.rank*")]:
            shutil.rmtree(stale, ignore_errors=True)
    dist.barrier()  # the partial folder (checkpoints) exists, stale scratch is gone, before any rank goes on
    if dist.is_main():
        with atomic_dir(final, replace=True) as tmp:
            summary = fn(tmp, partial) or {}
            crash_point(name)
            _seal(tmp, summary)
    elif collective:
        scratch = work / f".{final.name}.rank{dist.rank()}"
        scratch.mkdir()
        try:
            fn(scratch, partial)
            crash_point(name)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    dist.barrier()  # committed by rank 0; every rank is done with the partial folder
    if dist.is_main():
        shutil.rmtree(partial, ignore_errors=True)
    return StageResult(name, key, final, json.loads((final / "DONE").read_text()), False)
