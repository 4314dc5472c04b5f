#!/usr/bin/env python3
"""KL to the parent before any distillation, of each build's candidate architectures.

The finding that made the search choose by measurement (docs/decisions.md, 2026-11-30): the
additive objective's pick (the cvxpy start, which is also what the old router decoded) was much
worse *before distillation* than the uniform grid's point on two of three contracts, and the
ranking before distillation predicted the ranking after. This script reproduces that table and
adds the architecture the current search chooses.

For each contract (the example's bounds with the quality benchmark's budget sections, so both
scripts share their stages in ``bench/work/stages``): run the shared stages and the search of
both strategies (``build.prepare`` / ``build.choice.search``); extract each candidate from
the parent's permuted weights, no training; measure the full KL(parent || student) over the vocab
on held-out rows (``--rows`` x ``--tokens`` per kind, code and prose). Writes
``bench/results/predistill_kl.md`` and ``.json``.

    python bench/predistill_kl.py                      # cpu-vllm, npc-5080, serve-h100 (~25 min here)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
CONTRACTS = ("cpu-vllm", "npc-5080", "serve-h100")


def kl_to_parent(p, arch, rows) -> float:
    """Mean over positions of the exact KL(parent || extracted student), no training."""
    import torch

    from autocompress.prune.extract import extract, student_model
    from autocompress.data.teacher import full_kl, logits_of
    from autocompress.nn.llama import forward

    state, globals_ = extract(p.permuted, p.cfg, arch)
    student = student_model(arch, state, globals_).eval()
    with torch.no_grad():
        return float(sum(full_kl(logits_of(student, r[None, :-1]), forward(p.params, p.cfg, r[None, :-1]))
                         for r in rows) / len(rows))


def run_contract(example: str, args) -> dict:
    from quality_at_equal_cost import contract_spec

    from autocompress.build.choice import search
    from autocompress.build.prepare import prepare
    from autocompress.ir import arch_from_dict
    from autocompress.progress import LineSink, Progress

    spec = Path(args.work) / "predistill" / f"{example}.acspec"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(contract_spec(example, 0, args.steps, args.seq, args.search_steps, f"../out/{example}-s0"))
    progress = Progress(LineSink(lambda m: print(m, flush=True)))
    p = prepare(str(spec), Path(args.work) / "stages", progress)
    auto, auto_arch = search(p, p.settings)
    uni, uni_arch = search(p, replace(p.settings, strategy="uniform"))
    parent = p.parent.architecture
    archs = {"cvxpy start (additive objective; the old method's pick)": arch_from_dict(auto["start"], parent),
             "uniform grid": uni_arch, "measured choice (current search)": auto_arch}
    held = {k: v[: args.rows, : args.tokens + 1] for k, v in p.data.heldout.items()}
    row = {"contract": example, "candidates": []}
    for name, arch in archs.items():
        kls = {k: round(kl_to_parent(p, arch, rows), 3) for k, rows in held.items()}
        row["candidates"].append({"name": name, "params_m": round(arch.params() / 1e6, 1),
                                  "attention": sum(1 for b in arch.blocks if b.attention),
                                  "ffn": sum(1 for b in arch.blocks if b.ffn), "kl": kls})
        print(f"[predistill] {example}: {name}: KL {kls}", flush=True)
    row["how"] = auto["how"]
    return row


def table(rows: list[dict], args, seconds: float) -> str:
    out = ["# KL to the parent before distillation", "",
           f"Command: `python bench/predistill_kl.py --contracts {' '.join(args.contracts)} --rows {args.rows} "
           f"--tokens {args.tokens}`; {time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, "
           f"{seconds / 60:.0f} min.", "",
           f"Full KL(parent || student) over the vocabulary, mean per position, on {args.rows} held-out rows x "
           f"{args.tokens} tokens per kind; each candidate extracted from the parent's permuted weights, no "
           "training. Lower is better.", "",
           "| contract | candidate | params | attention / FFN sub-blocks | KL code | KL prose |", "|---|---|---|---|---|---|"]
    for r in rows:
        for c in r["candidates"]:
            out.append(f"| {r['contract']} | {c['name']} | {c['params_m']}M | {c['attention']} / {c['ffn']} | "
                       f"{c['kl'].get('code', '-')} | {c['kl'].get('prose', '-')} |")
    out += ["", "The current search's choice, as its report states it:", ""]
    out += [f"- {r['contract']}: {r['how']}" for r in rows]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contracts", nargs="*", default=list(CONTRACTS))
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=60, help="the quality benchmark's distillation steps (its specs)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--search-steps", type=int, default=20)
    ap.add_argument("--work", default=str(ROOT / "bench" / "work"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "predistill_kl"))
    args = ap.parse_args()
    t = time.perf_counter()
    rows = [run_contract(c, args) for c in args.contracts]
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    out.with_suffix(".md").write_text(table(rows, args, time.perf_counter() - t))
    print(f"wrote {out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
