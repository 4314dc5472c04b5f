#!/usr/bin/env python3
"""How far does a ratio measured with paired engines reproduce? (issue 12: the measurement's floor)

Two runs of the same held-out ratios with process-level interleaving (``measure.interleave``: a
fresh engine process per run, reference runs minutes apart) differ by p95 18-21% in TPOT on this
host (``bench/fidelity_repeat.py``), so a 10% p95 cost-model goal cannot be judged with it.
``measure.paired`` keeps the model and the reference loaded side by side and alternates chunks of a
few seconds. This bench measures, with it, ``--repeat`` times in a row:

* ``parent-again``: the parent against itself (a second engine on the same folder): the true
  ratio is 1, so its error is the method's own;
* held-out models whose ratio the process-level runs measured (``s3-v01``, the model the fitted
  profile under-predicts in both of its runs; ``--models``), against their predicted ratio.

    python bench/paired_noise.py --repeat 2 --rounds 10 --workloads short long \\
        --fitted bench/results/costmodel_fidelity-amd-f6ef2e9.json

Writes ``bench/results/paired_noise.md`` and ``.json``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _interleaved import ROOT, parent_of, point, target  # noqa: E402


def archs(parent, names: list[str]):
    from dataclasses import replace

    from autocompress.calibrate.synth import variants

    pool = {a.name: a for a in variants(parent, 14, seed=3)[1:]}
    pool = {f"s3-{k}": replace(a, name=f"s3-{k}") for k, a in pool.items()}
    return [replace(parent, name="parent")] + [pool[n] for n in names]


def limit_text(lim) -> dict:
    return {k: getattr(lim, k) for k in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "kv_space_gib")}


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--workloads", nargs="+", default=["short", "long"])
    ap.add_argument("--models", nargs="*", default=["s3-v01"], help="held-out models of seed 3 (s3-v01 ... s3-v13)")
    ap.add_argument("--fitted", help="a costmodel_fidelity.py JSON: predict with the constants it fitted")
    ap.add_argument("--limits-from", choices=("workloads", "all"), default="workloads",
                    help="engine limits (max_model_len, max_num_seqs, KV space) derived from the measured workloads "
                         "(default) or from all four calibration workloads, as costmodel_fidelity.py derives them")
    ap.add_argument("--root", default=str(ROOT / "bench" / "work" / "profiling"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "paired_noise"))
    args = ap.parse_args()
    from autocompress.calibrate.calibration import WORKLOADS as CAL
    from autocompress.calibrate.calibration import workload_dicts
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.paired import measure_paired
    from autocompress.calibrate.synth import synthetic_folder

    tgt = target()
    parent, weights = parent_of("smollm2-135m")
    models = archs(parent, args.models)
    wls = [w for w in workload_dicts() if w["name"] in args.workloads]
    cal_wls = [w for w, _, _ in CAL if args.limits_from == "all" or w.name in args.workloads]
    limits = {a.name: derive_limits(a, tgt, cal_wls, threads=args.threads) for a in models}
    folders = {a.name: synthetic_folder(a, weights, Path(args.root) / "models") for a in models}
    folders = {"parent": folders["parent"], "parent-again": folders["parent"]} | folders
    limits["parent-again"] = limits["parent"]
    pred = {}
    if args.fitted:
        from fidelity_refit import fitted_profile

        from autocompress.calibrate.fit import predicted

        prof = fitted_profile(args.fitted)
        for a in models[1:]:
            for w in wls:
                pa, pp = (predicted(x, point(w), limits[x.name], prof, tgt)["tpot"] for x in (a, models[0]))
                pred[(a.name, w["name"])] = pa / pp
    runs = []
    for i in range(args.repeat):
        print(f"[paired-noise] repeat {i + 1}/{args.repeat}", flush=True)
        res = measure_paired(folders, "parent", tgt, wls, limits, Path(args.root) / "paired", rounds=args.rounds,
                             threads=args.threads, log=lambda m: print(m, flush=True))
        runs.append(res.as_dict() | {"finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    others = [n for n in folders if n != "parent"]
    lines = ["# Paired engines: how far a ratio reproduces", "",
             f"Command: `python bench/paired_noise.py --repeat {args.repeat} --rounds {args.rounds} --workloads "
             f"{' '.join(args.workloads)} --models {' '.join(args.models)}"
             + (" --limits-from all" if args.limits_from == "all" else "")
             + (f" --fitted {os.path.relpath(args.fitted, ROOT)}" if args.fitted else "") + "`  ",
             f"Engine limits: {', '.join(f'{k} {v}' for k, v in limit_text(limits['parent']).items())} "
             f"(derived from {'all four calibration workloads' if args.limits_from == 'all' else 'the measured workloads'}).  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, threads {args.threads}; runs finished "
             + ", ".join(r["finished"] for r in runs) + f"; {sum(r['seconds'] for r in runs) / 60:.0f} min in all.", "",
             "Each model and the parent stay loaded (two engine processes, one running at a time) and take turns "
             f"in {args.rounds} rounds of short chunks per workload (model, parent; parent, model; ...). Ratio: the "
             "mean of the rounds' chunk ratios, ± its SE; round spread: the min-max of the rounds' ratios.", "",
             "| model | workload | TPOT ratio per repeat (± SE) | round spread | repeats apart | predicted | error of the mean |",
             "|---|---|---|---|---|---|---|"]
    for n in others:
        for w in args.workloads:
            rs = [r["ratio"][n][w]["tpot_s"] for r in runs]
            ses = [r["se"][n][w]["tpot_s"] for r in runs]
            per = [x for r in runs for x in r["per_round"][n][w]["tpot_s"]]
            apart = max(rs) / min(rs) - 1
            p = 1.0 if n == "parent-again" else pred.get((n, w))
            mean = statistics.fmean(rs)
            lines.append(f"| {n} | {w} | " + ", ".join(f"{x:.3f} ± {s:.1%}" for x, s in zip(rs, ses))
                         + f" | {min(per):.3f}-{max(per):.3f} | {apart:.1%} | "
                         + (f"{p:.3f} | {p / mean - 1:+.1%} |" if p else "- | - |"))
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".json").write_text(json.dumps({"runs": runs, "predicted": {f"{k[0]}/{k[1]}": v for k, v in
                                                                               pred.items()}}, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
