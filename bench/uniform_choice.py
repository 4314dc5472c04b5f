#!/usr/bin/env python3
"""The fair Minitron++ arm before distillation (issue 13): what measuring the uniform grid's
frontier buys over the importance prior's single pick.

For each contract (the benchmark's specs, ``quality_at_equal_cost.contract_spec``), the shared
stages run (check, parent, data, importance, teacher: cached in ``bench/work/stages``) and then
the uniform strategy's search stage alone: every frontier candidate (widest FFN per hidden size,
depth and KV heads, all meeting the contract) is measured by KL to the parent on the selection
rows autocompress's final choice uses. The table lists the prior's top candidate (what the uniform
arm took before) against the measured choice, and the candidates' spread. No distillation: the
ranking before distillation predicted the ranking after on every contract measured so far
(docs/decisions.md, 2026-11-30).

    python bench/uniform_choice.py --contracts serve-h100 cpu-vllm
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def run(example: str, seed: int, work: Path, args) -> dict:
    from quality_at_equal_cost import contract_spec

    from autocompress.build.choice import search
    from autocompress.build.prepare import prepare
    from autocompress.progress import LineSink, Progress

    name = f"{example}-s{seed}"
    spec = work / "specs" / f"{name}.acspec"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(contract_spec(example, seed, args.steps, args.seq, args.search_steps, f"../out/{name}"))
    t = time.perf_counter()
    p = prepare(str(spec), work / "stages", Progress(LineSink(lambda m: print(m, flush=True))))
    chosen, arch = search(p, replace(p.settings, strategy="uniform"))
    ref = chosen["refine"]
    return {"contract": example, "seed": seed, "wall_s": round(time.perf_counter() - t, 1), "how": chosen["how"],
            "prior_top": ref["candidates"][0], "chosen": min(ref["candidates"], key=lambda c: c["kl"]),
            "refine": ref}


def table(rows: list[dict]) -> str:
    out = ["| contract | seed | frontier | measured | prior's top: candidate, KL | measured choice: candidate, "
           "hidden, KL | KL range | tokens measured |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f, c, ref = r["prior_top"], r["chosen"], r["refine"]
        kls = [x["kl"] for x in ref["candidates"]]
        out.append(f"| {r['contract']} | {r['seed']} | {ref['frontier']} | {ref['forwards']} | {f['name']} (hidden "
                   f"{f['hidden']}), {f['kl']:.3f} | {c['name']}, {c['hidden']}, {c['kl']:.3f} | "
                   f"{min(kls):.3f}-{max(kls):.3f} | {ref['tokens']:,} of {ref['budget_tokens']:,} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contracts", nargs="*", default=["serve-h100", "cpu-vllm"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--search-steps", type=int, default=20)
    ap.add_argument("--work", default=str(ROOT / "bench" / "work"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "uniform_choice"))
    args = ap.parse_args()
    rows = [run(c, args.seed, Path(args.work), args) for c in args.contracts]
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1) + "\n")
    Path(args.out + ".md").write_text("# The uniform arm's measured choice (before distillation)\n\n"
                                      "`python bench/uniform_choice.py --contracts " + " ".join(args.contracts)
                                      + "`\n\n" + table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
