"""The contract's budget: every bound resolved once into a typed object.

A contract states its bounds in its own terms: ``tpot p99 <= 2 ms`` inside ``workload npc``,
``throughput >= 2000 tok/s`` inside ``workload chat``, ``memory <= 1 GiB`` in ``target``. Each stage
that optimises or judges against them (the relaxation and its cost tables, the router, the exact
check, the diagnosis, the preflight, ``acc verify`` and the reports) reads the ``BudgetBound`` built
here: its name, workload, metric, operator, percentile, the limit in SI units, the normalized form
the relaxation bounds (``row / scale <= 1``) and, for a throughput bound, its E2E form. No stage
rebuilds them from strings.

``Budget.of(spec)`` resolves a spec's budget on first use and returns that same object after, so
one command that parses its spec once resolves its budget once.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property

from autocompress.diagnostics import Span
from autocompress.lang.model import Workload

# The attribute of a predicted ``cost.latency.WorkloadCost`` and the key of a measured sample or
# summary (``measure.engines.base``) that holds each metric's value.
SAMPLE_FIELD = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s", "throughput": "throughput_tok_s"}


def bound_name(workload: str, metric: str) -> str:
    """The name of a workload's metric, ``"npc.tpot"``: the key of the relaxation's metrics, its LP
    rows, the checks and the reports. Memory's name is ``"memory"``."""
    return f"{workload}.{metric}"


def e2e_limit(workload: Workload, throughput: float) -> float:
    """The E2E bound that a throughput bound is, in seconds.

    The cost model's throughput is ``concurrency * output_tokens / E2E`` (``cost.latency``: the
    workload's sequences finish together, each with ``output_tokens`` tokens), so
    ``throughput >= X``  <=>  ``E2E <= concurrency * output_tokens / X``. The relaxation is affine in
    E2E, not in its reciprocal, so it bounds throughput in this form.
    """
    return workload.concurrency * workload.output_tokens / throughput


@dataclass(frozen=True)
class BudgetBound:
    """One bound of the contract, resolved."""

    name: str  # "npc.tpot" | "memory"
    workload: Workload | None  # the workload it belongs to; None for memory
    metric: str  # ttft | tpot | e2e | throughput | memory
    op: str  # "<=" (latencies, memory) | ">=" (throughput)
    percentile: float | None  # p50/p90/p99 as a number; None: the mean (memory: always None)
    value: float  # the limit in SI units: seconds, tokens/s or bytes
    row: str  # the relaxation's metric it bounds: the E2E one for throughput, else its own (name)
    scale: float  # normalized form: the relaxation bounds ``row / scale <= 1``
    span: Span  # where the contract states it

    @property
    def e2e(self) -> float | None:
        """The E2E form of a throughput bound, in seconds (``e2e_limit``); None for other metrics."""
        return self.scale if self.metric == "throughput" else None

    @property
    def field(self) -> str:
        """Where a workload's predicted cost or measurement holds this metric (``SAMPLE_FIELD``)."""
        return SAMPLE_FIELD[self.metric]

    def holds(self, value: float) -> bool:
        """Whether ``value`` (in SI units) meets the bound."""
        return value <= self.value if self.op == "<=" else value >= self.value

    def from_normalized(self, normalized: float) -> float:
        """A normalized value of the relaxation's row back in the bound's units: throughput is
        ``concurrency * output_tokens / E2E``, which is ``value / normalized``."""
        return self.value / normalized if self.metric == "throughput" else normalized * self.value


@dataclass(frozen=True)
class Budget:
    """The bounds of one contract, in contract order: each workload's bounds as its block states
    them, workloads in order, then memory (the target's bound, when it has one)."""

    bounds: tuple[BudgetBound, ...]

    @classmethod
    def from_spec(cls, spec) -> Budget:
        """Resolve every bound of ``spec`` (a ``lang.model.Spec``, whose values are SI already)."""
        out = []
        for w in spec.workloads:
            for b in w.bounds:
                if b.metric == "throughput":
                    row, scale = bound_name(w.name, "e2e"), e2e_limit(w, b.value)
                else:
                    row, scale = bound_name(w.name, b.metric), b.value
                out.append(BudgetBound(bound_name(w.name, b.metric), w, b.metric, b.op, b.percentile, b.value, row,
                                       scale, b.span))
        t = spec.target
        if t.memory_limit_bytes:
            limit = float(t.memory_limit_bytes)
            out.append(BudgetBound("memory", None, "memory", "<=", None, limit, "memory", limit, t.memory_span))
        return cls(tuple(out))

    @classmethod
    def of(cls, spec) -> Budget:
        """``spec``'s budget: resolved on first use, the same object for every later call with this
        spec (keyed by the object: specs equal in meaning can differ in their spans)."""
        key = id(spec)
        found = _RESOLVED.get(key)
        if found is None:
            found = _RESOLVED[key] = cls.from_spec(spec)
            weakref.finalize(spec, _RESOLVED.pop, key, None)
        return found

    def __iter__(self):
        return iter(self.bounds)

    def __len__(self) -> int:
        return len(self.bounds)

    def __getitem__(self, name: str) -> BudgetBound:
        """The bound named ``name`` (``"npc.tpot"``, ``"memory"``); of two with one name (one metric
        at two percentiles) the last, the one the relaxation's row holds (``rows``)."""
        found = self.rows.get(name) or next((b for b in self.bounds if b.name == name), None)
        if found is None:
            raise KeyError(name)
        return found

    def get(self, name: str) -> BudgetBound | None:
        try:
            return self[name]
        except KeyError:
            return None

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.bounds)

    @cached_property
    def memory(self) -> BudgetBound | None:
        """The memory bound, None when the contract states none (the device's memory then limits)."""
        return next((b for b in self.bounds if b.metric == "memory"), None)

    @cached_property
    def workload_bounds(self) -> tuple[BudgetBound, ...]:
        """The workloads' bounds (latencies and throughput), in contract order: memory apart."""
        return tuple(b for b in self.bounds if b.workload is not None)

    def of_workload(self, workload: str) -> tuple[BudgetBound, ...]:
        """The bounds of the workload named ``workload``, in contract order."""
        return tuple(b for b in self.bounds if b.workload is not None and b.workload.name == workload)

    @cached_property
    def rows(self) -> dict[str, BudgetBound]:
        """The workloads' bounds the relaxation holds, one row per name, in contract order. It predicts
        means: of two bounds on one metric at different percentiles, which share a name, the row
        keeps the last (the exact check judges both)."""
        out: dict[str, BudgetBound] = {}
        for b in self.workload_bounds:
            out[b.name] = b
        return out


_RESOLVED: dict[int, Budget] = {}  # id(spec) -> its budget (``Budget.of``), dropped with the spec
