#!/usr/bin/env python3
"""Why a launched process ends with ``dist.leave`` (os._exit) and not a plain return.

Runs ``tests/compress/_distworker.py``'s resume (FSDP2 distillation from a sharded checkpoint, two
gloo ranks under torchrun) again and again, alternating two ways to end the process:

* ``leave``: ``dist.leave(0)`` after ``dist.shutdown()``, as ``acc build`` does;
* ``finalize``: a plain return, so the interpreter finalizes and C++ static destructors run.

Each run also lists the native threads alive after ``destroy_process_group`` (/proc/self/task).
A toy (``--toy``, two ranks, seconds) shows what keeps them: nothing after a bare process group, a
DeviceMesh until it is collected, FSDP2 (``fully_shard`` and one backward) even after ``del`` and
``gc.collect()``. Writes ``bench/results/gloo_exit.md``:

    python bench/gloo_exit.py --runs 30
    python bench/gloo_exit.py --toy           # the toy alone, printed
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


def torchrun(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``script`` under torchrun, two ranks on this machine."""
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), *args], env=env, capture_output=True, text=True, timeout=600)


TOY = r"""
import collections, gc, os, sys
import torch, torch.distributed as d
def threads():
    return dict(sorted(collections.Counter(open(f"/proc/self/task/{t}/comm").read().strip()
                                           for t in os.listdir("/proc/self/task")).items()))
case = sys.argv[1]
d.init_process_group("gloo")
held = []
if case in ("mesh", "fsdp"):
    from torch.distributed.device_mesh import init_device_mesh
    held.append(init_device_mesh("cpu", (d.get_world_size(),)))
if case == "fsdp":
    from torch.distributed.fsdp import fully_shard
    m = torch.nn.Linear(8, 8)
    fully_shard(m, mesh=held[0])
    m(torch.randn(2, 8)).sum().backward()
    held.append(m)
d.barrier()
d.destroy_process_group()
after_destroy = threads()
held.clear()
m = None
gc.collect()
if d.is_initialized() is False and os.environ["RANK"] == "0":
    print(f"TOY {case}: after destroy_process_group {after_destroy}; after del and gc.collect {threads()}", flush=True)
"""


def toy(env: dict[str, str]) -> list[str]:
    """The toy's three cases, one line each: the native threads after destroy, then after gc."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "toy.py"
        script.write_text(TOY)
        for case in ("bare", "mesh", "fsdp"):
            p = torchrun(script, case, env=env)
            out += [line[4:] for line in p.stdout.splitlines() if line.startswith("TOY ")] or [
                f"{case}: failed ({p.returncode}): {p.stderr[-300:]}"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="runs per arm (alternating)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gloo_exit.md"))
    ap.add_argument("--toy", action="store_true", help="only the toy: what keeps gloo's threads alive")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent), "PYTHONFAULTHANDLER": "1"}
    held = toy(env)
    if args.toy:
        print("\n".join(held))
        return 0
    work = Path(tempfile.mkdtemp(prefix="gloo-exit-"))
    counts = {arm: collections.Counter() for arm in ("leave", "finalize")}
    threads: dict[str, collections.Counter] = {}
    aborts: list[str] = []
    t0 = time.time()
    try:
        p = torchrun(WORKER, str(work), "fresh", str(work / "ckpt"), env=env)
        if p.returncode:
            sys.stderr.write(p.stderr[-3000:])
            return 1
        for i in range(args.runs):
            for arm in ("leave", "finalize") if i % 2 == 0 else ("finalize", "leave"):
                ckpt = work / f"c-{arm}"
                shutil.rmtree(ckpt, ignore_errors=True)
                shutil.copytree(work / "ckpt", ckpt)
                tag = work / f"threads-{arm}"
                p = torchrun(WORKER, str(work), "resume", str(ckpt),
                             env={**env, "DISTWORKER_EXIT": arm, "DISTWORKER_THREADS": str(tag)})
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
    lines += ["", "Aborts:" if aborts else "No aborts.", *[f"- {a}" for a in aborts], "",
              "What keeps gloo's threads (a two-rank toy; rank 0's native threads, by name):", "",
              *[f"- {h}" for h in held]]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
