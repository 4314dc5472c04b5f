#!/usr/bin/env python3
"""Does the shortlist's 15-step ranking hold at longer horizons? (issue 14, the final choice)

The build's final choice distils each finalist briefly (``build.shortlist``: 15 steps at the
default budget) and builds the least KL after. When two finalists end within a few tenths of a
percent of each other, that choice is a coin toss, and the model the full distillation makes of
each can differ by much more (code-5070 seed 1: greedy 1.941 against router v2 1.945 after 15
steps, held-out KL 1.843 against 1.671 after the 60-step distillation; ``search_ablation.md``).

For one ablation arm (its spec under ``--work``/specs), this re-runs the shortlist's own round
(``choice.distil_round``: the same finalists, recipe, validation rows and seed) with the
finalists' distillation at each of ``--horizons`` steps, for the ``--top`` finalists of least KL
after the build's short distillation, and writes every finalist's validation KL per horizon. The
cached search and shortlist stages are read, not re-run; each horizon is a runoff stage, so the
build's own runoff (its two entrants at twice the steps) is read too. Results:
``bench/results/shortlist_horizon.{md,json}`` (rows add up over invocations, one arm per run).

    nice -n 5 python bench/shortlist_horizon.py --arm code-5070-s1-e --horizons 30 60 --top 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(spec: Path, work: Path, horizons: list[int], top: int, progress) -> dict:
    from autocompress.build.choice import distil_round, search
    from autocompress.build.prepare import prepare
    from autocompress.ir import arch_from_dict

    p = prepare(str(spec), work, progress)
    strat = p.settings
    chosen, _ = search(p, strat)
    finalists = chosen["finalists"]
    archs = [arch_from_dict(f["architecture"], p.parent.architecture) for f in finalists]
    # the build's own first round (cached), then each horizon as a runoff stage of the top finalists:
    # at the build's runoff steps with its two entrants, the build's own runoff (cached)
    base = distil_round(p, strat, finalists, archs, list(range(len(finalists))), strat.finalist_steps, "shortlist")
    order = sorted(range(len(base["finalists"])), key=lambda j: base["finalists"][j]["kl_after"])[:top]
    names = [finalists[j]["name"] for j in order]
    out = {"arm": spec.stem, "finalists": names,
           "kl_after": {str(base["steps"]): [base["finalists"][j]["kl_after"] for j in order]},
           "chosen_at": {str(base["steps"]): names[0]}, "seconds": {}}
    for h in horizons:
        t0 = time.perf_counter()
        res = distil_round(p, strat, finalists, archs, order, h, "runoff")
        out["kl_after"][str(h)] = [r["kl_after"] for r in res["finalists"]]
        out["chosen_at"][str(h)] = names[res["chosen"]]
        out["seconds"][str(h)] = round(time.perf_counter() - t0, 1)
    return out


def _cpu_model() -> str:
    try:
        return next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def render(rows: list[dict], meta: dict) -> str:
    out = ["# The shortlist's ranking at longer horizons (issue 14)", "",
           "Validation KL to the parent (the shortlist's held-apart training rows) of the finalists of least KL after "
           "the build's short distillation, each distilled again from the parent's weights for every horizon with the "
           "shortlist's own recipe. Made by `bench/shortlist_horizon.py`; the last command: " + meta["command"] + "; "
           + meta["machine"], "",
           "| arm | finalist | " + " | ".join(f"KL after {h} steps" for h in meta["horizons"]) + " |",
           "|---|---|" + "---|" * len(meta["horizons"])]
    for r in rows:
        for i, name in enumerate(r["finalists"]):
            out.append(f"| {r['arm']} | {name} | "
                       + " | ".join(f"{r['kl_after'][h][i]:.4f}" if h in r["kl_after"] else "-" for h in meta["horizons"])
                       + " |")
    out += ["", "Chosen at each horizon:", ""]
    out += [f"- {r['arm']}: " + "; ".join(f"{h} steps: {r['chosen_at'][h]}" for h in meta["horizons"]
                                          if h in r["chosen_at"]) for r in rows]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", required=True, help="an ablation arm's spec name, e.g. code-5070-s1-e")
    ap.add_argument("--horizons", nargs="+", type=int, default=[30, 60])
    ap.add_argument("--top", type=int, default=2)
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "shortlist")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    import os
    import platform

    from autocompress.progress import LineSink, Progress

    progress = Progress(LineSink(lambda m: print(m, flush=True), every_s=30))
    row = run(args.work / "specs" / f"{args.arm}.acspec", args.work / "stages", args.horizons, args.top, progress)
    saved = args.results / "shortlist_horizon.json"
    rows = json.loads(saved.read_text())["rows"] if saved.is_file() else []
    rows = [r for r in rows if r["arm"] != row["arm"]] + [{**row, "written": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                           time.gmtime())}]
    horizons = sorted({int(h) for r in rows for h in r["kl_after"]})
    meta = {"horizons": [str(h) for h in horizons],
            "command": "`python bench/shortlist_horizon.py " + " ".join(argv if argv is not None else sys.argv[1:]) + "`",
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}"}
    args.results.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.results / "shortlist_horizon.md").write_text(render(rows, meta))
    print(render(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
