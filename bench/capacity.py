#!/usr/bin/env python3
"""Where each strategy put its capacity (issue 13, item 5), read from the equal-cost table's JSON.

No model is loaded and nothing is measured here: every figure comes from the build reports that
``bench/quality_at_equal_cost.py`` stored (architecture, the measured choice's pre-distillation KL,
the student's code perplexity and the eight-benchmark mean). Per row and arm: hidden size,
parameters, attention sub-blocks kept and their KV heads, FFN sub-blocks kept and their widths, and
how the FFN channels spread over the first, middle and last third of the depth (the parent spreads
them evenly: 33/33/33).

    python bench/capacity.py [--json bench/results/quality_at_equal_cost.json] [--out bench/results/capacity.md]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shape(arch: dict) -> dict:
    """The capacity summary of one architecture dict (``report.architecture``)."""
    layers = arch["layers"]
    att = [b["mixer"] for b in layers if b.get("mixer")]
    ffn = [b["ffn"]["width"] for b in layers if b.get("ffn")]
    n = len(layers)
    thirds = [0, 0, 0]
    for i, b in enumerate(layers):
        if b.get("ffn"):
            thirds[min(2, 3 * i // n)] += b["ffn"]["width"]
    total = sum(thirds) or 1
    kv = Counter(m.get("kv_heads") for m in att)
    return {
        "hidden": arch["hidden"],
        "params_m": arch["params"] / 1e6,
        "attention": len(att),
        "kv": "/".join(f"{h}x{c}" for h, c in sorted(kv.items())) or "-",
        "ffn": len(ffn),
        "ffn_widths": (f"{min(ffn)}-{max(ffn)} (median {statistics.median(ffn):.0f})" if ffn else "-"),
        "distinct_widths": len(set(ffn)),
        "thirds": "/".join(f"{100 * t / total:.0f}" for t in thirds),
    }


def chosen_kl(how: str) -> float | None:
    """The measured choice's pre-distillation KL, as the report's ``how`` line states it."""
    m = re.findall(r"KL (\d+\.\d+)", how)
    return float(m[-1]) if m else None


def arm_row(contract: str, seed: int, name: str, rep: dict) -> list[str]:
    s = shape(rep["architecture"])
    q = rep["quality"]
    acc = q.get("accuracy") or {}
    mean = (acc.get("student") or {}).get("summary", {}).get("mean")
    kl = chosen_kl(rep.get("how", ""))
    code = q["student"]["code"]["ppl"]
    return [contract, str(seed), name, str(s["hidden"]), f"{s['params_m']:.1f}", str(s["attention"]),
            s["kv"], str(s["ffn"]), s["ffn_widths"], str(s["distinct_widths"]), s["thirds"],
            "-" if kl is None else f"{kl:.3f}", f"{code:.2f}", "-" if mean is None else f"{100 * mean:.1f}"]


def table(rows: list[dict]) -> str:
    head = ["contract", "seed", "arm", "hidden", "params (M)", "attention", "KV heads x blocks", "FFN",
            "FFN widths", "distinct widths", "FFN channels by depth third (%)", "pre-distill KL",
            "code ppl", "8-bench mean"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        rep = r["report"]
        for name, arm in (("autocompress", rep), ("uniform", rep["baseline"])):
            out.append("| " + " | ".join(arm_row(r["contract"], r["seed"], name, arm)) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=str(ROOT / "bench/results/quality_at_equal_cost.json"))
    ap.add_argument("--out", default=str(ROOT / "bench/results/capacity.md"))
    a = ap.parse_args()
    rows = json.loads(Path(a.json).read_text())
    src = Path(a.json).resolve().relative_to(ROOT) if Path(a.json).resolve().is_relative_to(ROOT) else a.json
    text = (f"# Where the capacity went, per contract and arm\n\nFrom `{src}` (rows built at "
            f"{', '.join(sorted({r['commit'] for r in rows}))}); nothing measured here.\n\n"
            f"    python bench/capacity.py\n\n{table(rows)}\n")
    Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
