#!/usr/bin/env python3
"""Does a decode GEMM on vLLM-CPU cost its bytes, whatever its shape? (issue 12, item 2)

vLLM-CPU runs every fp32 linear layer through oneDNN (``dispatch_cpu_unquantized_gemm`` ->
``ops.create_onednn_mm`` / ``ops.onednn_mm``; the SGL kernel is for bf16/fp16/int8 only). The cost
model charges a decode GEMM its weight bytes at one fitted bandwidth share plus a per-launch
constant, the same for every shape. The held-out models it under-predicts most (``s3-v01``, and
the calibration's ``v05`` and ``v06``) have hidden sizes of 384 and 512 where the parent's is
576. This bench times the very call vLLM makes, shape by shape, so a shape-dependent efficiency
shows up without the engine's other costs around it:

* every linear shape of a SmolLM2-derived layer at hidden 384, 448, 512 and 576: qkv
  (N = (9 + 2 kv) x 64, K = hidden) for kv 1 and 3, o (N = hidden, K = 576), gate_up (N = 2w,
  K = hidden) and down (N = hidden, K = w) for FFN widths 384-1536;
* M = 1 (a decode step at concurrency 1) and M = 8 (``--m``);
* each shape has enough copies of its weight to fill 96 MiB (3x this machine's L3), called in turn,
  so every call reads its weight from memory as in a 30-layer model;
* shapes are timed interleaved (every round visits every shape in a new random order) and each
  shape's figure is the median over rounds, so the host's drift lands on all shapes alike.

Output: per shape, microseconds per call and the effective bandwidth; a least-squares fit of
time = a + bytes / B over all shapes; and each shape's residual against that line, and its mean by
hidden size. ``bench/results/onednn_shapes.md`` (+ ``.json``).

    python bench/onednn_shapes.py --threads 2 --rounds 15
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = (384, 448, 512, 576)
WIDTHS = (384, 768, 1152, 1536)
HEAD_DIM, Q_HEADS = 64, 9
FILL = 96 * 2**20


def shapes() -> list[tuple[str, int, int, int]]:
    """(kind, hidden, N, K) of every linear of a SmolLM2-derived decoder layer in the sweep."""
    out = []
    for d in HIDDEN:
        for kv in (1, 3):
            out.append(("qkv", d, (Q_HEADS + 2 * kv) * HEAD_DIM, d))
        out.append(("o", d, d, Q_HEADS * HEAD_DIM))
        for w in WIDTHS:
            out += [("gate_up", d, 2 * w, d), ("down", d, d, w)]
    return out


def handlers(n: int, k: int, fill: int = FILL) -> list:
    """oneDNN handlers, as vLLM makes them, over enough copies of an (N, K) weight to fill FILL."""
    import torch
    from vllm import _custom_ops as ops

    return [ops.create_onednn_mm(torch.randn(n, k).t(), 32) for _ in range(max(2, fill // (4 * n * k)))]


def timer(hs: list, k: int, m: int):
    """A closure timing one round of M-row calls over the handlers ``hs``: the mean seconds per call."""
    import torch
    from vllm import _custom_ops as ops

    x = torch.randn(m, k)
    for h in hs:  # the first call of an M builds its primitive
        ops.onednn_mm(h, x, None)

    def run() -> float:
        t0 = time.perf_counter()
        for h in hs:
            ops.onednn_mm(h, x, None)
        return (time.perf_counter() - t0) / len(hs)
    return run


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--m", type=int, nargs="+", default=[1, 8], help="rows per call (decode sequences)")
    ap.add_argument("--fill-mib", type=int, default=FILL // 2**20,
                    help="weight copies per shape, in MiB (default 3x this machine's L3: read from memory)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/onednn_shapes"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    cells = [(s, m) for s in shapes() for m in args.m]
    print(f"[onednn] {len(cells)} cells: {len(shapes())} shapes x M {args.m}, {args.fill_mib} MiB of weights "
          "per shape ...", flush=True)
    weights = {s: handlers(s[2], s[3], args.fill_mib * 2**20) for s in shapes()}
    timers = {(s, m): timer(weights[s], s[3], m) for s, m in cells}
    samples: dict = {c: [] for c in cells}
    start = time.time()
    for r in range(args.rounds):
        order = list(cells)
        rng.shuffle(order)
        for c in order:
            samples[c].append(timers[c]())
        done = r + 1
        eta = (time.time() - start) / done * (args.rounds - done)
        print(f"[onednn] round {done}/{args.rounds}, ETA {eta:.0f} s", flush=True)
    rows = []
    for (s, m), v in samples.items():
        kind, d, n, k = s
        med = statistics.median(v)
        rows.append({"kind": kind, "hidden": d, "n": n, "k": k, "m": m, "bytes": 4 * n * k, "us": med * 1e6,
                     "spread": (max(v) - min(v)) / med, "gbs": 4 * n * k / med / 1e9})
    lines = [f"# oneDNN decode GEMM by shape (vLLM-CPU's fp32 linear path)", "",
             f"`python bench/onednn_shapes.py --threads {args.threads} --rounds {args.rounds} --m "
             f"{' '.join(map(str, args.m))} --fill-mib {args.fill_mib}`; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs, torch {torch.__version__}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average before the last round "
             f"{os.getloadavg()[0]:.2f}. Each figure: the median over {args.rounds} interleaved rounds of the mean "
             f"call time over {args.fill_mib} MiB of weight copies (read from memory, as in a model).", ""]
    fits = {}
    for m in args.m:
        sel = [r for r in rows if r["m"] == m]
        a, slope = fit_line([r["bytes"] for r in sel], [r["us"] for r in sel])
        fits[m] = {"fixed_us": a, "gb_s": 1e-3 / slope}
        for r in sel:
            r["resid"] = r["us"] / (a + slope * r["bytes"]) - 1
        lines += [f"## M = {m}", "",
                  f"Least squares over all {len(sel)} shapes: time = {a:.1f} us + bytes / {1e-3 / slope:.1f} GB/s. "
                  "Residual: the shape's time against that line (+ means dearer than its bytes say). Spread: (max - min) / "
                  "median of the shape's rounds (one round's mean call can be far off when the host stalls; the "
                  "median is what the table uses).", "",
                  "| kind | hidden | N | K | KiB | us | GB/s | residual | spread |", "|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(sel, key=lambda r: (r["kind"], r["hidden"], r["n"], r["k"])):
            lines.append(f"| {r['kind']} | {r['hidden']} | {r['n']} | {r['k']} | {r['bytes'] / 1024:.0f} | "
                         f"{r['us']:.1f} | {r['gbs']:.1f} | {r['resid']:+.1%} | {r['spread']:.0%} |")
        lines += ["", "Mean residual by hidden size (all of that layer's shapes; by weight bytes):", "",
                  "| hidden | shapes | mean residual | bytes-weighted residual |", "|---|---|---|---|"]
        for d in HIDDEN:
            g = [r for r in sel if r["hidden"] == d]
            wres = sum(r["resid"] * r["bytes"] for r in g) / sum(r["bytes"] for r in g)
            lines.append(f"| {d} | {len(g)} | {statistics.fmean(r['resid'] for r in g):+.1%} | {wres:+.1%} |")
        lines.append("")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".json").write_text(json.dumps({"rows": rows, "fits": fits, "args": vars(args) | {"out": os.path.relpath(args.out, ROOT)}},
                                                indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
