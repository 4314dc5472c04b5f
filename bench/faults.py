"""Faults: does a build killed, interrupted or out of disk space at any point, or run beside another,
still end with the right weights and leave nothing half-written?

On the tests' tiny build (``bench.lib.faults``: a random 4-layer Llama parent, two data files, a
contract it misses; 10 to 16 s of ``acc build`` in one thread), each trial copies a fresh project
and starts ``acc build spec.acspec --quiet --no-verify``, then one fault:

* **SIGKILL** (``--trials``): its process group is killed at a randomized point; the same command
  is rerun on the same folders and the exported weights' sha256 compared with a solo uninterrupted
  build's. The points cover every stage of the recipe (check, data, importance, teacher, parent
  evaluation, search, shortlist, distill, export, evaluate, accuracy, report): the stages in
  shuffled rounds, each killed at a uniform fraction of its solo duration after the stage before
  it logged its end; the stage the build was really in is read from its log. A kill that lands
  after the build exited is a no-op trial, still rerun and compared.
* **SIGINT** (``--rounds``: every stage once per round, at a uniform fraction of it): sent to the
  process group, as Ctrl-C would. The build must exit 130 with "interrupted: rerun the same
  command to resume" and no traceback, leave no temporary names and no stage folder failing its
  checksums, and no half output: every other row starts with a previous output (an earlier build
  of the spec with 8 distillation steps), which must stay byte for byte until the export replaces
  it whole. The rerun must report every stage folder the interrupted build committed as cached and
  end with the solo weights.
* **ENOSPC** (``--rounds``: every stage once per round): the project, work folder, output and
  cache on a small tmpfs (mounted per trial: root), with a previous output; when the stage starts
  writing (its temporary folder appears; for the check, data and report stages, when the log shows
  it started), the build is paused (SIGSTOP) while a filler takes every free byte, so its next
  write fails for real, safetensors' Rust writes included. The build must exit 7 with one line
  "no space left on device writing <folder>..." naming a folder of the project or cache, no
  traceback, nothing half-written, the previous output intact (or replaced whole by the export);
  then, the filler removed, the rerun resumes and ends with the solo weights. The table records the stage whose write failed. Without the permission
  to mount (or with ``--simulate``), writes fail by a patch in the build's process instead
  (``bench.lib.faults.simulate_enospc``); the table says which.

Two concurrency rows: two specs (``spec-b.acspec``: 8 distillation steps instead of 6, its own
output) built at once on one cache and one ``--work`` folder, each compared with its solo build;
and the same spec started twice at once, where the second must refuse (exit 2, naming the first's
pid) while the first ends with the solo weights.

    python -m bench.faults [--trials 12] [--rounds 1] [--seed 0] [--jobs 1] [--simulate]
                           [--out bench/results/faults/faults]

On 2 cores, ``--trials 12 --rounds 1 --jobs 2``: about 8 min (solo builds of 10 s; a row, its
faulted build and rerun, about 20 s, two at a time; the solo, previous-output and concurrency
builds first, about a minute). ``--jobs 1`` takes about twice as long.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.lib.faults import (NAMES, OUT, Solo, can_mount, disk_full_trial, footprint, interrupt_trial, judge,
                              kill_trial, make_template, points, project, run, same_spec, two_specs, weights_hash)

ROOT = Path(__file__).resolve().parent.parent
PREVIOUS_STEPS = 8  # the previous output's spec: the tiny spec with more distillation steps (other weights)


def _yes(v: bool) -> str:
    return "yes" if v else "**no**"


def _hit(rows: list[dict]) -> str:
    return ", ".join(sorted({r["stage"] for r in rows if not r["no_op"]}, key=NAMES.index)) or "none"


def _left(r: dict) -> str:
    n = len(r["temporaries"]) + len(r["damaged"])
    return "none" if n == 0 else f"**{len(r['temporaries'])} temporaries, {len(r['damaged'])} damaged**"


def _resume(r: dict) -> str:
    return f"{len(r['committed'])} / {r['cached']}" + ("" if r["resumed"] else " **not resumed**")


def _output(r: dict) -> str:
    return f"{'previous' if r['previous'] else 'none'} → {r['output']}"


def table(solo: dict, rows: list[dict], concurrent: list[dict], sigint: list[dict], enospc: list[dict],
          command: str, args) -> str:
    load = os.getloadavg()
    real = [r for r in rows if not r["no_op"]]
    hit = sorted({r["stage"] for r in real}, key=NAMES.index)
    all_equal = all(r["equal"] and r["rerun_exit"] == 0 and r["output_left"] in (None, True) for r in rows)
    conc_ok = all(c["equal"] for c in concurrent) and concurrent[1].get("refused", False)
    asked = len(NAMES[:-1]) * args.rounds
    kind = enospc[0]["fault"] if enospc else ("ENOSPC (simulated)" if args.simulate else "ENOSPC")
    lines = ["# Faults: SIGKILL, SIGINT and a full disk at randomized points, and concurrent builds", "",
             f"Command: `{command}`  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average "
             f"after the run {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"**Summary.** SIGKILL trials: {len(rows)}" +
             (f" of {args.trials} (stopped early)" if len(rows) < args.trials else "") +
             f" (seed {args.seed}); killed a running build: {len(real)}; no-op (the build had exited): "
             f"{len(rows) - len(real)}; stages hit: {', '.join(hit) or 'none'}. "
             f"Every rerun exited 0 with the solo build's weights: {_yes(all_equal)}. "
             f"SIGINT rows: {len(sigint)}" + (f" of {asked} (stopped early)" if len(sigint) < asked else "") +
             f", stages hit: {_hit(sigint)}; every one exited 130 with the line and no traceback, left nothing "
             f"half-written, and resumed to the solo weights: {_yes(all(r['ok'] for r in sigint))}. "
             f"{kind} rows: {len(enospc)}" + (f" of {asked} (stopped early)" if len(enospc) < asked else "") +
             f", writes failed in: {_hit(enospc)}; every one exited 7 with one line naming a folder and no "
             f"traceback, left nothing half-written and the previous output intact, and resumed to the solo "
             f"weights: {_yes(all(r['ok'] for r in enospc))}. "
             f"Concurrent builds correct (two specs: both equal to solo; same spec: the second refused naming "
             f"the first's pid, the first equal to solo): {_yes(conc_ok)}.", "",
             "Tiny build of `tests/compress/_buildkit.py`, `acc build spec.acspec --quiet --no-verify`, one thread "
             "(`OMP_NUM_THREADS=1`), the tests' few-document benchmark data (the accuracy stage runs); a fresh "
             "project and cache per trial; the builds run a copy of the package taken at the start. A fault point is a stage and a fraction of its solo duration after the "
             "stage before it logged its end; for a full disk, the stage's temporary folder appearing (the check, "
             "data and report: their start in the log). "
             "*Stage*: read from the faulted build's own log. *Rerun*: the same command on the same folders. "
             f"*Previous output*: an earlier build of the spec with {PREVIOUS_STEPS} distillation steps (weights "
             f"`{solo['previous'][:16]}…`), copied in as the output before the build.", "",
             f"Solo builds: `spec.acspec` {solo['a_s']:.1f} s, `spec-b.acspec` {solo['b_s']:.1f} s; weights sha256 "
             f"`{solo['a'][:16]}…` and `{solo['b'][:16]}…`; on disk `{solo['footprint_mib']:.0f} MiB` (project, work "
             "folder, output and cache). Stage windows of the solo `spec.acspec` build (s since the start): " +
             ", ".join(f"{k} {a:.2f}–{b:.2f}" for k, (a, b) in solo["spans"].items()) + ".", "",
             "## SIGKILL", "",
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
    lines += ["", "## SIGINT (Ctrl-C)", "",
              "SIGINT to the build's process group. *One line*: the output holds \"interrupted: rerun the same command "
              "to resume\" and no `Traceback`. *Left*: temporary names (`.tmp`) and sealed stage folders failing their "
              "checksums, in the work folder, output and cache. *Output*: before the build → after the interrupt "
              "(`new`: exported whole with the solo weights). *Committed / cached*: stage folders the interrupted "
              "build committed / stages the rerun reported cached (resumed: every committed one among them).", "",
              "| row | aimed at | signal at | stage at the interrupt | exit | one line, no traceback | left | output "
              "| rerun exit | committed / cached | weights equal to solo |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(sigint, 1):
        at = "no-op" if r["no_op"] else f"{r['at_s']:.2f} s"
        lines.append(f"| {i} | {r['aimed']} + {r['fraction']:.3f} ({r['delay_s']:.2f} s) | {at} | {r['stage']} | "
                     f"{r['exit']} | {_yes(r['message'] and not r['traceback'])} | {_left(r)} | {_output(r)} | "
                     f"{r['rerun_exit']} | {_resume(r)} | {_yes(r['equal'])} |")
    how = (f"a tmpfs of {solo['tmpfs_mib']:.0f} MiB mounted for the row; the build paused (SIGSTOP), a filler "
           "file takes every free byte"
           if kind == "ENOSPC" else
           "**simulated**: mounting was not permitted, so writes under the project fail by a patch in the build's "
           "process (`open` for writing raises ENOSPC, safetensors' writer its Rust error text) once the filler "
           "exists")
    lines += ["", f"## A full disk ({kind})", "",
              f"The project, its work folder, output and cache on {how} when the stage starts writing: its "
              "temporary folder appears (`.<stage>-<key>.tmp-*`, the teacher's cache folder, the export's "
              "`.tiny.tmp-*`; the check, data and report: their start in the log). "
              "*Write failed in*: the stage that writes the folder the line names (for the output: the export, or "
              "the report after the accuracy stage), else the one the log shows running at the exit. *The line*: "
              "the build's `no space left on device writing ...` line, up to its advice (paths relative to the "
              "project, stage keys cut). *Left*, *output*, *committed / cached*: as for SIGINT. Then the filler is "
              "removed and the same command rerun.", "",
              "| row | disk filled at the start of | filled | write failed in | exit | the line | traceback | left | "
              "output | rerun exit | committed / cached | weights equal to solo |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(enospc, 1):
        filled = "no-op" if r["at_s"] is None else (
            f"{r['at_s']:.2f} s" + (f", {r['filled_mib']} MiB in {r['fill_s']:.2f} s" if r["filled_mib"] else ""))
        line = f"`{r['message'].split('; free space')[0]}`" if r["message"] else "**none**"
        if r["lines"] > 1:
            line += f" **({r['lines']} lines)**"
        lines.append(f"| {i} | {r['aimed']} | {filled} | {r['stage']} | {r['exit']} | {line} | "
                     f"{'**yes**' if r['traceback'] else 'no'} | {_left(r)} | {_output(r)} | {r['rerun_exit']} | "
                     f"{_resume(r)} | {_yes(r['equal'])} |")
    lines += ["", "## Concurrent builds", "", "| concurrency | exits | what happened | weights equal to solo |",
              "|---|---|---|---|"]
    a, b = concurrent
    lines.append(f"| {a['case']} | {a['exits'][0]}, {a['exits'][1]} | waits for what the other was computing (`waiting "
                 f"for`): {a['waited']}; stages found computed by the other: {a['shared']} | {_yes(a['equal'])} "
                 "(both) |")
    lines.append(f"| {b['case']} | {b['exits'][0]}, {b['exits'][1]} | the second "
                 f"{'refused: `' + b['refusal'] + '`' if b.get('refused') else '**did not refuse**'} | "
                 f"{_yes(b['equal'])} (the first) |")
    return "\n".join(lines) + "\n"


class Results:
    """The rows so far; the table and its JSON are rewritten after every row, so a sweep stopped
    early leaves its rows (the summary says how many ran)."""

    def __init__(self, out: Path, solo: dict, concurrent: list[dict], command: str, args):
        self.out, self.solo, self.concurrent, self.command, self.args = out, solo, concurrent, command, args
        self.rows: dict[str, dict[int, dict]] = {"kill": {}, "sigint": {}, "enospc": {}}
        self.lock = threading.Lock()

    def add(self, kind: str, i: int, row: dict) -> None:
        with self.lock:
            self.rows[kind][i] = row
            self.write()

    def ordered(self, kind: str) -> list[dict]:
        return [r for _, r in sorted(self.rows[kind].items())]

    def write(self) -> None:
        out, a = self.out, self.args
        out.parent.mkdir(parents=True, exist_ok=True)
        kill, sigint, enospc = self.ordered("kill"), self.ordered("sigint"), self.ordered("enospc")
        out.with_suffix(".md").write_text(table(self.solo, kill, self.concurrent, sigint, enospc, self.command, a))
        out.with_suffix(".json").write_text(json.dumps(
            {"command": self.command, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
             "python": platform.python_version(), "seed": a.seed, "trials_asked": a.trials, "rounds": a.rounds,
             "solo": self.solo, "trials": kill, "sigint": sigint, "enospc": enospc,
             "concurrent": self.concurrent}, indent=1) + "\n")

    def ok(self) -> bool:
        rows = self.ordered("kill")
        faults = self.ordered("sigint") + self.ordered("enospc")
        return (all(r["equal"] for r in rows) and all(r["ok"] for r in faults)
                and all(c["equal"] for c in self.concurrent) and bool(self.concurrent[1].get("refused")))


def previous_output(template: Path, folder: Path) -> Path | None:
    """An earlier build of ``spec.acspec`` with other weights (``PREVIOUS_STEPS`` distillation steps,
    the same output folder): its output, or None when it failed."""
    project(template, folder)
    spec = folder / "spec.acspec"
    text = spec.read_text()
    spec.write_text(text.replace("steps 6  seq_len", f"steps {PREVIOUS_STEPS}  seq_len"))
    rc, b = run(folder)
    if rc != 0:
        print(b.text()[-3000:], file=sys.stderr)
        return None
    spec.write_text(text)  # its manifest names this spec file, as a trial's copy will
    return folder / OUT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=12, help="randomized SIGKILL points")
    ap.add_argument("--rounds", type=int, default=1, help="SIGINT and ENOSPC rounds, every stage once per round")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault points")
    ap.add_argument("--jobs", type=int, default=1, help="rows run side by side (one thread each)")
    ap.add_argument("--simulate", action="store_true", help="a simulated full disk even where a tmpfs can be mounted")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "faults" / "faults"),
                    help="results stem: .md and .json")
    args = ap.parse_args(argv)
    command = ("python -m bench.faults " + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    simulate = args.simulate or not can_mount()
    with tempfile.TemporaryDirectory(prefix="acc-faults-") as tmp:
        tmp = Path(tmp)
        # the builds run a copy of the package taken now (first on their PYTHONPATH): a stage's key
        # follows its code, so an edit of the checkout during the sweep would make a rerun recompute
        # rather than resume, and the rows would not all test one version
        for part in ("autocompress", "grammar", "specs"):
            shutil.copytree(ROOT / part, tmp / "code" / part, ignore=shutil.ignore_patterns("__pycache__"))
        os.environ["PYTHONPATH"] = os.pathsep.join([str(tmp / "code"), *filter(None, [os.environ.get("PYTHONPATH")])])
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
                size = footprint(tmp / "solo-a")
            print(f"solo {spec}: {solo[f'{key}_s']:.1f} s", flush=True)
        previous = previous_output(template, tmp / "previous")
        if previous is None:
            return 1
        solo["previous"] = weights_hash(previous)
        # a rerun holds the project, its cache and work folder, the new output and the previous one
        # (the export replaces it with one rename), with room to spare
        tmpfs = 2 * size + 2 * footprint(previous) + (64 << 20)
        solo.update(footprint_mib=round(size / 2**20, 1), tmpfs_mib=round(tmpfs / 2**20, 1))
        refs = {"spec.acspec": solo["a"], "spec-b.acspec": solo["b"]}
        concurrent = [judge(two_specs(template, tmp / "two-specs"), refs),
                      judge(same_spec(template, tmp / "same-spec"), refs)]
        for c in concurrent:
            print(f"{c['case']}: exits {c['exits']}, equal {c['equal']}", flush=True)
        results = Results(Path(args.out), solo, concurrent, command, args)
        n = len(NAMES) - 1
        jobs = [("kill", i, lambda i=i, p=p: kill_trial(template, tmp / f"kill-{i}", p, profile, solo["a"]))
                for i, p in enumerate(points(args.trials, args.seed), 1)]
        jobs += [("sigint", i, lambda i=i, p=p: interrupt_trial(template, tmp / f"sigint-{i}", p, profile, solo["a"],
                                                                 previous if i % 2 == 0 else None))
                 for i, p in enumerate(points(n * args.rounds, args.seed + 1), 1)]
        jobs += [("enospc", i, lambda i=i, p=p: disk_full_trial(template, tmp / f"enospc-{i}", p.stage, profile,
                                                                 solo["a"], previous, tmpfs, simulate))
                 for i, p in enumerate(points(n * args.rounds, args.seed + 2), 1)]

        def one(job: tuple) -> None:
            kind, i, fn = job
            r = fn()
            results.add(kind, i, r)
            ok = r["equal"] if kind == "kill" else r["ok"]
            print(f"{kind} {i}: aimed {r['aimed']}, in {r['stage']}, rerun exit {r['rerun_exit']}, ok {ok}",
                  flush=True)

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            list(pool.map(one, jobs))
        results.write()
    print(f"wrote {Path(args.out).with_suffix('.md')}")
    return 0 if results.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
