#!/usr/bin/env python3
"""Does KL before distillation predict quality after it? (issue 14, item 3)

For one contract: the shared build stages (``prepare``: importance, teacher outputs, cached in
``--work``), then ``--candidates`` architectures that all meet the contract: the cvxpy start and
the uniform grid's frontier (``feasibility.uniform.uniform_frontier``, best prior first). Each is
extracted from the parent's permuted weights, measured by KL to the parent on the selection rows
the search uses (``search._measures``), distilled for ``--steps`` steps (the same steps, batch and
seed for all: ``compress.distill``), and measured again on the held-out rows (KL and perplexity,
``compress.evaluate.heldout``). The Spearman rank correlation of KL before against each quality
after is the answer; a weak one means the final choice should distil the top candidates briefly
(Minitron's practice). Results: ``bench/results/kl_rank_correlation.md`` and ``.json``.

    nice -n 10 python bench/kl_rank_correlation.py --contract cpu-vllm --candidates 8 --steps 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho (average ranks for ties); None below 3 points or with a constant side."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx, vy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx and vy else None


def candidates(p, n: int) -> tuple[list[tuple[str, object]], object]:
    """(name, architecture) of the cvxpy start and the uniform frontier, and the supernet."""
    from autocompress.feasibility.metrics import Relaxation
    from autocompress.feasibility.objective import load_importance
    from autocompress.feasibility.uniform import uniform_frontier
    from autocompress.feasibility.variants import assess_variants

    d = p.derived
    imp = load_importance(str(p.importance.path / "importance.json"), p.parent.architecture)
    swept = assess_variants(p.spec, p.parent.architecture, d.profile, d.device, d.space, imp, d.limits, diagnose=False)
    variant = swept.parent
    vimp = imp.for_variant(p.parent.architecture, variant)
    relaxes = {h: Relaxation(variant, h, p.spec, d.profile, d.device, d.space, vimp, d.limits) for h in d.space.hidden_grid}
    net = p.family.supernet(p.permuted, p.cfg, d.space, variant)
    out = [("cvxpy start", swept.feasibility.start.evaluation.arch)] if swept.feasibility.start else []
    for arch, ev, prior, h in uniform_frontier(relaxes, d.profile, d.device, d.limits):
        if len(out) >= n:
            break
        kept = sum(1 for b in arch.blocks if b.attention or b.ffn)
        out.append((f"uniform hidden {h}, {kept} layers", arch))
    return out, net


def run(spec_path: Path, work: Path, n: int, steps: int, progress) -> list[dict]:
    from autocompress.compress.distill import DistillConfig, distill
    from autocompress.compress.evaluate import heldout
    from autocompress.compress.prepare import prepare
    from autocompress.compress.search import _measures

    p = prepare(str(spec_path), work, progress)
    cands, net = candidates(p, n)
    _, select_kl = _measures(net, p.teacher, p.data.train, p.settings)
    rows = []
    for name, arch in cands:
        pre = float(select_kl(net.indices_of(arch)))
        state, extras = p.family.extract(p.permuted, p.cfg, arch)
        model = p.family.student(arch, state, extras)
        cfg = DistillConfig(steps=steps, batch=p.settings.batch, lr=p.settings.lr, seed=p.settings.seed, ckpt_every=10**9)
        distill(model, p.teacher, p.data.train, cfg, progress=progress)
        model.eval()
        q = heldout(model, p.data.heldout, p.settings, progress, name, p.held_teacher)
        rows.append({"name": name, "params": arch.params(), "kl_before": round(pre, 4),
                     "after": {k: {"kl": v.get("kl"), "ppl": v.get("ppl")} for k, v in q.items()}})
        progress.log(f"[rank] {name}: KL before {pre:.3f}, after {json.dumps(rows[-1]['after'])}")
    return rows


def summary(rows: list[dict]) -> dict:
    kinds = sorted({k for r in rows for k in r["after"]})
    pre = [r["kl_before"] for r in rows]
    return {f"{k}.{m}": spearman(pre, [r["after"][k][m] for r in rows]) for k in kinds for m in ("kl", "ppl")
            if all(r["after"][k][m] is not None for r in rows)}


def render(rows: list[dict], rho: dict, meta: dict) -> str:
    out = ["# KL before distillation against quality after (issue 14)", "",
           f"Contract `{meta['contract']}`, {len(rows)} candidates, {meta['steps']} distillation steps each. "
           f"Made by `{meta['command']}`" + (f" on {meta['machine']}, finished {meta['finished']}" if "machine" in meta else "") +
           ".", "", "| candidate | params M | KL before | " +
           " | ".join(f"{k} after" for k in rho) + " |", "|" + "---|" * (3 + len(rho))]
    for r in rows:
        vals = [r["after"][k.split(".")[0]][k.split(".")[1]] for k in rho]
        out.append(f"| {r['name']} | {r['params'] / 1e6:.2f} | {r['kl_before']:.3f} | " +
                   " | ".join(f"{v:.3f}" for v in vals) + " |")
    out += ["", "Spearman rank correlation of KL before with each quality after:", ""]
    out += [f"- {k}: {'-' if v is None else f'{v:+.3f}'}" for k, v in rho.items()]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contract", default="cpu-vllm")
    ap.add_argument("--examples", type=Path, default=ROOT / "examples")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--spec-steps", type=int, default=60,
                    help="the spec's distillation steps (they size the teacher rows: 60 shares the ablation's stages)")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "search_ablation")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    from search_ablation import _link_parent, arm_spec

    from autocompress.progress import LineSink, Progress

    specs = args.work / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    spec = specs / f"{args.contract}-rank.acspec"
    spec.write_text(arm_spec((args.examples / f"{args.contract}.acspec").read_text(), "autocompress", 0, args.spec_steps,
                             args.seq, None, f"{args.contract}-rank"))
    _link_parent(args.examples, specs)
    rows = run(spec, args.work / "stages", args.candidates, args.steps,
               Progress(LineSink(lambda m: print(m, flush=True), every_s=30)))
    rho = summary(rows)
    from autocompress.cost.machine import this_machine

    meta = {"contract": args.contract, "steps": args.steps, "command": "python bench/kl_rank_correlation.py " +
            " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": this_machine("vllm").describe(), "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "kl_rank_correlation.json").write_text(json.dumps({"meta": meta, "rows": rows, "spearman": rho},
                                                                      indent=1) + "\n")
    (args.results / "kl_rank_correlation.md").write_text(render(rows, rho, meta))
    print(render(rows, rho, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
