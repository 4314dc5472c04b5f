#!/usr/bin/env python3
"""Do two fidelity runs of the same models measure the same ratios? (issue 12)

Each run measures every model interleaved with the parent (``costmodel_fidelity.py``); a fit
predicts the same ratio for a model in both runs, so how far two runs' *measured* ratios differ is
the part of a ratio error that no cost model can remove on that host. For every (model, workload,
metric) measured in both runs: |B / A - 1|, its median and p95, and the Spearman rank correlation
of the two runs' ratios over the models (near 1: the models keep their order and the errors are
the cost model's; near 0: the order is the host's).

    python bench/fidelity_repeat.py A.json B.json [--workloads shared]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kl_rank_correlation import spearman  # noqa: E402

from autocompress.calibrate.fit import pct  # noqa: E402

METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")


def compare(a: dict, b: dict, workloads: set[str] | None = None) -> dict[tuple[str, str], dict]:
    """(workload, metric) -> {"n", "median", "p95", "spearman"} over the non-reference models that
    both runs' ``interleaved.ratio`` hold (``workloads``: only these)."""
    ra, rb = a["interleaved"]["ratio"], b["interleaved"]["ratio"]
    ref = a["interleaved"]["reference"]
    models = sorted(set(ra) & set(rb) - {ref})
    out = {}
    for w in sorted({w for m in models for w in ra[m]} & {w for m in models for w in rb[m]}):
        if workloads and w not in workloads:
            continue
        for k in METRICS:
            pairs = [(ra[m][w][k], rb[m][w][k]) for m in models if w in ra[m] and w in rb[m]]
            diffs = [abs(y / x - 1) for x, y in pairs]  # one percentile for every fidelity figure: the fit's
            out[(w, k)] = {"n": len(pairs), "median": pct(diffs, 50), "p95": pct(diffs, 95),
                           "spearman": spearman([x for x, _ in pairs], [y for _, y in pairs])}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--workloads", nargs="+")
    args = ap.parse_args()
    a, b = (json.loads(Path(p).read_text()) for p in (args.a, args.b))
    print(f"{args.a} against {args.b}: |B/A - 1| of each model's measured ratio to the parent")
    for (w, k), s in compare(a, b, set(args.workloads or ())).items():
        rho = "-" if s["spearman"] is None else f"{s['spearman']:+.2f}"
        print(f"  {w:10s} {k:16s} median {s['median']:6.1%}  p95 {s['p95']:6.1%}  Spearman {rho}  ({s['n']} models)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
