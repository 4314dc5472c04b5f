"""Before compressing for the host CPU: know this machine, and measure the parent against the contract.

``hardware cpu`` means the machine the build runs on. A profile fitted elsewhere can be 3x off
here (a parent predicted at 110 ms TPOT measured 37 ms, and was pruned for nothing), so:

1. without a profile for this machine and this parent (``cost.machine``), calibrate first: ``acc profile --quick``
   on the spec's parent (a few minutes; ``--no-calibrate`` skips it, and the report then says its
   numbers come from another machine);
2. measure the parent with the contract's workloads in the engine; if it already meets every
   bound as measured, there is nothing to compress: stop and say so (``--force`` compresses anyway).

Only for the host CPU with an installed engine and no profile named by the spec; a GPU target's
catalog profile transfers (a standard part), and a target that is not here cannot be measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autocompress.calibrate import profile as calibration
from autocompress.catalog.hardware import resolve_device
from autocompress.cost.machine import machine_profile_path, this_machine
from autocompress.measure import presence
from autocompress.measure.engines.base import derive_limits
from autocompress.measure.runner import run_worker, workload_dict
from autocompress.measure.worker import peak_memory
from autocompress.plan.budget import Budget, BudgetBound
from autocompress.progress import as_progress
from autocompress.report.feasibility import fmt_value


@dataclass(frozen=True)
class ParentCheck:
    rows: tuple[tuple[BudgetBound, float], ...]  # (bound, the parent's measured value)

    @property
    def meets(self) -> bool:
        return all(b.holds(v) for b, v in self.rows)

    def lines(self) -> list[str]:
        out = []
        for b, value in self.rows:
            out.append(f"  {b.name:<16} {b.op} {fmt_value(b.metric, b.value):<12} measured "
                       f"{fmt_value(b.metric, value):<12} {'meets it' if b.holds(value) else 'misses it'}")
        return out


def applies(spec) -> bool:
    return (resolve_device(spec.target.hardware).kind == "cpu" and not spec.target.profile
            and presence.engine_available(spec.target.engine)[0])


def calibrate_if_needed(spec, base: str, no_calibrate: bool, log, parent_arch) -> None:
    """``log``: a log function or a ``Progress`` (the calibration's engine runs then show as tasks).
    ``parent_arch``: the spec's parent; a profile belongs to a machine and the parent it was calibrated on."""
    progress = as_progress(log)
    log = progress.log

    engine = spec.target.engine
    if machine_profile_path(engine, parent=parent_arch).is_file():
        return
    m = this_machine(engine)
    model = spec.parent.value if spec.parent.kind == "alias" else os.path.join(base, spec.parent.value)
    what = f"no profile for this machine ({m.describe()}, fingerprint {m.fingerprint}) and this parent ({model})"
    if no_calibrate:
        log(f"[calibrate] skipped (--no-calibrate): {what}; predictions use another machine's or another parent's")
        return
    log(f"[calibrate] {what}: `acc profile --hardware cpu --model {model} --quick` first (a few minutes; "
        "--no-calibrate skips it)")
    calibration.run_profile("cpu", engine, None, model=model, quick=True, progress=progress)


def contract_workloads(workloads) -> list[dict]:
    """The contract's workloads as the preflight measures them: requests enough for the
    concurrency (at least 8), 3 iterations, a 3% standard-error target, at most 30 s each."""
    return [workload_dict(w, requests=max(8, 2 * w.concurrency), iterations=3, target_se=0.03, max_s=30.0)
            for w in workloads]


def measure_parent(spec, parent_arch, folder: Path, work: Path, log, threads: int | None = None) -> ParentCheck:
    """The parent in the engine with the contract's workloads: every bound, as measured. ``log``: a
    log function or a ``Progress`` (the engine start and workloads then show as tasks)."""
    progress = as_progress(log)
    log = progress.log

    limits = derive_limits(parent_arch, spec.target, spec.workloads, threads=threads)
    wls = contract_workloads(spec.workloads)
    log(f"[preflight] measuring the parent against the contract ({len(wls)} workload(s))")
    res = run_worker(folder, spec.target, wls, limits, work / "preflight", threads, progress=progress,
                     label="preflight parent")
    by = {m["workload"]: m for m in res["measurements"]}

    def measured(b: BudgetBound) -> float:  # memory: the parent's peak (``worker.peak_memory``)
        return float(peak_memory(res)) if b.workload is None else by[b.workload.name][b.field]
    return ParentCheck(tuple((b, measured(b)) for b in Budget.of(spec)))
