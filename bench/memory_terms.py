#!/usr/bin/env python3
"""Where vLLM-CPU's peak resident memory goes, per layer and per sub-block (issue 12).

The README's main example built two arms to the same memory bound: the uniform one (26 layers,
103.1M params) measured 2,587 MiB, autocompress's (30 layers, 5 at KV 1, mixed FFN widths,
102.4M params) 2,735 MiB, though the cost model predicted them within 0.4% of each other. Here
SmolLM2-derived architectures that differ in one property each are measured for peak RSS
(VmHWM of the engine process, ``measure.worker``; one fresh process per run, ``measure.runner``),
with the engine settings the build and ``acc verify`` use for ``examples/cpu-vllm.acspec``
(``derive_limits`` on the contract's workloads: the same KV space, token budget and sequences):

* distinct GEMM shapes: ``readme-uniform`` vs ``widths-26`` (its 26 layers at 13 FFN widths
  around 1152, the same parameters);
* depth at equal parameters: ``llama-30x1152`` vs ``llama-24x1536``;
* KV heads: ``readme-autocompress`` vs ``widths-kv3`` (the same widths, KV 3 everywhere);
* removed sub-blocks: ``readme-uniform`` (26 whole layers, 4 empty blocks) vs ``split-4+4`` (30
  blocks: 4 without attention, 4 without FFN; the same parameters and sub-block count), and
  ``llama-26x1152`` (the same 26 layers, no empty blocks, Llama format);
* the two architectures of ``bench/results/cpu-vllm-readme`` themselves.

Each model is measured ``--repeat`` times (RSS does not drift with CPU load; the spread shows
what a repeat moves). The residual is measured minus the cost model's terms (weights, peak
activation, KV space) without its fitted constant: a per-layer or per-sub-block cost shows as a
residual that grows with the count.

    python bench/memory_terms.py [--repeat 2] [--threads 2] [--profile FILE]

Writes ``bench/results/memory_terms.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "cpu-vllm.acspec"
README = ROOT / "bench" / "results" / "cpu-vllm-readme" / "autocompress-report.json"
MiB = 1 << 20


def archs(parent) -> list:
    from autocompress.ir import MLP, Attention, Block, arch_from_dict

    att, mlp = parent.blocks[0].attention, parent.blocks[0].ffn

    def make(name, layers):
        return replace(parent, name=name, blocks=tuple(
            Block(None if kv is None else Attention(att.q_heads, kv, att.head_dim),
                  None if w is None else MLP(w, mlp.gated, mlp.activation)) for kv, w in layers))
    rep = json.loads(README.read_text())
    auto = replace(arch_from_dict(rep["architecture"], parent), name="readme-autocompress")
    uni = replace(arch_from_dict(rep["baseline"]["architecture"], parent), name="readme-uniform")
    empty = [i for i, b in enumerate(uni.blocks) if b.mixer is None and b.ffn is None]
    whole = [i for i in range(parent.num_layers) if i not in empty]
    # the uniform arm's 4 removed layers as 4 attention and 4 FFN sub-blocks removed elsewhere
    no_attn, no_ffn = set(whole[1:9:2]), set(whole[2:10:2])
    split = [(None if i in no_attn else att.kv_heads, None if i in no_ffn else 1152) for i in range(parent.num_layers)]
    # the uniform arm's 26 layers at 13 widths (1152 +- 64k in pairs: the same parameters)
    spread = [1152 + s * 64 * k for k in (0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5) for s in (1, -1)]
    widths = iter(spread)
    many = [(None, None) if i in empty else (att.kv_heads, next(widths)) for i in range(parent.num_layers)]
    return [uni, auto, make("widths-26", many),
            make("widths-kv3", [(att.kv_heads, b.ffn.width) for b in auto.blocks]),
            make("split-4+4", split),
            make("llama-26x1152", [(att.kv_heads, 1152)] * 26),
            make("llama-30x1152", [(att.kv_heads, 1152)] * 30),
            make("llama-24x1536", [(att.kv_heads, 1536)] * 24)]


PAIRS = (  # (a, b, what b - a isolates)
    ("llama-24x1536", "llama-30x1152", "depth at (nearly) equal parameters: 6 more layers, narrower"),
    ("llama-26x1152", "llama-30x1152", "4 more identical layers (4 x 2.9M parameters)"),
    ("llama-26x1152", "readme-uniform", "4 empty blocks and the DeciLM format"),
    ("readme-uniform", "split-4+4", "4 attention and 4 FFN sub-blocks removed instead of 4 whole layers"),
    ("widths-kv3", "readme-autocompress", "5 layers at KV 1 instead of 3 (and the KV space it derives)"),
    ("readme-uniform", "widths-26", "13 FFN widths instead of one: 24 more GEMM shapes, same parameters"),
    ("readme-uniform", "readme-autocompress", "the README's two arms"),
)


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def readme_effect(per_shape: float) -> list[str]:
    """The README arms' verify predictions (margin excluded, as ``calibrate.fit`` compares) with and
    without ``per_shape`` bytes per GEMM shape, against their measured peak RSS."""
    from autocompress.cost.memory import gemm_shapes
    from autocompress.ir import arch_from_dict
    from autocompress.lang.model import ParentRef
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), str(ROOT)).architecture
    rep = json.loads(README.read_text())
    ver = json.loads((README.parent / "verify-report.json").read_text())
    mem = next(b for b in ver["bounds"] if b["metric"] == "memory")
    arms = {"autocompress": (rep["architecture"], rep["predicted"]["memory"], mem["measured"]),
            "uniform": (rep["baseline"]["architecture"], rep["baseline"]["predicted"]["memory"],
                        mem["others"]["baseline (uniform)"]["measured"])}
    out = [f"| arm | GEMM shapes | predicted (with margin) | predicted, no margin | + {per_shape / MiB:.1f} MiB per "
           "shape beyond 5 | measured |", "|---|---|---|---|---|---|"]
    got = {}
    for name, (arch_d, pred, measured) in arms.items():
        n = gemm_shapes(arch_from_dict(arch_d, parent))
        total, bare = pred["total"], pred["total"] - pred["margin"]
        # a joint refit moves non_torch by the calibration set's typical count; a uniform model's 5
        with_term = bare + per_shape * (n - 5)
        got[name] = (bare, with_term, measured)
        out.append(f"| {name} | {n} | {total / MiB:,.0f} MiB | {bare / MiB:,.0f} MiB ({bare / measured - 1:+.1%}) | "
                   f"{with_term / MiB:,.0f} MiB ({with_term / measured - 1:+.1%}) | {measured / MiB:,.0f} MiB |")
    a, u = got["autocompress"], got["uniform"]
    out += ["", f"Autocompress over uniform: measured {a[2] / u[2] - 1:+.1%}; predicted {a[0] / u[0] - 1:+.1%} "
            f"without the term, {a[1] / u[1] - 1:+.1%} with it."]
    return out


def counts(a) -> dict:
    return {"blocks": a.num_layers, "layers": sum(1 for b in a.blocks if b.mixer or b.ffn),
            "attention": sum(1 for b in a.blocks if b.mixer), "ffn": sum(1 for b in a.blocks if b.ffn),
            "distinct_ffn_widths": len({b.ffn.width for b in a.blocks if b.ffn}),
            "distinct_kv_heads": len({b.mixer.kv_heads for b in a.blocks if b.mixer})}


def gemm_probe(distinct: bool, steps: int, layers: int = 30, d: int = 576) -> dict:
    """vllm-cpu's oneDNN linear handlers alone, in this process (no engine): ``layers`` FFN pairs
    (gate/up d -> 2W, down W -> d) at one width (1152) or at 14 widths (384..1216), run at
    ``steps`` token counts (1, 2, ...). The RSS growth per distinct (shape, token count) is the
    mechanism the engine rows show."""
    import torch
    from vllm import _custom_ops as ops

    from autocompress.measure.engines.base import rss_bytes

    torch.manual_seed(0)
    widths = [384 + 64 * (i % 14) if distinct else 1152 for i in range(layers)]
    r0 = rss_bytes()
    hs = [(ops.create_onednn_mm((torch.randn(2 * w, d) * 0.02).t(), 32),
           ops.create_onednn_mm((torch.randn(d, w) * 0.02).t(), 32), w) for w in widths]
    r1 = rss_bytes()
    for m in range(1, steps + 1):
        x = torch.randn(m, d)
        for up, down, w in hs:
            ops.onednn_mm(down, ops.onednn_mm(up, x, None)[:, :w].contiguous(), None)
    r2 = rss_bytes()
    return {"distinct": distinct, "steps": steps, "shapes": 2 * len(set(widths)),
            "handlers_mib": (r1 - r0) / MiB, "run_growth_mib": (r2 - r1) / MiB}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--once", nargs="*", default=(), help="models measured once (engine time is short here)")
    ap.add_argument("--only", nargs="*", help="measure only these models")
    ap.add_argument("--requests", choices=("verify", "few"), default="verify",
                    help="verify: acc verify's request counts and sampling; few: one round of each workload")
    ap.add_argument("--collect", action="store_true",
                    help="no engine runs: every stored run of each model under --root (the runner keys its cache "
                         "by the code's digest, so runs taken while the code changed are stored apart)")
    ap.add_argument("--probe", action="store_true", help="only the oneDNN handler probe (``gemm_probe``)")
    ap.add_argument("--probe-one", help=argparse.SUPPRESS)  # DISTINCT,STEPS: one probe, this process
    ap.add_argument("--profile", help="the profile to predict with (default: the shipped measured one)")
    ap.add_argument("--root", default=str(ROOT / "bench" / "work" / "memory_terms"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "memory_terms"))
    args = ap.parse_args()
    if args.probe_one:
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        import torch

        torch.set_num_threads(args.threads)
        dist, steps = (int(v) for v in args.probe_one.split(","))
        print("PROBE " + json.dumps(gemm_probe(bool(dist), steps)))
        return 0
    if args.probe:  # each probe in a fresh process: oneDNN's caches outlive the handlers
        import subprocess

        rows = []
        for dist in (0, 1):
            for steps in (1, 4, 16, 32):
                got = subprocess.run([sys.executable, __file__, "--probe-one", f"{dist},{steps}", "--threads",
                                      str(args.threads)], capture_output=True, text=True, check=True).stdout
                rows.append(json.loads(next(ln for ln in got.splitlines() if ln.startswith("PROBE "))[6:]))
                print(json.dumps(rows[-1]), flush=True)
        Path(args.out + "_probe.json").write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=1) + "\n")
        return 0
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.memory import gemm_shapes, memory_breakdown
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.export.gguf_convert import convert_alias
    from autocompress.export.writer import llama_format
    from autocompress.lang.api import load_spec
    from autocompress.lang.model import ParentRef
    from autocompress.measure.engines.base import derive_limits
    from autocompress.calibrate.fit import predicted_memory
    from autocompress.measure.runner import measure, workload_dict
    from autocompress.parents.resolve import resolve_parent

    spec = load_spec(SPEC)
    target = spec.target
    device = resolve_device(target.hardware)
    prof = load_profile(args.profile or PROFILE_DIR / "cpu-vllm-measured.json", device, "vllm")
    zero = replace(prof, memory=replace(prof.memory, non_torch_bytes=0, gemm_shape_bytes=0))
    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), str(ROOT)).architecture
    tok = convert_alias("smollm2-135m")
    models = [a for a in archs(parent) if not args.only or a.name in args.only]
    # what acc verify runs for this contract (measure/verify.py), or one round of each workload.
    # The count matters: every distinct step size (tokens per step) builds oneDNN primitives for
    # every distinct GEMM shape, and a longer run sees more step sizes
    if args.requests == "verify":
        n = max(8, 2 * max(w.concurrency for w in spec.workloads))
        wls = [workload_dict(w, requests=n, iterations=max(3, n // 4), target_se=0.02, max_s=60.0)
               for w in spec.workloads]
    else:
        wls = [workload_dict(w, requests=w.concurrency, warmup=1, iterations=1) for w in spec.workloads]
    t0 = time.perf_counter()
    rows = []
    stored = [json.loads(f.read_text()) for f in sorted((Path(args.root) / "measurements").glob("*.json"))]
    for a in models:
        lim = derive_limits(a, target, spec.workloads, threads=args.threads)
        if args.collect:
            runs = [r for r in stored if r["arch"] == a.name and r["params"] == a.params()
                    and [(m["workload"], m["n"]) for m in r["measurements"]] == [(w["name"], w.get("requests"))
                                                                                 for w in wls]]
            if not runs:
                continue
        else:
            runs = [measure(a, target, wls, tok, Path(args.root), lim, threads=args.threads,
                            max_other_cpu=float("inf"), retries=0, repeat=r)
                    for r in range(1 if a.name in args.once else args.repeat)]
        peaks = [r["peak_rss_bytes"] for r in runs]
        # increases over the RSS before vllm was imported: once loaded (weights, KV space, the
        # profile run), and after the last workload (what serving added)
        loaded = [r["measurements"][0]["memory"]["rss_after_load_bytes"] for r in runs]
        served = [r["measurements"][-1]["memory"]["rss_increase_bytes"] for r in runs]
        mb = memory_breakdown(a, target, spec.workloads, prof, device, lim)
        terms = predicted_memory(a, spec.workloads, lim, zero, target)  # weights + activation + KV space
        rows.append({"model": a.name, "params_m": round(a.params() / 1e6, 2), "llama_format": llama_format(a),
                     **counts(a), "kv_space_gib": lim.kv_space_gib, "weights_mib": mb.weights_bytes / MiB,
                     "activation_mib": mb.peak_activation_bytes / MiB, "terms_mib": terms / MiB,
                     "predicted_mib": predicted_memory(a, spec.workloads, lim, prof, target) / MiB,
                     "predicted_check_mib": (mb.total_bytes - mb.margin_bytes) / MiB,
                     "peak_mib": [p / MiB for p in peaks], "loaded_increase_mib": [x / MiB for x in loaded],
                     "served_increase_mib": [x / MiB for x in served], "gemm_shapes": gemm_shapes(a),
                     "measured_mib": statistics.fmean(peaks) / MiB,
                     "residual_mib": statistics.fmean(peaks) / MiB - terms / MiB})
        print(f"[memory_terms] {a.name}: peak {[round(p / MiB) for p in peaks]} MiB, "
              f"residual {rows[-1]['residual_mib']:.0f} MiB", flush=True)
    minutes = (time.perf_counter() - t0) / 60
    out = {"command": " ".join(sys.argv[1:]), "profile": prof.name, "rows": rows,
           "workloads": wls, "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    Path(args.out + ".json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["# Peak RSS of vllm-cpu per architecture: what a layer and a sub-block cost", "",
             f"Command: `python bench/memory_terms.py {' '.join(sys.argv[1:])}` (requests: {args.requests})  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores; {sum(len(r['peak_mib']) for r in rows)} engine runs "
             f"(or cached) in {minutes:.0f} min; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"predicted with profile `{prof.name}`", "",
             "Engine settings as `acc verify examples/cpu-vllm.acspec` (`derive_limits`); measured = the worker "
             "process's VmHWM, each run a fresh process. terms = weights + peak activation + KV space (the model "
             "without its fitted non-torch constant); residual = measured - terms.", "",
             "Increases are over the process's RSS before vllm was imported: once the engine is loaded (weights, "
             "KV space, its profile run) and after the last workload.", "",
             "| model | params | format | blocks | layers | attn | FFN | FFN widths | GEMM shapes | KV space | weights "
             "| activation | predicted | measured peak (runs) | after load | after the runs | residual |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['params_m']}M | {'Llama' if r['llama_format'] else 'DeciLM'} | {r['blocks']} | "
            f"{r['layers']} | {r['attention']} | {r['ffn']} | {r['distinct_ffn_widths']} | {r['gemm_shapes']} | "
            f"{r['kv_space_gib']} GiB | "
            f"{r['weights_mib']:.0f} | {r['activation_mib']:.0f} | {r['predicted_mib']:.0f} | "
            f"{r['measured_mib']:.0f} ({', '.join(f'{p:.0f}' for p in r['peak_mib'])}) | "
            f"{', '.join(f'{p:.0f}' for p in r['loaded_increase_mib'])} | "
            f"{', '.join(f'{p:.0f}' for p in r['served_increase_mib'])} | {r['residual_mib']:.0f} |")
    by = {r["model"]: r for r in rows}
    lines += ["", "## Pairs", "", "| a | b | what b - a isolates | residual b - a | after the runs b - a |",
              "|---|---|---|---|---|"]
    for a, b, what in PAIRS:
        if a in by and b in by:
            ra, rb = by[a], by[b]
            served = statistics.fmean(rb["served_increase_mib"]) - statistics.fmean(ra["served_increase_mib"])
            lines.append(f"| {a} | {b} | {what} | {rb['residual_mib'] - ra['residual_mib']:+.0f} MiB | "
                         f"{served - (rb['kv_space_gib'] - ra['kv_space_gib']) * 1024:+.0f} MiB |")
    if len({r["gemm_shapes"] for r in rows}) > 1:
        from autocompress.calibrate.fit import fit_memory

        x = [r["gemm_shapes"] for r in rows]
        grow = [statistics.fmean(r["served_increase_mib"]) - statistics.fmean(r["loaded_increase_mib"]) for r in rows]
        nt, per = fit_memory([r["residual_mib"] * MiB for r in rows], x)
        out["fit"] = {"serve_growth_mib_per_shape": slope(x, grow), "peak_fit_non_torch_mib": nt / MiB,
                      "peak_fit_mib_per_shape": per / MiB}
        lines += ["", f"Growth while serving (after the runs - after load) against GEMM shapes: "
                  f"{slope(x, grow):.1f} MiB per shape (least squares over {len(rows)} models). "
                  f"`calibrate.fit.fit_memory` on the peaks: {per / MiB:.1f} MiB per shape, non-torch {nt / MiB:.0f} MiB.",
                  "", "## The README's arms (`bench/results/cpu-vllm-readme/verify-report.json`, another host)", ""]
        lines += readme_effect(slope(x, grow) * MiB)
        Path(args.out + ".json").write_text(json.dumps(out, indent=1) + "\n")
    probe = Path(args.out + "_probe.json")
    if probe.is_file():  # written by --probe
        pr = json.loads(probe.read_text())
        lines += ["", f"## oneDNN handlers alone (`--probe --threads {pr['threads']}`, `gemm_probe`)", "",
                  "30 FFN layers as vllm-cpu's linear handlers (no engine), run at 1..N token counts:", "",
                  "| widths | GEMM shapes | token counts | handlers built | growth while running |",
                  "|---|---|---|---|---|"]
        lines += [f"| {'14 (384-1216)' if r['distinct'] else 'one (1152)'} | {r['shapes']} | {r['steps']} | "
                  f"{r['handlers_mib']:.0f} MiB | {r['run_growth_mib']:.1f} MiB |" for r in pr["rows"]]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
