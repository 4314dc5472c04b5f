"""How the size a contract allows moves with the profile's known error on its binding bounds.

A measured profile states its error on held-out models per metric (``Profile.known_error``: the
median and p95 of |predicted / measured - 1|). A model whose cost the profile over-predicts by e
meets a bound B in measured terms while its prediction reaches B x (1 + e); under-predicted by e,
the prediction must stay under B x (1 - e). So the size the contract really allows lies between
what the check finds at B x (1 - e) and at B x (1 + e).

``bound_sensitivity`` runs the check's own search (``variants.assess_variants``: relaxation,
rounding, exact check, the uniform grid; the prior importance, as ``acc check``) with each binding
bound at those limits, for e the profile's median and p95 error on that bound's metric, and
returns the parameters of the architecture it finds and of the uniform grid's best point at each.
Each limit is one feasibility check (about a second on the examples). A profile that was never
measured has no known error: the result says so and computes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from autocompress.feasibility.objective import prior_importance
from autocompress.feasibility.variants import assess_variants
from autocompress.plan.budget import Budget, BudgetBound


@dataclass(frozen=True)
class Shift:
    """The check at one limit of a binding bound."""

    error: float  # signed: +e = the profile over-predicts by e, so the limit in predicted terms is bound x (1 + e)
    stat: str  # which known error: "median" | "p95"; "none" at the bound itself
    limit: float  # the bound in predicted terms (SI units)
    verdict: str
    params: int | None  # the check's starting point there (heterogeneous), or None: nothing found
    uniform_params: int | None  # the uniform grid's best point there


@dataclass(frozen=True)
class BoundSensitivity:
    bound: str  # "memory", "chat.e2e"
    metric: str
    op: str
    value: float  # the contract's limit (SI units)
    median: float  # the profile's known error on the metric
    p95: float
    samples: int | None  # held-out models the error was measured on
    shifts: tuple[Shift, ...]  # by limit, ascending


@dataclass(frozen=True)
class Sensitivity:
    profile: str
    profile_source: str
    binding: tuple[str, ...]  # the binding bounds at the contract's limits
    bounds: tuple[BoundSensitivity, ...]
    unknown: tuple[str, ...]  # binding bounds whose metric the profile has no measured error for
    seconds: float


def with_limit(spec, bound: BudgetBound, limit: float):
    """``spec`` with ``bound`` (every percentile of its metric in its workload) at ``limit`` (SI units)."""
    if bound.workload is None:  # memory
        return replace(spec, target=replace(spec.target, memory_limit_bytes=int(round(limit))))
    ws = tuple(replace(w, bounds=tuple(replace(b, value=limit) if b.metric == bound.metric else b for b in w.bounds))
               if w.name == bound.workload.name else w for w in spec.workloads)
    return replace(spec, workloads=ws)


def _params(candidate) -> int | None:
    return None if candidate is None else candidate.evaluation.arch.params()


def _check(spec, parent, derived, importance):
    return assess_variants(spec, parent, derived.profile, derived.device, derived.space, importance, derived.limits,
                           diagnose=False).feasibility


def bound_sensitivity(spec, parent, derived) -> Sensitivity:
    """The check at each binding bound's limit x (1 -/+ the profile's median and p95 error); see the
    module docstring. ``parent``: the parent's architecture; ``derived``: ``plan.derive``'s."""
    t0 = time.perf_counter()
    profile = derived.profile
    importance = prior_importance(parent)
    at_bound = _check(spec, parent, derived, importance)
    budget = Budget.of(spec)
    out, unknown = [], []
    for name in at_bound.binding:
        b = budget[name]
        err = profile.error(b.metric)
        if err is None:
            unknown.append(name)
            continue
        shifts = [Shift(0.0, "none", b.value, at_bound.verdict, _params(at_bound.start), _params(at_bound.uniform))]
        for stat, e in (("median", err.median), ("p95", err.p95)):
            for signed in (-e, e):
                if e <= 0 or signed <= -1:
                    continue
                limit = b.value * (1 + signed)
                f = _check(with_limit(spec, b, limit), parent, derived, importance)
                shifts.append(Shift(signed, stat, limit, f.verdict, _params(f.start), _params(f.uniform)))
        out.append(BoundSensitivity(name, b.metric, b.op, b.value, err.median, err.p95, err.samples,
                                    tuple(sorted(shifts, key=lambda s: s.limit))))
    return Sensitivity(profile.name, profile.source, at_bound.binding, tuple(out), tuple(unknown),
                       round(time.perf_counter() - t0, 1))


__all__ = ["BoundSensitivity", "Sensitivity", "Shift", "bound_sensitivity", "with_limit"]
