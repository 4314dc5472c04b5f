"""What a profile measures: the calibration workloads and architecture split.

Three workload shapes cover the regimes the cost model must get right on a small host: short
prompts at concurrency 1 (decode-bound: weight streaming and per-step overhead), a long prompt
(prefill-bound: GEMM compute), and 8 sequences at once (batched prefill, then batched decode). Run counts are small because a CPU decode step of a SmolLM2-size model takes ~50-100 ms; every
sample is kept so the spread is visible.
"""

from __future__ import annotations

from autocompress.spec.model import Workload

WORKLOADS = (  # (workload, timed requests or iterations, warm-up rounds)
    (Workload("short", 1, "serve", 128, 32), 8, 1),
    (Workload("long", 1, "serve", 512, 8), 4, 1),
    # 8 streams as one batch: a closed loop of 8 equal requests started together stays in lockstep
    # (each round prefills 8 prompts, then decodes 8 sequences), which is the batch semantics
    (Workload("concurrent", 8, "batch", 128, 16), 3, 1),
)

CALIBRATION_ARCHS = 7  # the first N of ``synth.variants`` (the parent first) fit the profile
HELDOUT_ARCHS = 13  # the next M are never seen by the fit: the fidelity benchmark's test set


def workloads() -> list[Workload]:
    return [w for w, _, _ in WORKLOADS]


def workload_dicts() -> list[dict]:
    from autocompress.profiling.measure import workload_dict

    return [workload_dict(w, requests=r, warmup=u) if w.mode == "serve" else workload_dict(w, iterations=r, warmup=u)
            for w, r, u in WORKLOADS]
