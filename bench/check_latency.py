#!/usr/bin/env python3
"""Wall time of `acc check` per example: cold (no cache) and warm (content-hash cache hit).

Each run is a fresh process (`python -m autocompress.cli check ...`), so interpreter start and
every import are included, as a user sees them. Also records the import time of cvxpy alone and
through our trimmed importer (autocompress/feasibility/_cvx.py), and the machine's load average,
since these 2-core machines are shared.

Python normally caches the bytecode of every imported module (``__pycache__``; pip compiles a
package at install). Where ``PYTHONDONTWRITEBYTECODE`` is set (these sandboxes), every run compiles
autocompress's own modules from source again; ``--bytecode`` adds a column with a bytecode cache
(kept outside the repository through ``PYTHONPYCACHEPREFIX``).

    python bench/check_latency.py [--repeat 3] [--bytecode] [--only NAME] [--out bench/results/check_latency.md]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd: list[str], env: dict) -> tuple[float, int]:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t, p.returncode


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bytecode", action="store_true", help="also time cold checks with a bytecode cache")
    ap.add_argument("--only", metavar="NAME", help="examples whose file name contains NAME (prints, writes nothing)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "check_latency.md"))
    args = ap.parse_args()
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as pycache:
        env = {**os.environ, "ACC_CACHE_DIR": cache}
        env_pyc = {**env, "PYTHONPYCACHEPREFIX": pycache}
        env_pyc.pop("PYTHONDONTWRITEBYTECODE", None)
        imports = {
            "python -c pass": [py, "-c", "pass"],
            "import cvxpy (plain)": [py, "-c", "import cvxpy"],
            "import cvxpy (trimmed, _cvx.py)": [py, "-c", "from autocompress.feasibility._cvx import cvxpy; cvxpy()"],
            "import lark + jsonschema": [py, "-c", "import lark, jsonschema"],
        }
        imp_rows = []
        for name, cmd in (imports.items() if not args.only else ()):
            ts = [timed(cmd, env)[0] for _ in range(args.repeat)]
            imp_rows.append((name, min(ts), statistics.median(ts)))
        for spec in sorted(glob.glob(os.path.join(ROOT, "examples", "*.acspec"))):
            rel = os.path.relpath(spec, ROOT)
            if args.only and args.only not in os.path.basename(spec):
                continue
            cold, warm, pyc, code = [], [], [], None
            for _ in range(args.repeat):
                t, code = timed([py, "-m", "autocompress.cli", "check", rel, "--no-cache"], env)
                cold.append(t)
            timed([py, "-m", "autocompress.cli", "check", rel], env)  # fill the cache
            for _ in range(args.repeat):
                warm.append(timed([py, "-m", "autocompress.cli", "check", rel], env)[0])
            if args.bytecode:
                timed([py, "-m", "autocompress.cli", "check", rel, "--no-cache"], env_pyc)  # writes the bytecode
                pyc = [timed([py, "-m", "autocompress.cli", "check", rel, "--no-cache"], env_pyc)[0]
                       for _ in range(args.repeat)]
            rows.append((rel, code, min(cold), statistics.median(cold), min(warm), statistics.median(warm),
                         statistics.median(pyc) if pyc else None))
            print(f"{rel}: exit {code}, cold {min(cold):.2f}/{statistics.median(cold):.2f} s, "
                  f"warm {min(warm):.2f}/{statistics.median(warm):.2f} s"
                  + (f", cold with bytecode cache {statistics.median(pyc):.2f} s" if pyc else ""), flush=True)
    if args.only:
        return 0
    load = os.getloadavg()
    lines = [
        "# `acc check` wall time",
        "",
        f"Command: `python bench/check_latency.py {' '.join(sys.argv[1:])}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average after the run {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}  ",
        f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "Fresh process per run (interpreter start and imports included). min / median of the runs.",
        "Goals (issue 2): cold < 2 s, warm (cache hit) < 0.5 s.",
        "",
    ]
    head = "| example | exit | cold min | cold median | warm min | warm median |"
    if args.bytecode:
        head += " cold median, bytecode cached |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = f"| {r[0]} | {r[1]} | {r[2]:.2f} s | {r[3]:.2f} s | {r[4]:.2f} s | {r[5]:.2f} s |"
        if args.bytecode:
            line += f" {r[6]:.2f} s |"
        lines.append(line)
    lines += ["", "| import | min | median |", "|---|---|---|"]
    lines += [f"| {n} | {a:.2f} s | {b:.2f} s |" for n, a, b in imp_rows]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
