"""Refit and rescore a stored interleaved fidelity run without the engine (residual analysis).

An interleaved run's JSON keeps every model's ratio to the parent. This rebuilds that run's rows,
fits a profile with this checkout's model and fitter on the calibration ratios (the JSON's own,
or ``--calibration-from``'s), and prints the held-out ratio errors and each held-out run's TPOT /
E2E error. ``--params FILE`` scores a stored parameter set (``fit.fit_params`` as JSON, as
``--save-params`` writes) instead of fitting, so a profile fitted by an earlier commit can be
scored on a later run's architectures; ``--own-fit`` scores the profile the run fitted itself.

``--stable X`` adds the errors over the cells whose two passes agree within X; ``--ref-agree X``
scores each cell from only its triples whose two neighbouring references agree within X (would
re-measuring unsteady triples help?); ``--scan KEY=V1,V2`` sets one constant to each value in
turn; the Spearman lines show whether the error follows the share of KV-reduced layers (a
systematic term) or not. ``fitted_profile`` is also the paired run's profile (``--fitted``).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bench.lib import engine
from bench.lib.engine import target as bench_target
from bench.lib.fidelity_interleaved import model_sets, run_hardware
from bench.lib.stats import spearman


def merged(inters: list):
    """One Interleaved from several runs of the same models (``--add-run``): their run lists one after
    another, and every model's ratio the mean over all its (run, reference before, after) triples,
    its spread their max - min, as ``measure_interleaved`` does for passes within one run. Each
    triple is drift-free on its own, so runs made hours apart combine like passes."""
    from autocompress.measure.interleave import METRICS, Interleaved, cell_stats

    ref = inters[0].reference
    if any(i.reference != ref for i in inters):
        sys.exit("--add-run: the runs have different references")
    out = Interleaved(ref, runs=[r for i in inters for r in i.runs])
    out.absolute[ref] = {w: {k: statistics.fmean(i.absolute[ref][w][k] for i in inters) for k in METRICS}
                         for w in inters[0].absolute[ref]}
    out.ratio[ref] = inters[0].ratio[ref]
    out.spread[ref] = {w: {k: 0.0 for k in METRICS} for w in inters[0].absolute[ref]}
    for name, ts in triples_of(out).items():  # every triple of both runs, as passes of one run
        out.absolute[name], out.ratio[name], out.spread[name] = cell_stats(ts, list(ts[0][0]))
    out.peak_memory = {m: statistics.fmean(i.peak_memory[m] for i in inters if m in i.peak_memory)
                    for m in {m for i in inters for m in i.peak_memory}}
    return out


def rebuilt(path: str, target, parent, more: tuple[str, ...] = ()):
    """(rows by name, Interleaved, the JSON) of a stored run, its architectures regenerated;
    ``more``: other runs of the same models, merged into it (``merged``)."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.calibrate.calibration import normalized_rows, workload_dicts, workloads
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.interleave import Interleaved

    d = json.loads(Path(path).read_text())
    inter = Interleaved.from_dict(d["interleaved"])
    if more:
        inter = merged([inter] + [Interleaved.from_dict(json.loads(Path(m).read_text())["interleaved"]) for m in more])
    shipped = load_profile(PROFILE_DIR / "cpu-vllm-measured.json", resolve_device("cpu"), "vllm")
    cal, held, _, _ = model_sets(parent, shipped, target, d["models"].get("heldout_seed") or 0)
    archs = [a for a in cal + held if a.name in inter.ratio]
    limits = {a.name: derive_limits(a, target, workloads(), threads=2) for a in archs}
    # an interleaved `--workloads` run measured only its workloads
    rows = {r["arch"].name: r for r in normalized_rows(inter, archs, limits,
                                                       workload_dicts(False, d["models"].get("workloads")))}
    return rows, inter, d


def stable_only(errs: dict[str, list[float]], held: list[dict], inter, within: float) -> dict[str, list[float]]:
    """The errors of the cells (model x workload x metric) whose per-pass ratios agree within
    ``within`` of their mean: where the measurement itself reproduced, so an error there is the
    cost model's and not the host's. ``errs`` is ``ratio_errors``'s, in its order."""
    return kept_errors(errs, held, lambda name, w, key: inter.spread[name][w][key] <= within * inter.ratio[name][w][key])


def kept_errors(errs: dict[str, list[float]], held: list[dict], keep) -> dict[str, list[float]]:
    """``errs`` (``ratio_errors``'s, cells in its order) less the cells ``keep(model, workload, metric key)`` drops."""
    cells = [(r["arch"].name, m["workload"]) for r in held for m in r["result"]["measurements"]]
    out: dict[str, list[float]] = {}
    for k in errs:
        key = "throughput_tok_s" if k == "throughput" else f"{k}_s"
        out[k] = [e for (name, w), e in zip(cells, errs[k]) if keep(name, w, key)]
    return out


