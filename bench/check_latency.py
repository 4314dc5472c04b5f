"""`acc check` latency: wall time per example, cold (fresh cache, fresh process) and warm (a repeat).

Every spec under ``examples/`` (subfolders included) is checked ``--repeat`` times cold, each time
in a fresh process with an empty cache folder (``ACC_CACHE_DIR``), so interpreter start, every
import and the whole check are included, as a new user sees them; then once more to fill the cache
and ``--repeat`` times warm, each a fresh process answered from that cache (the check's
content-hash cache hit). Reported per example: the exit code, and the median and the max of the
cold and of the warm runs, with the interpreter's own start as the floor. The machine and its load
average are in the table: on a shared host the load moves every figure.

Python caches the bytecode of every imported module (``__pycache__``); where
``PYTHONDONTWRITEBYTECODE`` is set, every run compiles autocompress's own modules from source again,
and the table says so. ``--bytecode`` lets the runs write and read a bytecode cache (kept outside the
repository through ``PYTHONPYCACHEPREFIX``), as an installed package has.

    python -m bench.check_latency [--repeat 5] [--only NAME] [--bytecode] [--out bench/results/check_latency/latency]

Self-contained (no autocompress import here: each check runs in its own process), so it also runs
as ``python bench/check_latency.py``. Goals: cold under 2 s and warm under 0.3 s for every example.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLD_GOAL_S, WARM_GOAL_S = 2.0, 0.3


def timed(cmd: list[str], env: dict) -> tuple[float, int]:
    """(wall seconds, exit code) of ``cmd`` run from the repository root, its output discarded."""
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, p.returncode


def examples(only: str | None = None) -> list[str]:
    """Every ``.acspec`` under ``examples/`` (subfolders too), relative to the root, sorted;
    ``only``: those whose file name contains it."""
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.acspec"))
    return [p for p in found if not only or only in Path(p).name]


def measure(spec: str, repeat: int, env: dict, work: Path) -> dict:
    """One example's cold and warm runs: a fresh cache folder per cold run, one shared cache for the
    warm ones (filled by one run first)."""
    py, check = sys.executable, ["-m", "autocompress.cli", "check", spec]
    cold, warm, code = [], [], None
    for i in range(repeat):
        fresh = work / f"cold-{i}"
        t, code = timed([py, *check], {**env, "ACC_CACHE_DIR": str(fresh)})
        cold.append(t)
    cache = {**env, "ACC_CACHE_DIR": str(work / "warm")}
    timed([py, *check], cache)  # fills the cache
    warm = [timed([py, *check], cache)[0] for _ in range(repeat)]
    return {"example": spec, "exit": code, "cold_s": cold, "warm_s": warm}


def summary(times: list[float]) -> dict:
    return {"median": statistics.median(times), "max": max(times)}


def table(rows: list[dict], floor: list[float], args, command: str) -> str:
    load = os.getloadavg()
    lines = ["# `acc check` latency, cold and warm", "",
             f"Command: `{command}`  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average "
             f"after the run {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
             "Bytecode: " + ("cached (`--bytecode`)" if args.bytecode else
                             "compiled afresh by every run (PYTHONDONTWRITEBYTECODE is set)"
                             if os.environ.get("PYTHONDONTWRITEBYTECODE") else "Python's default `__pycache__`"), "",
             f"Each run a fresh process; cold: a fresh cache folder each time; warm: a repeat answered from the cache. "
             f"{args.repeat} runs each; median and max. Goals: cold < {COLD_GOAL_S:g} s, warm < {WARM_GOAL_S:g} s. "
             f"Interpreter start alone (`python -c pass`): median {statistics.median(floor):.2f} s.", "",
             "| example | exit | cold median | cold max | warm median | warm max | goals |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        c, w = summary(r["cold_s"]), summary(r["warm_s"])
        met = c["max"] < COLD_GOAL_S and w["max"] < WARM_GOAL_S
        lines.append(f"| {r['example']} | {r['exit']} | {c['median']:.2f} s | {c['max']:.2f} s | {w['median']:.2f} s | "
                     f"{w['max']:.2f} s | {'met' if met else 'missed'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.check_latency", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="cold runs and warm runs per example")
    ap.add_argument("--only", metavar="NAME", help="only the examples whose file name contains NAME")
    ap.add_argument("--bytecode", action="store_true", help="let the runs write and read a bytecode cache")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "check_latency" / "latency"),
                    help="results stem: .md and .json")
    args = ap.parse_args(argv)
    command = "python -m bench.check_latency " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="acc-latency-") as tmp:
        env = dict(os.environ)
        if args.bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
            # an installed package's bytecode is compiled before its first use (pip compiles at
            # install): one untimed check of every example fills the prefix, so no timed run compiles
            for spec in examples(args.only):
                timed([sys.executable, "-m", "autocompress.cli", "check", spec],
                      {**env, "ACC_CACHE_DIR": str(Path(tmp) / "compile")})
        floor = [timed([sys.executable, "-c", "pass"], env)[0] for _ in range(args.repeat)]
        for i, spec in enumerate(examples(args.only)):
            r = measure(spec, args.repeat, env, Path(tmp) / f"example-{i}")
            c, w = summary(r["cold_s"]), summary(r["warm_s"])
            print(f"{spec}: exit {r['exit']}, cold {c['median']:.2f} / {c['max']:.2f} s, "
                  f"warm {w['median']:.2f} / {w['max']:.2f} s (median / max)", flush=True)
            rows.append(r)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(table(rows, floor, args, command.strip()))
    out.with_suffix(".json").write_text(json.dumps(
        {"command": command.strip(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
         "python": platform.python_version(), "repeat": args.repeat, "bytecode": args.bytecode,
         "interpreter_start_s": floor, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
