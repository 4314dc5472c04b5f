#!/usr/bin/env python3
"""Refit and rescore a stored fidelity run without the engine (issue 12's residual analysis).

A ``bench/costmodel_fidelity.py`` JSON keeps every model's ratio to the parent, measured in one
interleaved run. This script rebuilds that run's rows, fits a profile with this checkout's model
and fitter on the calibration ratios (the JSON's own, or ``--calibration-from``'s), and prints the
held-out ratio errors and each held-out run's TPOT / E2E error. ``--params FILE`` scores a stored
parameter set (``fit._params`` as JSON, as ``--save-params`` writes) instead of fitting, so a
profile fitted by an earlier commit can be scored on a later run's architectures.

    python bench/fidelity_refit.py bench/results/costmodel_fidelity-interleaved-0d9bba8.json
    python bench/fidelity_refit.py bench/results/costmodel_fidelity.json \\
        --calibration-from bench/results/costmodel_fidelity-interleaved-0d9bba8.json \\
        --params bench/results/costmodel_fidelity-interleaved-0d9bba8.params.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _interleaved import parent_of, target as bench_target  # noqa: E402


def rebuilt(path: str, target, parent):
    """(rows by name, Interleaved, the JSON) of a stored run, its architectures regenerated."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.measure.calibration import normalized_rows, workload_dicts, workloads
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.interleave import Interleaved
    from costmodel_fidelity import model_sets

    d = json.loads(Path(path).read_text())
    i = d["interleaved"]
    inter = Interleaved(i["reference"], i["absolute"], i["ratio"], i["spread"], i["peak_rss"], {}, i["runs"])
    shipped = load_profile(PROFILE_DIR / "cpu-vllm-measured.json", resolve_device("cpu"), "vllm")
    cal, held, _, _ = model_sets(parent, shipped, target, d["models"].get("heldout_seed") or 0)
    archs = [a for a in cal + held if a.name in inter.ratio]
    limits = {a.name: derive_limits(a, target, workloads(), threads=2) for a in archs}
    rows = {r["arch"].name: r for r in normalized_rows(inter, archs, limits, workload_dicts(False))}
    return rows, inter, d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--calibration-from")
    ap.add_argument("--params")
    ap.add_argument("--save-params")
    args = ap.parse_args()
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.measure.fit import KERNEL_KEYS, _params, _profile, fit_profile, predicted, ratio_errors, summary

    target, (parent, _) = bench_target(), parent_of("smollm2-135m")
    base = load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm")
    rows, inter, d = rebuilt(args.json, target, parent)
    cal_rows, _, cd = rebuilt(args.calibration_from, target, parent) if args.calibration_from else (rows, inter, d)
    if args.params:  # constants the stored parameters predate are 0: the model without them
        p = {k: 0.0 for k in KERNEL_KEYS} | json.loads(Path(args.params).read_text())
        prof = _profile(base, p)
    else:
        prof = fit_profile([cal_rows[n] for n in cd["models"]["calibration"]], base, target, log=print)
    if args.save_params:
        Path(args.save_params).write_text(json.dumps(_params(prof), indent=1, sort_keys=True) + "\n")
    held = [rows[n] for n in d["models"]["heldout"]]
    ref = rows[inter.reference]
    for k, v in summary(ratio_errors(held, ref, inter, prof, target)).items():
        print(f"{k:10s} ratio median {v['median']:.1%}  p95 {v['p95']:.1%}")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