def triples_of(inter) -> dict[str, list[tuple[dict, dict, dict]]]:
    """model -> its (run, reference before, reference after) medians, rebuilt from the stored run
    order (a model's left neighbour is the last reference or seam before it, its right the next)."""
    out: dict = {}
    runs = inter.runs
    for i, r in enumerate(runs):
        if r["model"] == inter.reference:
            continue
        before = next((runs[j] for j in range(i - 1, -1, -1) if runs[j]["model"] == inter.reference), None)
        after = next((runs[j] for j in range(i + 1, len(runs)) if runs[j]["model"] == inter.reference), None)
        if before and after:  # a run killed before its right-hand reference has no ratio
            out.setdefault(r["model"], []).append((r["medians"], before["medians"], after["medians"]))
    return out


def ref_agreeing(inter, within: float):
    """(ratios, kept) as if every triple whose two references disagree by more than ``within`` on a
    cell were dropped for that cell: the ratio is the mean over the agreeing triples; a cell with
    none is left out (``kept`` False). Dropping by the references' disagreement never looks at the
    model's own run, so it selects on the host's steadiness, not on the answer. What a schedule
    that re-measures such cells could reach, if its new triples agree as often as these did."""
    import copy

    ratio, kept = copy.deepcopy(inter.ratio), {}
    for name, ts in triples_of(inter).items():
        for w in ratio[name]:
            for k in ratio[name][w]:
                good = [g[w][k] / ((b[w][k] + a[w][k]) / 2) for g, b, a in ts
                        if abs(b[w][k] - a[w][k]) <= within * (b[w][k] + a[w][k]) / 2]
                kept[(name, w, k)] = bool(good)
                if good:
                    ratio[name][w][k] = statistics.fmean(good)
    return ratio, kept


def own_params(fitted: dict) -> dict[str, float]:
    """``fit.fit_params``'s flat form of a fidelity JSON's ``fitted`` block (per-op efficiencies, kernel)."""
    p = {f"{c}.{k}": v for c, e in fitted["per_op"].items() for k, v in e.items()}
    return p | fitted["kernel"]


def fitted_profile(path: str):
    """The default vLLM profile of the run's device (its JSON's ``target``; vllm-cpu for runs from before
    it was recorded) with the constants an interleaved run fitted (the JSON): a GPU run's constants
    start from the GPU's default, as its fit did."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.calibrate.fit import KERNEL_KEYS, with_params

    run = json.loads(Path(path).read_text())
    device = resolve_device(run_hardware(run))
    base = load_profile(PROFILE_DIR / f"{device.kind}-vllm-default.json", device, "vllm")
    return with_params(base, {k: 0.0 for k in KERNEL_KEYS} | own_params(run["fitted"]))


def fewer_kv_share(arch, kv_parent: int) -> float:
    """The share of ``arch``'s attention layers with fewer KV heads than the parent's."""
    kv = [b.mixer.kv_heads for b in arch.blocks if b.mixer]
    return sum(1 for v in kv if v < kv_parent) / len(kv) if kv else 0.0


def add_arguments(ap) -> None:
    """This mode's options."""
    ap.add_argument("json", help="an interleaved run's JSON")
    ap.add_argument("--calibration-from", metavar="JSON", help="fit on this run's calibration ratios instead")
    ap.add_argument("--params", metavar="JSON", help="score these stored parameters (fit.fit_params) instead of fitting")
    ap.add_argument("--save-params", metavar="JSON", help="write the scored profile's parameters here")
    ap.add_argument("--scan", metavar="KEY=V1,V2,...",
                    help="diagnostic: also score the profile with one constant set to each value in turn (on the "
                         "held-out data itself, so it shows what a term could explain, never a fit)")
    ap.add_argument("--add-run", action="append", default=[], metavar="JSON",
                    help="another run of the same held-out models (e.g. --calibration-from the first, same "
                         "--heldout-seed): each cell's ratio is the mean over both runs' triples, like two passes")
    ap.add_argument("--own-fit", action="store_true",
                    help="score the profile the run itself fitted (its JSON's 'fitted'), without refitting")
    ap.add_argument("--stable", type=float, default=0.05, metavar="X",
                    help="also score only the cells whose per-pass ratios agree within X (default 0.05)")
    ap.add_argument("--ref-agree", type=float, default=None, metavar="X",
                    help="also score with each cell's ratio from the triples whose two references agree within X "
                         "only (cells with none left out): what re-measuring unsteady triples could reach")


