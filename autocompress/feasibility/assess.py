"""Feasibility: is there an architecture in the search space that meets the contract?

Entry point ``assess``: sweep the global hidden size over its grid, solve the continuous
relaxation (``relax``) for each, round the best point to legal sizes and repair / fill it under
the exact cost model (``rounding``), and search the uniform (Minitron-style) grid at the same budget
(``uniform``) so the report can say whether heterogeneity is needed. Three verdicts (``Feasibility``):
feasible, infeasible (proved by a lower-bound relaxation, or by an engine limit no architecture
changes) and not found; for a proved infeasible contract ``diagnose`` says what would make it
feasible.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass

from autocompress.feasibility.diagnose import Diagnosis, diagnose as _diagnose, engine_limits
from autocompress.feasibility.exact import Evaluation, evaluate
from autocompress.feasibility.objective import Importance
from autocompress.feasibility.lp import LPResult, solve
from autocompress.feasibility.metrics import Relaxation, arch_to_x
from autocompress.feasibility.pins import fix_layers, fix_structure, shed_order, structure_bound
from autocompress.feasibility.rounding import exact_check, round_repair_fill, structure_infeasible
from autocompress.feasibility.uniform import drop_order, uniform_search
from autocompress.plan.budget import Budget
from autocompress.plan.space import SearchSpace

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


VERDICTS = ("feasible", "infeasible", "not_found")


@dataclass(frozen=True)
class Feasibility:
    """``verdict``: *feasible* (``start`` passed the exact check), *infeasible* (proved: no
    architecture of the space meets the bounds, ``reason`` says how), or *not_found* (the
    relaxation is feasible, but rounding and repair found no architecture that passes the exact
    check, or a solver failed; ``reason`` says which)."""

    verdict: str
    parent: Evaluation
    start: Candidate | None
    uniform: Candidate | None
    binding: tuple[str, ...]
    lp: tuple[tuple[int, str, float], ...]  # (hidden, status, objective) per grid point
    diagnosis: tuple[Diagnosis, ...]
    space: SearchSpace
    importance_source: str
    seconds: float
    reason: str = ""


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


def assess(spec, parent_arch, profile, device, space: SearchSpace, importance: Importance,
           limits=None, diagnose: bool = True) -> Feasibility:
    """The verdict, the starting point, the uniform baseline and (if infeasible) the diagnosis."""
    t0 = time.perf_counter()
    parent_eval = evaluate(parent_arch, spec, profile, device, limits)
    relaxes = {d: Relaxation(parent_arch, d, spec, profile, device, space, importance, limits)
               for d in space.hidden_grid}
    with tempfile.TemporaryDirectory(prefix="acc-lp-") as basis_dir:  # each LP starts from the last one's basis
        results: list[LPResult] = [solve(r, basis_dir=basis_dir) for r in relaxes.values()]
    lp = tuple((r.d, r.status, r.value) for r in results)

    def done(verdict, start=None, uniform=None, binding=(), diag=(), reason=""):
        return Feasibility(verdict, parent_eval, start, uniform, binding, lp, diag, space, importance.source,
                           time.perf_counter() - t0, reason)

    engine = engine_limits(spec, profile, device)
    if engine:  # no architecture changes these: proved, whatever the LP says
        return done("infeasible", diag=engine, reason=engine[0].note)
    uniform, seed = None, None
    found = uniform_search(relaxes, profile, device, limits)
    if found is not None:
        arch, ev, score, d = found
        uniform = Candidate(ev, score, d, math.nan, 0)
        seed = (d, arch_to_x(relaxes[d], arch))
    if space.uniform:  # the format has one size per axis (native MoE): the uniform grid is the space
        start = uniform
    else:
        start = _best_candidate(relaxes, results, profile, device, importance, limits, seed)
    if start is not None:
        binding = tuple(c.name for c in start.evaluation.checks if c.slack < BINDING_SLACK)
        return done("feasible", start, uniform, binding)
    verdict, reason = _why_none(spec, parent_arch, profile, device, space, importance, limits, results)
    diag = _diagnose(Budget.of(spec), relaxes) if diagnose and verdict == "infeasible" else ()
    return done(verdict, uniform=uniform, diag=diag, reason=reason)


def _why_none(spec, parent_arch, profile, device, space, importance, limits, results) -> tuple[str, str]:
    """No candidate passed: proved infeasible, or only not found (and why)."""
    failed = [(r.d, r.status) for r in results if r.status not in ("optimal", "optimal_inaccurate", "infeasible")]
    if failed:
        where = ", ".join(f"hidden {d}: {st}" for d, st in failed)
        return "not_found", f"the LP solver gave no answer ({where}); nothing is proved"
    feasible = [r.d for r in results if r.x is not None]
    if feasible:
        return "not_found", (f"the relaxation is feasible at hidden {', '.join(map(str, feasible))}, but rounding and "
                             "repair found no architecture that passes the exact check; nothing is proved")
    # The LP steers with a tight model; a proof needs a relaxation that is below the exact model at
    # every legal point (``Relaxation(proof=True)``). Infeasible there at every hidden size: proved.
    for d in space.hidden_grid:
        r = solve(Relaxation(parent_arch, d, spec, profile, device, space, importance, limits, proof=True))
        if r.status != "infeasible":
            if r.x is None:
                return "not_found", f"the proof's LP solver gave no answer at hidden {d} ({r.status})"
            return "not_found", (f"the lower-bound relaxation is feasible at hidden {d} while the steering one is not; "
                                 "no architecture was found and nothing is proved")
    return "infeasible", ("the relaxation, a lower bound of the exact cost model, is infeasible at every hidden size "
                          f"of the space ({', '.join(map(str, space.hidden_grid))})")
