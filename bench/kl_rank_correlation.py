#!/usr/bin/env python3
"""Does KL before distillation predict quality after it? (issue 14, item 3)

For one contract: the shared build stages (``prepare``: importance, teacher outputs, cached in
``--work``), then at least ``--candidates`` architectures that all meet the contract, the ones the
two arms' final choices decide between:

    build        the candidates autocompress's measured choice compares (``refine``: the cvxpy
                 start, the uniform grid's prior pick, the free greedy and its width palettes), each
                 as it would ship: over a bound, greedily repaired as ``search.final_choice`` does
    uniform      the uniform frontier's points as the fair baseline measures them
                 (``feasibility.uniform.uniform_frontier``, the same KL and budget), best KL first,
                 until ``--candidates`` in all

Each is extracted from the parent's permuted weights, measured by KL to the parent on the
selection rows the final choice uses (``search._measures``), distilled with the build's own stage
(``--steps`` steps, the same batch, lr and seed for all), exported, and measured on the held-out
rows (KL, perplexity) and, with ``--accuracy``, on the eight benchmarks' subsamples
(``accuracy.stage``). Distillation and accuracy are cached stages: a killed run resumes.

The answer is twofold: the Spearman rank correlation of KL before against each quality after,
and the regret of the choice, i.e. how far KL's pick falls behind the best candidate after
distillation (on the benchmarks a paired difference on the same documents, with its SE). A weak
correlation or a real regret means the final choice should distil the top candidates briefly
(Minitron's practice). Results: ``bench/results/kl_rank_correlation-<contract>.md`` and ``.json``;
``--summary`` rewrites ``kl_rank_correlation.md`` from every contract's JSON.

    nice -n 10 python bench/kl_rank_correlation.py --contract cpu-vllm --candidates 8 --steps 60 --accuracy
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


def shape(arch) -> str:
    """What tells two candidates apart: hidden, kept sub-blocks, KV heads and FFN widths."""
    kv = sorted({b.attention.kv_heads for b in arch.blocks if b.attention})
    widths = [b.ffn.width for b in arch.blocks if b.ffn and hasattr(b.ffn, "width")]
    attn, ffn = sum(1 for b in arch.blocks if b.attention), len(widths)
    fw = (f"FFN {widths[0]}" if len(set(widths)) == 1 else f"FFN mean {sum(widths) / len(widths):.0f}") if widths else "no FFN"
    return f"h{arch.hidden_size}, attn {attn}/{arch.num_layers}, KV {'/'.join(map(str, kv)) or '-'}, " \
           f"FFN {ffn}/{arch.num_layers}, {fw}"


def candidates(p, n: int) -> tuple[list[dict], object, object]:
    """The candidates (dicts: name, source, arch, kl_before), the supernet and ``select_kl``."""
    from autocompress.search.baseline import budget_of
    from autocompress.search.refine import RefineConfig, refine
    from autocompress.search.strategy import _measures
    from autocompress.search.tables import cost_tables
    from autocompress.feasibility.exact import evaluate
    from autocompress.feasibility.metrics import Relaxation
    from autocompress.feasibility.objective import load_importance
    from autocompress.feasibility.rounding import repair_and_fill
    from autocompress.feasibility.uniform import uniform_frontier
    from autocompress.feasibility.variants import assess_variants

    d, log = p.derived, p.progress.log
    imp = load_importance(str(p.importance.path / "importance.json"), p.parent.architecture)
    swept = assess_variants(p.spec, p.parent.architecture, d.profile, d.device, d.space, imp, d.limits, diagnose=False)
    variant, feas = swept.parent, swept.feasibility
    vimp = imp.for_variant(p.parent.architecture, variant)
    relaxes = {h: Relaxation(variant, h, p.spec, d.profile, d.device, d.space, vimp, d.limits) for h in d.space.hidden_grid}
    tables = [cost_tables(relaxes[h]) for h in d.space.hidden_grid]
    net = p.family.supernet(p.permuted, p.cfg, d.space, variant)
    search_kl, select_kl = _measures(net, p.teacher, p.data.train, p.settings)
    seeds = {"cvxpy start": net.indices_of(feas.start.evaluation.arch)}
    if feas.uniform is not None:
        try:
            seeds["uniform grid"] = net.indices_of(feas.uniform.evaluation.arch)
        except ValueError:
            pass
    cfg = RefineConfig()
    ref = refine(tables, seeds, search_kl, select_kl, cfg, log, progress=p.progress)
    out: list[dict] = []

    def add(name, source, arch):  # one entry per supernet state: the same model under two names is one
        state = net.indices_of(arch)
        if all(c["state"] != state for c in out):
            out.append({"name": name, "source": source, "arch": arch, "state": state,
                        "kl_before": float(select_kl(state))})
    for c in ref.candidates:  # as final_choice ships them: the exact model judges, over a bound is repaired
        arch = net.architecture(*c.state)
        if not evaluate(arch, p.spec, d.profile, d.device, d.limits).ok:
            arch, ev, moves = repair_and_fill(relaxes[arch.hidden_size], arch, d.profile, d.device, fill=False)
            if not ev.ok:
                log(f"[rank] {c.name}: over a bound and not repairable, left out")
                continue
            c = type(c)(f"{c.name}, repaired ({len(moves)} moves)", c.state, c.kl)
        add(c.name, "build", arch)
    uniform = []
    for arch, ev, prior, h in uniform_frontier(relaxes, d.profile, d.device, d.limits)[:budget_of(cfg.max_evals)]:
        try:
            uniform.append((float(select_kl(net.indices_of(arch))), arch))
        except ValueError:  # other global sizes than this supernet's
            continue
    log(f"[rank] {len(out)} build candidates; {len(uniform)} uniform frontier points measured")
    for kl, arch in sorted(uniform, key=lambda t: t[0]):
        if len(out) >= n:
            break
        add("uniform", "uniform", arch)
    return out, net, select_kl


def run(spec_path: Path, work: Path, n: int, steps: int, accuracy: bool, progress) -> list[dict]:
    from dataclasses import replace

    from safetensors.torch import load_file

    from autocompress.evaluate.benchmarks.command import _load
    from autocompress.evaluate.benchmarks.paired import per_doc_path
    from autocompress.evaluate.benchmarks.stage import run_accuracy
    from autocompress.evaluate.heldout import heldout, load_exported
    from autocompress.build.pipeline import _distill
    from autocompress.build.prepare import prepare
    from autocompress.build.stages import stage_key
    from autocompress.ir import arch_to_dict

    p = prepare(str(spec_path), work, progress)
    cands, net, _ = candidates(p, n)
    settings = replace(p.settings, distill_steps=steps)
    rows = []
    for i, c in enumerate(cands):
        arch = c["arch"]
        progress.log(f"[rank] candidate {i + 1}/{len(cands)}: {c['name']} ({shape(arch)}), KL before {c['kl_before']:.3f}")
        # the build's distill stage and key: a candidate that is also a build's choice shares it
        dkey = stage_key("student", (), p.importance.key, p.teacher_key, json.dumps(arch_to_dict(arch), sort_keys=True))
        st, extras = _distill(p.family, arch, p.permuted, p.cfg, p.teacher, p.data.train, settings, work, dkey, progress)
        folder = work / "rank-models" / f"{spec_path.stem}-{i}"
        p.family.export(folder, arch, load_file(str(st.path / "student.safetensors")), p.folder, extras, overwrite=True)
        model = load_exported(folder)
        q = heldout(model, p.data.heldout, p.settings, progress, c["name"], p.held_teacher)
        del model
        row = {"name": c["name"], "source": c["source"], "shape": shape(arch), "params": arch.params(),
               "kl_before": round(c["kl_before"], 4), "distill_loss": st.summary.get("last_loss"),
               "after": {k: {"kl": v.get("kl"), "ppl": v.get("ppl")} for k, v in q.items()}}
        if accuracy:
            acc = run_accuracy(folder, work, _load, progress=progress)
            row["accuracy"] = {"mean": acc["summary"]["mean"], "stderr": acc["summary"]["stderr"],
                               "per_doc": str(per_doc_path(acc, work))}
        rows.append(row)
        progress.log(f"[rank] {c['name']}: after {json.dumps(row['after'])}"
                     + (f", 8-bench {row['accuracy']['mean']:.4f}" if accuracy else ""))
    return rows


def measures(rows: list[dict]) -> dict[str, list[float]]:
    """Quality after distillation, per measure (lower is better for all but the benchmark mean)."""
    out = {f"{k}.{m}": [r["after"][k][m] for r in rows] for k in sorted({k for r in rows for k in r["after"]})
           for m in ("kl", "ppl")}
    if all("accuracy" in r for r in rows):
        out["8-bench mean"] = [r["accuracy"]["mean"] for r in rows]
    return {k: v for k, v in out.items() if all(x is not None for x in v)}


def summary(rows: list[dict]) -> dict:
    """Spearman of KL before with each measure, and the regret of KL's pick on each."""
    pre = [r["kl_before"] for r in rows]
    pick = min(range(len(rows)), key=lambda i: pre[i])
    out = {}
    for k, v in measures(rows).items():
        higher = k == "8-bench mean"
        best = (max if higher else min)(range(len(v)), key=lambda i: v[i])
        rank = sorted(v, reverse=higher).index(v[pick]) + 1
        entry = {"spearman": spearman(pre, v), "pick": rows[pick]["name"], "pick_value": v[pick],
                 "pick_rank": rank, "best": rows[best]["name"], "best_value": v[best]}
        if higher and best != pick:
            from autocompress.evaluate.benchmarks.paired import paired_difference, read_rows

            d = paired_difference(read_rows(Path(rows[pick]["accuracy"]["per_doc"])),
                                  read_rows(Path(rows[best]["accuracy"]["per_doc"])))
            entry["paired_pick_minus_best"] = {"diff": d["diff"], "stderr": d["stderr"]}
        out[k] = entry
    return out