def run(args) -> int:
    """Print the refit's scores of the stored run ``args.json``."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.calibrate.fit import KERNEL_KEYS, fit_params, with_params, fit_profile, predicted, ratio_errors, summary

    target, (parent, _) = bench_target(), engine.parent_of("smollm2-135m")
    base = load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm")
    rows, inter, d = rebuilt(args.json, target, parent, tuple(args.add_run))
    cal_rows, _, cd = rebuilt(args.calibration_from, target, parent) if args.calibration_from else (rows, inter, d)
    if args.params or args.own_fit:  # constants the stored parameters predate are 0: the model without them
        p = {k: 0.0 for k in KERNEL_KEYS} | (own_params(d["fitted"]) if args.own_fit else
                                            json.loads(Path(args.params).read_text()))
        prof = with_params(base, p)
    else:
        prof = fit_profile([cal_rows[n] for n in cd["models"]["calibration"]], base, target, log=print)
    if args.save_params:
        Path(args.save_params).write_text(json.dumps(fit_params(prof), indent=1, sort_keys=True) + "\n")
    held = [rows[n] for n in d["models"]["heldout"]]
    ref = rows[inter.reference]
    errs = ratio_errors(held, ref, inter, prof, target)
    for k, v in summary(errs).items():
        print(f"{k:10s} ratio median {v['median']:.1%}  p95 {v['p95']:.1%}")
    if len(inter.runs) > 2 * len(inter.ratio):  # more than one pass: the ratios have a spread
        for k, v in summary(stable_only(errs, held, inter, args.stable)).items():
            print(f"{k:10s} passes agree within {args.stable:.0%}: ratio median {v['median']:.1%}  "
                  f"p95 {v['p95']:.1%}  ({v['samples']} of {len(errs[k])} cells)")
    if args.ref_agree is not None:
        import dataclasses

        ratio, kept = ref_agreeing(inter, args.ref_agree)
        agreed = ratio_errors(held, ref, dataclasses.replace(inter, ratio=ratio), prof, target)
        some = kept_errors(agreed, held, lambda name, w, key: kept[(name, w, key)])
        for k, v in summary(some).items():
            print(f"{k:10s} triples whose references agree within {args.ref_agree:.0%}: ratio median "
                  f"{v['median']:.1%}  p95 {v['p95']:.1%}  ({v['samples']} of {len(agreed[k])} cells have one)")
    if args.scan:
        key, values = args.scan.split("=", 1)
        for v in (float(x) for x in values.split(",")):
            p = fit_params(prof) | {key: v}
            if key in KERNEL_KEYS and not v:  # fit_params lifts a 0 to the search's start; a scan means 0
                p[key] = 0.0
            s = summary(ratio_errors(held, ref, inter, with_params(base, p), target))
            print(f"scan {key}={v:g}: " + "  ".join(f"{k} {e['median']:.1%}/{e['p95']:.1%}" for k, e in s.items()))
    rp = {m["workload"]: predicted(ref["arch"], m, ref["limits"], prof, target) for m in ref["result"]["measurements"]}
    per_wl: dict = {}
    print("per held-out run, TPOT and E2E ratio error by workload:")
    for r in held:
        cells = []
        for m in r["result"]["measurements"]:
            pr, me = predicted(r["arch"], m, r["limits"], prof, target), inter.ratio[r["arch"].name][m["workload"]]
            e = {k: pr[k] / rp[m["workload"]][k] / me[f"{k}_s"] - 1 for k in ("ttft", "tpot", "e2e")}
            for k, v in e.items():
                per_wl.setdefault((m["workload"], k), []).append(abs(v))
            cells.append(f"{m['workload'][:5]} {e['tpot']:+6.1%} {e['e2e']:+6.1%}")
        print(f"{r['arch'].name:18s} " + " | ".join(cells))
    print("per workload, |ratio error| median / max:")
    for (w, k), v in sorted(per_wl.items()):
        print(f"  {w:10s} {k:5s} {statistics.median(v):.1%} / {max(v):.1%}")
    print("per workload, Spearman rank correlation of the signed error with the share of attention layers "
          "that have fewer KV heads than the parent (negative: those models measure dearer than predicted):")
    kv_parent = max(b.mixer.kv_heads for b in ref["arch"].blocks if b.mixer)
    share = [fewer_kv_share(r["arch"], kv_parent) for r in held]
    for w in [m["workload"] for m in ref["result"]["measurements"]]:
        cells = []
        for k in ("tpot", "e2e"):
            e = [predicted(r["arch"], m, r["limits"], prof, target)[k] / rp[w][k] / inter.ratio[r["arch"].name][w][f"{k}_s"] - 1
                 for r in held for m in r["result"]["measurements"] if m["workload"] == w]
            rho = spearman(share, e)
            cells.append(f"{k} {rho:+.2f}" if rho is not None else f"{k} -")
        print(f"  {w:10s} " + "  ".join(cells) + f"  ({len(held)} models)")
    return 0

