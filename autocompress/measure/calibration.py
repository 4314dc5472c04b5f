"""What a profile measures: the calibration workloads and architecture split.

Three workload shapes cover the regimes the cost model must get right on a small host: short
prompts at concurrency 1 (decode-bound: weight streaming and per-step overhead), a long prompt
(prefill-bound: GEMM compute), and 8 sequences at once (batched prefill, then batched decode). Run counts are small because a CPU decode step of a SmolLM2-size model takes ~50-100 ms; every
sample is kept so the spread is visible.
"""

from __future__ import annotations

from pathlib import Path

from autocompress.ir import Architecture
from autocompress.lang.model import Workload
from autocompress.measure.runner import measure, workload_dict

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
    return [workload_dict(w, requests=r, warmup=u) if w.mode == "serve" else workload_dict(w, iterations=r, warmup=u)
            for w, r, u in WORKLOADS]


def measure_arch(arch: Architecture, target, tokenizer_dir, root: Path, threads: int | None = None,
                 log=print, repeat: int = 0, progress=None) -> list[dict]:
    """Every calibration workload of ``plan`` on ``arch`` in one fresh engine, configured as the export
    recommends for them (``derive_limits``). Rows ``{"arch", "result", "limits"}`` for ``fit``.

    One engine for all workloads, not one per workload: vLLM CPU's decode step does not measurably
    depend on max_num_seqs here (the parent's TPOT medians with max_num_seqs 1, 2 and 8 were 87, 89
    and 89 ms, request-to-request spread 73-107 ms; docs/decisions.md), and each extra engine start
    costs ~30 s."""
    from autocompress.measure.engines.base import derive_limits

    limits = derive_limits(arch, target, workloads(), threads=threads)
    return [{"arch": arch, "result": measure(arch, target, workload_dicts(), tokenizer_dir, root, limits,
                                             threads=threads, log=log, repeat=repeat, progress=progress),
             "limits": limits}]
