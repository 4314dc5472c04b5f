"""Feasibility: is there an architecture in the search space that meets the contract?

Entry point ``assess``: sweep the global hidden size over its grid, solve the continuous
relaxation (``relax``) for each, round the best point to legal sizes and repair / fill it under
the exact cost model (``rounding``), and search the uniform (Minitron-style) grid at the same budget
(``uniform``) so the report can say whether heterogeneity is needed. For an infeasible contract, each bound is
relaxed alone to find the smallest change that makes the contract feasible (``diagnose``).
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass

from autocompress.feasibility.evaluate import Evaluation, evaluate
from autocompress.feasibility.importance import Importance
from autocompress.feasibility.relax import (LPResult, Relaxation, fix_layers, fix_structure, shed_order, solve,
                                           structure_bound)
from autocompress.feasibility.rounding import arch_to_x, exact_check, round_repair_fill, structure_infeasible
from autocompress.feasibility.uniform import drop_order, uniform_search
from autocompress.space import SearchSpace

BINDING_SLACK = 0.05  # an exact-check bound within 5% of its limit is reported as binding
TOP_HIDDEN = 2  # hidden sizes (best LP objectives first) whose points are rounded
EXACT_TRIES = 4  # candidates (most important first) the exact cost model judges
STRUCTURE_DEPTH_SHARES = (0.125, 0.25, 0.5, 0.75)  # whole-layer structures tried (min_keep still holds)


@dataclass(frozen=True)
class Candidate:
    evaluation: Evaluation
    importance: float  # kept importance, 0..1
    hidden: int
    lp_objective: float
    repair_moves: int


@dataclass(frozen=True)
class Diagnosis:
    bound: str  # "chat.tpot" | "memory"
    metric: str
    op: str
    value: float  # the contract's bound (SI)
    best: float | None  # best value reachable (continuous relaxation), None: none
    note: str
    basis: str = "others kept"  # "others kept": every other bound holds; "alone": all others dropped


@dataclass(frozen=True)
class Feasibility:
    verdict: str  # "feasible" | "infeasible"
    parent: Evaluation
    start: Candidate | None
    uniform: Candidate | None
    binding: tuple[str, ...]
    lp: tuple[tuple[int, str, float], ...]  # (hidden, status, objective) per grid point
    diagnosis: tuple[Diagnosis, ...]
    space: SearchSpace
    importance_source: str
    seconds: float


def _structures(relax: Relaxation, x) -> list[list[dict]]:
    """Pinned structures to re-optimize widths for, as groups tried in order until one is feasible:
    the LP's own rounding shedding 0, 1, 2, 4, ... of its least-kept sub-blocks (fill adds back what
    over-shedding removed), and whole-layer structures removing the least important layers."""
    groups = [[fix_structure(relax, x)]]
    fix = groups[0][0]
    for n, (i, v) in enumerate(shed_order(relax, x, fix), 1):  # drop_least_kept, n times
        fix = {**fix, i: 0.0, v: 0.0}
        if n & (n - 1) == 0:  # 1, 2, 4, 8, ...
            groups[0].append(fix)
    if relax.space.allows("depth"):
        order = drop_order(relax)
        groups += [[fix_layers(relax, set(order[:round(share * relax.L)]))] for share in STRUCTURE_DEPTH_SHARES]
    return groups


def _best_candidate(relaxes, results, profile, device, importance, limits, seed=None) -> Candidate | None:
    """Round, repair and fill the best LP points under the numeric model; the exact cost model
    then judges the candidates, most important first, and the first it accepts wins. ``seed``
    (hidden, x): the uniform baseline, a legal point of this space too, filled like the others,
    so the start never keeps less importance than the baseline."""
    order = sorted((r for r in results if r.x is not None),
                   key=lambda r: -r.value * importance.hidden_factor(r.d, relaxes[r.d].parent.hidden_size))
    pool = []
    if seed is not None:
        d, x_seed = seed
        x, moves, score = round_repair_fill(relaxes[d], x_seed)
        if score is not None:
            pool.append((score, d, math.nan, x, moves))
    # Branch and bound below rounds a structure only if its LP bound beats every candidate so
    # far, the seed included: a structure whose bound cannot (``structure_bound``, an upper bound
    # on its LP objective) is never solved. The margin stays clear of the solver's tolerance.
    floor = pool[0][0] - 1e-6 if pool else -math.inf
    fixed_points = []
    for r in order[:TOP_HIDDEN]:
        relax = relaxes[r.d]
        factor = importance.hidden_factor(r.d, relax.parent.hidden_size)
        tried = set()
        for group in _structures(relax, r.x):
            # Keep decisions pinned, widths re-optimized: the LP is loose on the fixed per-sub-block
            # costs (launches, per-layer overhead) when a keep variable is fractional.
            for fix in group:
                key = tuple(sorted(fix.items()))
                if key in tried:
                    continue
                tried.add(key)
                if structure_bound(relax, fix) * factor <= floor:  # could never be rounded
                    continue
                if structure_infeasible(relax, fix):  # its smallest point already breaks a bound
                    continue
                fixed = solve(relax, fix=fix)
                if fixed.x is not None:
                    fixed_points.append((fixed.value * factor, r.d, r.value, fixed.x))
                    break
    # Branch and bound: a pinned LP's objective bounds what rounding can reach, so structures are
    # rounded best bound first and the rest skipped once one candidate beats their bound.
    fixed_points.sort(key=lambda c: -c[0])
    for bound, d, value, x_lp in fixed_points:
        if pool and bound <= max(c[0] for c in pool):
            break
        x, moves, score = round_repair_fill(relaxes[d], x_lp)
        if score is not None:
            pool.append((score, d, value, x, moves))  # score includes the hidden factor
    pool.sort(key=lambda c: -c[0])
    for score, d, value, x, moves in pool[:EXACT_TRIES]:
        relax = relaxes[d]
        arch, ev, more = exact_check(relax, x, profile, device)
        if ev.ok:
            return Candidate(ev, importance.score(arch, relax.parent), d, value, moves + more)
    return None


def _bound_names(spec) -> list[tuple[str, str, str, float]]:
    out = [(f"{w.name}.{b.metric}", b.metric, b.op, b.value) for w in spec.workloads for b in w.bounds]
    if spec.target.memory_limit_bytes:
        out.append(("memory", "memory", "<=", float(spec.target.memory_limit_bytes)))
    return out


def _values(relaxes, name: str, drop: frozenset, skip=frozenset()) -> dict[int, float | None]:
    """Per hidden size, the LP's best normalized value of one bound (> 1 violates) with ``drop``
    left out; None where infeasible (hidden sizes in ``skip`` are known to be)."""
    out = {}
    for d, relax in relaxes.items():
        r = None if d in skip else solve(relax, objective=name, drop=drop)
        out[d] = r.value if r is not None and r.x is not None else None
    return out


def _best_value(values: dict, metric: str, value: float) -> float | None:
    """The best value over the hidden grid, in the bound's units."""
    found = [v for v in values.values() if v is not None]
    if not found:
        return None
    best_norm = min(found)
    if metric == "throughput":  # the LP bounds E2E <= c*out/X; turn the best E2E back into tok/s
        return value / best_norm
    return best_norm * value


