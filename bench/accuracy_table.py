#!/usr/bin/env python3
"""The eight-benchmark table of a parent and its built students, from ``acc eval --json`` files.

    OMP_NUM_THREADS=1 acc eval OUT --parent smollm2-135m --json bench/results/accuracy/NAME.json
    python bench/accuracy_table.py bench/results/accuracy/*.json > bench/results/accuracy_smollm2.md

Every file holds one student and the same parent (the parent column is taken from the first and
checked equal in the others: the stage is keyed by content, so it was scored once). The paired
standard error of the student-minus-parent difference is not shown here: ``per_doc.jsonl`` of each
stage folder holds what it needs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TITLES = {"arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge", "hellaswag": "HellaSwag", "piqa": "PIQA",
          "winogrande": "WinoGrande", "boolq": "BoolQ", "openbookqa": "OpenBookQA", "mmlu": "MMLU"}


def pct(r: dict) -> str:
    return f"{100 * r['score']:.1f} ± {100 * r['stderr']:.1f}"


def main(paths: list[str]) -> int:
    rows = [(Path(p).stem, json.loads(Path(p).read_text())) for p in paths]
    parent = rows[0][1]["parent"]
    for name, r in rows[1:]:
        assert r["parent"]["tasks"] == parent["tasks"], f"{name}: another parent"
    head = "| task | metric | n | parent | " + " | ".join(n for n, _ in rows) + " |"
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for t in [t for t in TITLES if t in parent["tasks"]]:  # the registry's order
        pr = parent["tasks"][t]
        out.append(f"| {TITLES[t]} | {pr['metric']} | {pr['n']} | {pct(pr)} | "
                   + " | ".join(pct(r["student"]["tasks"][t]) for _, r in rows) + " |")
    ps = parent["summary"]
    out.append(f"| **mean of 8** | | {ps['docs']} | **{100 * ps['mean']:.1f} ± {100 * ps['stderr']:.1f}** | "
               + " | ".join(f"**{100 * r['student']['summary']['mean']:.1f} ± {100 * r['student']['summary']['stderr']:.1f}**"
                            for _, r in rows) + " |")
    out.append("| retained share of the parent's mean | | | 100% | "
               + " | ".join(f"{r['retained']['mean']:.1%}" for _, r in rows) + " |")
    he = parent.get("humaneval") or {}
    out.append(f"| HumanEval mean log-prob per token | | 164 | {he.get('mean_logprob', float('nan')):.3f} | "
               + " | ".join(f"{(r['student'].get('humaneval') or {}).get('mean_logprob', float('nan')):.3f}"
                            for _, r in rows) + " |")
    for kind in ("code", "prose"):
        if all(kind in (r.get("heldout") or {}) for _, r in rows):
            out.append(f"| held-out {kind} ppl (build report) | | | {rows[0][1]['heldout'][kind]['parent_ppl']:.2f} | "
                       + " | ".join(f"{r['heldout'][kind]['student_ppl']:.2f}" for _, r in rows) + " |")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