def render(rows: list[dict], rho: dict, meta: dict) -> str:
    ks = list(rho)
    out = ["# KL before distillation against quality after (issue 14)", "",
           f"Contract `{meta['contract']}`, {len(rows)} candidates, {meta['steps']} distillation steps each. "
           f"Made by `{meta['command']}` on {meta['machine']}, finished {meta['finished']}.", "",
           "Candidates: `build` are those autocompress's measured choice compares (repaired as it would ship them); "
           "`uniform` are the fair baseline's frontier points, best KL first. All meet the contract.", "",
           "| # | candidate | shape | params M | KL before | " + " | ".join(f"{k} after" for k in ks) + " |",
           "|" + "---|" * (5 + len(ks))]
    for i, r in enumerate(rows):
        vals = measures(rows)
        out.append(f"| {i} | {r['name']} | {r['shape']} | {r['params'] / 1e6:.2f} | {r['kl_before']:.3f} | " +
                   " | ".join(f"{vals[k][i]:.3f}" for k in ks) + " |")
    out += ["", "Spearman rank correlation of KL before with each quality after (positive: agrees for KL and "
            "perplexity; negative: agrees for the benchmark mean), and where KL's pick lands:", ""]
    for k, e in rho.items():
        s = "-" if e["spearman"] is None else f"{e['spearman']:+.3f}"
        line = f"- {k}: rho {s}; KL's pick ({e['pick']}) is #{e['pick_rank']} of {len(rows)} at {e['pick_value']:.3f}"
        if e["best"] != e["pick"]:
            line += f", the best is {e['best']} at {e['best_value']:.3f}"
        if "paired_pick_minus_best" in e:
            pd = e["paired_pick_minus_best"]
            line += f" (pick minus best, paired on the same documents: {100 * pd['diff']:+.1f} ± {100 * pd['stderr']:.1f} points)"
        out.append(line)
    return "\n".join(out) + "\n"


