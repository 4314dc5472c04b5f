#!/usr/bin/env python3
"""Why a launched process ends with ``dist.leave`` (os._exit) and not a plain return.

Runs ``tests/compress/_distworker.py``'s resume (FSDP2 distillation from a sharded checkpoint, two
gloo ranks under torchrun) again and again, alternating two ways to end the process:

* ``leave``: ``dist.leave(0)`` after ``dist.shutdown()``, as ``acc build`` does;
* ``finalize``: a plain return, so the interpreter finalizes and C++ static destructors run.

Each run also lists the native threads alive after ``destroy_process_group`` (/proc/self/task).
Writes ``bench/results/gloo_exit.md``:

    python bench/gloo_exit.py --runs 40
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "compress" / "_distworker.py"


def torchrun(out: Path, mode: str, ckpt: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(WORKER), str(out), mode, str(ckpt)], env=env, capture_output=True, text=True,
                          timeout=600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="runs per arm (alternating)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gloo_exit.md"))
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent), "PYTHONFAULTHANDLER": "1"}
    work = Path(tempfile.mkdtemp(prefix="gloo-exit-"))
    counts = {arm: collections.Counter() for arm in ("leave", "finalize")}
    threads: dict[str, collections.Counter] = {}
    aborts: list[str] = []
    t0 = time.time()
    try:
        p = torchrun(work, "fresh", work / "ckpt", env)
        if p.returncode:
            sys.stderr.write(p.stderr[-3000:])
            return 1
        for i in range(args.runs):
            for arm in ("leave", "finalize") if i % 2 == 0 else ("finalize", "leave"):
                ckpt = work / f"c-{arm}"
                shutil.rmtree(ckpt, ignore_errors=True)
                shutil.copytree(work / "ckpt", ckpt)
                tag = work / f"threads-{arm}"
                p = torchrun(work, "resume", ckpt, {**env, "DISTWORKER_EXIT": arm, "DISTWORKER_THREADS": str(tag)})
                aborted = "SIGABRT" in p.stderr
                counts[arm]["runs"] += 1
                counts[arm]["failed"] += p.returncode != 0
                counts[arm]["sigabrt"] += aborted
                if aborted:
                    aborts.append(f"{arm} run {i + 1}: " + " / ".join(
                        line for line in p.stderr.splitlines() if "terminate called" in line or "Thread 0x" in line
                        or "Current thread" in line)[:300])
                for r in (0, 1):
                    f = Path(f"{tag}-rank{r}.json")
                    if f.exists():
                        threads.setdefault(arm, collections.Counter()).update(json.loads(f.read_text()))
                        f.unlink()
            done = i + 1
            eta = (time.time() - t0) / done * (args.runs - done)
            print(f"[{done}/{args.runs}] leave {dict(counts['leave'])} finalize {dict(counts['finalize'])}"
                  f" (ETA {eta / 60:.0f} min)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = ["# How a launched process ends: dist.leave against a plain return", "",
             f"Command: `python bench/gloo_exit.py --runs {args.runs}`  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {(time.time() - t0) / 60:.0f} min", "",
             "Each run: `_distworker.py resume` (FSDP2 distillation resumed from a sharded checkpoint, 2 gloo ranks), "
             "the two arms alternating.", "",
             "| arm | runs | failed | of them SIGABRT | native threads alive after destroy_process_group (both ranks, all runs) |",
             "|---|---|---|---|---|"]
    for arm, c in counts.items():
        t = ", ".join(f"{k} x{v}" for k, v in sorted(threads.get(arm, {}).items()))
        lines.append(f"| {arm} | {c['runs']} | {c['failed']} | {c['sigabrt']} | {t} |")
    lines += ["", "Aborts:" if aborts else "No aborts.", *[f"- {a}" for a in aborts]]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
