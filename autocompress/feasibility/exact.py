"""The exact check: predict every workload and the memory of one architecture, compare with bounds.

This is the judge of every architecture the relaxation, the rounding, the repair and (later) the
search propose: the relaxation only steers, a verdict always comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.cost.memory import MemoryBreakdown, memory_breakdown
from autocompress.cost.latency import WorkloadCost, decode_floor, predict_workload
from autocompress.ir import Architecture
from autocompress.plan.budget import Budget, BudgetBound


@dataclass(frozen=True)
class BoundCheck:
    """One bound of the contract against a prediction. ``ratio`` > 1 means violated by that factor."""

    name: str  # "npc.ttft" or "memory"
    metric: str
    workload: str | None
    op: str
    bound: float
    predicted: float
    ok: bool
    ratio: float  # predicted / bound for <=, bound / predicted for >=
    percentile: float | None = None

    @property
    def slack(self) -> float:
        """Relative headroom (0.2: 20% below a <= bound); negative when violated."""
        return 1.0 - self.ratio


@dataclass(frozen=True)
class Evaluation:
    arch: Architecture
    workloads: tuple[WorkloadCost, ...]
    memory: MemoryBreakdown
    checks: tuple[BoundCheck, ...]
    floors: tuple[tuple[str, float], ...]  # per workload: decode-step physical floor, seconds

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def violations(self) -> tuple[BoundCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)

    @property
    def worst_ratio(self) -> float:
        return max((c.ratio for c in self.checks), default=0.0)


def _check(name, metric, workload, op, bound, predicted, percentile=None) -> BoundCheck:
    if op == "<=":
        ratio = predicted / bound if bound > 0 else float("inf")
    else:
        ratio = bound / predicted if predicted > 0 else float("inf")
    return BoundCheck(name, metric, workload, op, bound, predicted, ratio <= 1.0 + 1e-12, ratio, percentile)


def bound_check(b: BudgetBound, predicted: float) -> BoundCheck:
    """One workload bound of the budget against its prediction."""
    return _check(b.name, b.metric, b.workload.name, b.op, b.value, predicted, b.percentile)


def memory_check(spec, mem: MemoryBreakdown) -> BoundCheck:
    """The memory bound: what the deployment needs against the limit (the spec's, else the device's).

    The engine's own fit test (``mem.fits``: KV pool, CUDA context) decides; a deployment that
    does not fit fails even when the spec states no memory bound.
    """
    bound = Budget.of(spec).memory
    limit = bound.value if bound else float(mem.limit_bytes)
    c = _check("memory", "memory", None, "<=", limit, float(mem.total_bytes))
    if c.ok and not mem.fits:
        c = BoundCheck(c.name, c.metric, None, "<=", limit, c.predicted, False, max(c.ratio, 1.0 + 1e-9))
    return c


def evaluate(arch: Architecture, spec, profile, device, limits=None) -> Evaluation:
    """Exact cost-model predictions for ``arch`` under ``spec``'s target and workloads."""
    target = spec.target
    costs = tuple(predict_workload(arch, target, w, profile, device, limits) for w in spec.workloads)
    mem = memory_breakdown(arch, target, spec.workloads, profile, device, limits)
    by_workload = {w.name: c for w, c in zip(spec.workloads, costs)}
    checks = [bound_check(b, getattr(by_workload[b.workload.name], b.field)) for b in Budget.of(spec).workload_bounds]
    checks.append(memory_check(spec, mem))
    floors = tuple((w.name, decode_floor(arch, target, w, device)) for w in spec.workloads)
    return Evaluation(arch, costs, mem, tuple(checks), floors)