def render_summary(results: Path) -> str:
    """Every contract's result in one table (``kl_rank_correlation-<contract>.json``)."""
    out = ["# KL before distillation against quality after: every contract (issue 14)", "",
           "One row per contract and quality measure, from `bench/results/kl_rank_correlation-<contract>.json` "
           "(each file's own page gives the candidates, the command and the machine). Written by "
           "`python bench/kl_rank_correlation.py --summary`.", "",
           "| contract | candidates | steps | measure | Spearman | KL's pick: rank | pick | best | pick minus best, paired |",
           "|---|---|---|---|---|---|---|---|---|"]
    for f in sorted(results.glob("kl_rank_correlation-*.json")):
        data = json.loads(f.read_text())
        m = data["meta"]
        for k, e in data["summary"].items():
            pd = e.get("paired_pick_minus_best")
            s = "-" if e["spearman"] is None else f"{e['spearman']:+.3f}"
            out.append(f"| {m['contract']} | {len(data['rows'])} | {m['steps']} | {k} | {s} | {e['pick_rank']} | "
                       f"{e['pick_value']:.3f} | {e['best_value']:.3f} | " +
                       (f"{100 * pd['diff']:+.1f} ± {100 * pd['stderr']:.1f}" if pd else "-") + " |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contract", default="cpu-vllm")
    ap.add_argument("--examples", type=Path, default=ROOT / "examples")
    ap.add_argument("--candidates", type=int, default=8, help="at least this many (the build's own, then uniform)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--accuracy", action="store_true", help="also score the eight benchmarks' subsamples (~4 min a model)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--spec-steps", type=int, default=60,
                    help="the spec's distillation steps (they size the teacher rows: 60 shares the ablation's stages)")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "search_ablation")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--summary", action="store_true", help="only rewrite kl_rank_correlation.md from the JSONs")
    args = ap.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    if args.summary:
        (args.results / "kl_rank_correlation.md").write_text(render_summary(args.results))
        return 0
    from search_ablation import _link_parent, arm_spec

    from autocompress.cost.machine import this_machine
    from autocompress.progress import LineSink, Progress

    specs = args.work / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    spec = specs / f"{args.contract}-rank.acspec"
    spec.write_text(arm_spec((args.examples / f"{args.contract}.acspec").read_text(), "autocompress", 0, args.spec_steps,
                             args.seq, None, f"{args.contract}-rank"))
    _link_parent(args.examples, specs)
    t0 = time.time()
    rows = run(spec, args.work / "stages", args.candidates, args.steps, args.accuracy,
               Progress(LineSink(lambda m: print(m, flush=True), every_s=30)))
    rho = summary(rows)
    meta = {"contract": args.contract, "steps": args.steps, "command": "python bench/kl_rank_correlation.py " +
            " ".join(argv if argv is not None else sys.argv[1:]), "machine": this_machine("vllm").describe(),
            "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": round(time.time() - t0)}
    stem = args.results / f"kl_rank_correlation-{args.contract}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "summary": rho}, indent=1) + "\n")
    stem.with_suffix(".md").write_text(render(rows, rho, meta))
    (args.results / "kl_rank_correlation.md").write_text(render_summary(args.results))
    print(render(rows, rho, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