def _diagnose(spec, relaxes) -> tuple[Diagnosis, ...]:
    """For each bound: the best value reachable with every other bound kept; where the others
    conflict among themselves, the floor with every other bound dropped.

    A bound out of reach even alone at a hidden size (its floor above the bound) makes every LP
    that keeps it infeasible there: those are not solved (infeasible is what they would say)."""
    out = []
    names = _bound_names(spec)
    everything = frozenset(n for n, *_ in names) | {"memory"}
    unreachable: dict[int, set[str]] = {d: set() for d in relaxes}  # per hidden size, bounds no point meets
    for name, metric, op, value in names:
        known = frozenset(d for d, out_of_reach in unreachable.items() if out_of_reach - {name})
        best = _best_value(_values(relaxes, name, frozenset({name}), known), metric, value)
        basis = "others kept"
        if best is not None:
            ok = best >= value if metric == "throughput" else best <= value
            note = ("within reach once the other bounds hold" if ok else
                    "out of reach with the other bounds kept")
        else:
            basis = "alone"
            alone = _values(relaxes, name, everything)
            for d, v in alone.items():
                if v is None or v > 1.0 + 1e-6:  # margin: clear of the solver's tolerance
                    unreachable[d].add(name)
            best = _best_value(alone, metric, value)
            if best is None:
                note = "no architecture in the search space reaches it"
            else:
                ok = best >= value if metric == "throughput" else best <= value
                note = ("the other bounds conflict among themselves; alone, this bound is within reach" if ok else
                        "out of reach even with every other bound dropped")
        out.append(Diagnosis(name, metric, op, value, best, note, basis))
    return tuple(out)


def assess(spec, parent_arch, profile, device, space: SearchSpace, importance: Importance,
           limits=None, diagnose: bool = True) -> Feasibility:
    """The verdict, the starting point, the uniform baseline and (if infeasible) the diagnosis."""
    t0 = time.perf_counter()
    parent_eval = evaluate(parent_arch, spec, profile, device, limits)
    relaxes = {d: Relaxation(parent_arch, d, spec, profile, device, space, importance, limits)
               for d in space.hidden_grid}
    with tempfile.TemporaryDirectory(prefix="acc-lp-") as basis_dir:  # each LP starts from the last one's basis
        results: list[LPResult] = [solve(r, basis_dir=basis_dir) for r in relaxes.values()]
    uniform, seed = None, None
    found = uniform_search(relaxes, profile, device, limits)
    if found is not None:
        arch, ev, score, d = found
        uniform = Candidate(ev, score, d, math.nan, 0)
        seed = (d, arch_to_x(relaxes[d], arch))
    start = _best_candidate(relaxes, results, profile, device, importance, limits, seed)
    binding: tuple[str, ...] = ()
    if start is not None:
        binding = tuple(c.name for c in start.evaluation.checks if c.slack < BINDING_SLACK)
    diag: tuple[Diagnosis, ...] = ()
    if start is None and diagnose:
        diag = _diagnose(spec, relaxes)
    lp = tuple((r.d, r.status, r.value) for r in results)
    return Feasibility("feasible" if start else "infeasible", parent_eval, start, uniform, binding, lp, diag,
                       space, importance.source, time.perf_counter() - t0)
