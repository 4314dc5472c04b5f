"""Faults: does a build killed at any point, or run beside another, still end with the right weights?

On the tests' tiny build (``bench.lib.faults``: a random 4-layer Llama parent, two data files, a
contract it misses; about 14 s of ``acc build`` in one thread), each trial copies a fresh project,
starts ``acc build spec.acspec --quiet --no-verify``, SIGKILLs its process group at a randomized
point, then reruns the same command on the same folders and compares the exported weights'
sha256 with a solo uninterrupted build's. The points cover every stage of the recipe (check, data,
importance, teacher, parent evaluation, search, shortlist, distill, export, evaluate, accuracy,
report): the stages in shuffled rounds, each killed at a uniform fraction of its solo duration
after the stage before it logged its end; the stage the build was really in is read from its log.
A kill that lands after the build exited is a no-op trial, still rerun and compared.

Two concurrency rows: two specs (``spec-b.acspec``: 8 distillation steps instead of 6, its own
output) built at once on one cache and one ``--work`` folder, each compared with its solo build;
and the same spec started twice at once, where the second must refuse (exit 2, naming the first's
pid) while the first ends with the solo weights.

    python -m bench.faults [--trials 12] [--seed 0] [--out bench/results/faults/faults]

About 23 s per trial on 2 cores, plus a minute for the solo builds and the concurrency rows
(`--trials 30`: 12.5 min).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.faults import (NAMES, Solo, judge, kill_trial, make_template, points, project, run, same_spec,
                              two_specs, weights_hash)

ROOT = Path(__file__).resolve().parent.parent


def _yes(v: bool) -> str:
    return "yes" if v else "**no**"


def table(solo: dict, rows: list[dict], concurrent: list[dict], command: str, seed: int, asked: int) -> str:
    load = os.getloadavg()
    real = [r for r in rows if not r["no_op"]]
    hit = sorted({r["stage"] for r in real}, key=NAMES.index)
    all_equal = all(r["equal"] and r["rerun_exit"] == 0 and r["output_left"] in (None, True) for r in rows)
    conc_ok = all(c["equal"] for c in concurrent) and concurrent[1].get("refused", False)
    lines = ["# Randomized SIGKILL sweep and concurrent builds", "",
             f"Command: `{command}`  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average "
             f"after the run {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"**Summary.** Trials: {len(rows)}" + (f" of {asked} (stopped early)" if len(rows) < asked else "") +
             f" (seed {seed}); killed a running build: {len(real)}; no-op (the build had exited): "
             f"{len(rows) - len(real)}; stages hit: {', '.join(hit)}. "
             f"Every rerun exited 0 with the solo build's weights: {_yes(all_equal)}. "
             f"Concurrent builds correct (two specs: both equal to solo; same spec: the second refused naming "
             f"the first's pid, the first equal to solo): {_yes(conc_ok)}.", "",
             "Tiny build of `tests/compress/_buildkit.py`, `acc build spec.acspec --quiet --no-verify`, one thread "
             "(`OMP_NUM_THREADS=1`), the tests' few-document benchmark data (the accuracy stage runs); a fresh "
             "project and cache per trial. A kill point is a stage and a fraction of its solo duration after the stage "
             "before it logged its end; SIGKILL goes to the build's process group. *Kill time*: seconds since the "
             "build's start. *Stage at the kill*: read from the killed build's own log. *Rerun*: the same command on "
             "the same folders.", "",
             f"Solo builds: `spec.acspec` {solo['a_s']:.1f} s, `spec-b.acspec` {solo['b_s']:.1f} s; weights sha256 "
             f"`{solo['a'][:16]}…` and `{solo['b'][:16]}…`. Stage windows of the solo `spec.acspec` build (s since "
             "the start): " + ", ".join(f"{k} {a:.2f}–{b:.2f}" for k, (a, b) in solo["spans"].items()) + ".", "",
             "| trial | aimed at | kill time | stage at the kill | killed exit | output after the kill | temporaries "
             "left | rerun exit | rerun: stale lock taken over / checkpoint resumed / stages cached / corrupt "
             "warning | weights equal to solo |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        kill = "no-op" if r["no_op"] else f"{r['kill_s']:.2f} s"
        left = {None: "none", True: "whole (solo weights)", False: "**other weights**"}[r["output_left"]]
        lines.append(f"| {i} | {r['aimed']} + {r['fraction']:.3f} ({r['delay_s']:.2f} s) | {kill} | {r['stage']} | "
                     f"{r['exit_killed']} | {left} | {r['temporaries']} | {r['rerun_exit']} | "
                     f"{'yes' if r['stale_lock'] else 'no'} / {'yes' if r['resumed_checkpoint'] else 'no'} / "
                     f"{r['cached']} / {'yes' if r['corrupt'] else 'no'} | {_yes(r['equal'])} |")
    lines += ["", "| concurrency | exits | what happened | weights equal to solo |", "|---|---|---|---|"]
    a, b = concurrent
    lines.append(f"| {a['case']} | {a['exits'][0]}, {a['exits'][1]} | waits for what the other was computing (`waiting "
                 f"for`): {a['waited']}; stages found computed by the other: {a['shared']} | {_yes(a['equal'])} "
                 "(both) |")
    lines.append(f"| {b['case']} | {b['exits'][0]}, {b['exits'][1]} | the second "
                 f"{'refused: `' + b['refusal'] + '`' if b.get('refused') else '**did not refuse**'} | "
                 f"{_yes(b['equal'])} (the first) |")
    return "\n".join(lines) + "\n"


def write(out: Path, solo: dict, rows: list[dict], concurrent: list[dict], command: str, args) -> None:
    """The table and its JSON; rewritten after every trial, so a sweep stopped early leaves its rows
    (the summary says how many of the trials ran)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(table(solo, rows, concurrent, command, args.seed, args.trials))
    out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
         "python": platform.python_version(), "seed": args.seed, "trials_asked": args.trials, "solo": solo,
         "trials": rows, "concurrent": concurrent}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=12, help="randomized kill points")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill points")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "faults" / "faults"),
                    help="results stem: .md and .json")
    args = ap.parse_args(argv)
    command = ("python -m bench.faults " + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="acc-faults-") as tmp:
        tmp = Path(tmp)
        template = make_template(tmp / "template")
        solo = {}
        for key, spec in (("b", "spec-b.acspec"), ("a", "spec.acspec")):  # A's windows from the warmer run
            rc, b = run(project(template, tmp / f"solo-{key}"), spec)
            if rc != 0:
                print(b.text()[-3000:], file=sys.stderr)
                return 1
            solo[key], solo[f"{key}_s"] = weights_hash(b.out()), b.wall
            if key == "a":
                profile = Solo.of(b)
                solo["spans"] = profile.spans
            print(f"solo {spec}: {solo[f'{key}_s']:.1f} s", flush=True)
        refs = {"spec.acspec": solo["a"], "spec-b.acspec": solo["b"]}
        concurrent = [judge(two_specs(template, tmp / "two-specs"), refs),
                      judge(same_spec(template, tmp / "same-spec"), refs)]
        for c in concurrent:
            print(f"{c['case']}: exits {c['exits']}, equal {c['equal']}", flush=True)
        rows = []
        for i, point in enumerate(points(args.trials, args.seed), 1):
            r = kill_trial(template, tmp / f"trial-{i}", point, profile, solo["a"])
            rows.append(r)
            print(f"trial {i}: aimed {point.stage} + {point.fraction:.3f}, killed at "
                  f"{'-' if r['no_op'] else r['kill_s']} s in {r['stage']}, rerun exit {r['rerun_exit']}, "
                  f"equal {r['equal']}", flush=True)
            write(out, solo, rows, concurrent, command, args)
    write(out, solo, rows, concurrent, command, args)
    print(f"wrote {out.with_suffix('.md')}")
    ok = all(r["equal"] for r in rows) and all(c["equal"] for c in concurrent) and concurrent[1].get("refused")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
