#!/usr/bin/env python3
"""The noise floor of an interleaved run: how much a model's two neighbouring references disagree.

A model's ratio is its value over the mean of the reference measured right before and right after
it (minutes apart). When those two disagree by x, the host moved by about x while the model ran,
and a single-pass ratio is uncertain by about x/2. This reads the ``interleaved.runs`` of stored
results (the fidelity JSON, a profile's ``measurement``) and prints, per metric, the median, p95 and
maximum of |after / before - 1| over every (model, workload):

    python bench/reference_noise.py bench/results/costmodel_fidelity.json [more.json ...]
"""

from __future__ import annotations

import json
import statistics
import sys


def disagreement(runs: list[dict], reference: str = "parent") -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for i in range(1, len(runs) - 1):
        if runs[i]["model"] == reference or runs[i - 1]["model"] != reference or runs[i + 1]["model"] != reference:
            continue
        b, a = runs[i - 1]["medians"], runs[i + 1]["medians"]
        for w in b:
            for k in ("ttft_s", "tpot_s", "e2e_s"):
                out.setdefault(k, []).append(abs(a[w][k] / b[w][k] - 1))
    return out


def main(paths: list[str]) -> int:
    for p in paths:
        d = json.load(open(p))
        inter = d.get("interleaved") or d["measurement"]["interleaved"]
        for k, v in disagreement(inter["runs"], inter["reference"]).items():
            v = sorted(v)
            print(f"{p}: {k[:-2]} neighbouring references disagree by median {statistics.median(v):.1%}, "
                  f"p95 {v[max(0, round(0.95 * len(v)) - 1)]:.1%}, max {v[-1]:.1%} ({len(v)} model x workload)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
