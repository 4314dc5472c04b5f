"""Choosing the architecture: cvxpy starting point with measured importance, then per strategy

    autocompress    router v2's decode (``joint.run_router_v2``), the cvxpy start and the uniform
                    point as seeds, the measured greedy; the measured choice among its candidates
                    and the uniform grid's frontier, measured as strategy uniform measures it
                    (the default: ``bench/results/quality/arms.md``)
    router          router v2 alone: router and supernet temporaries trained together (``joint``)
    router-refine   router v2, then the measured greedy from its decode and the measured choice
    uniform         the Minitron-style grid's frontier, measured choice (``uniform``, ``baseline``)

Each is an object of ``STRATEGIES`` with one method, ``choose(ctx) -> SearchOutcome``, over one
``context.SearchContext`` (``search_context`` makes it: the measured importance, the global sweep,
the teacher outputs, the settings, the progress). Every strategy sees the same importance, cost
model, bounds and teacher outputs; only the search differs, so a user can A/B them with one line
of the spec (``bench/quality.py --arms`` does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from autocompress.build import dist
from autocompress.build.settings import BuildSettings
from autocompress.feasibility.metrics import Relaxation
from autocompress.feasibility.objective import load_importance
from autocompress.feasibility.variants import assess_variants
from autocompress.ir import Architecture
from autocompress.lang.model import Spec
from autocompress.plan.derive import Derived
from autocompress.progress import Progress
from autocompress.search.baseline import SELECT_ROWS
from autocompress.search.config import search_configs
from autocompress.search.context import ArchRecord, SearchContext, SearchOutcome
from autocompress.search.final import NoArchitecture, candidate_json, final_choice, finalists, record
from autocompress.search.joint import router_v2_choice, run_router_v2
from autocompress.search.measures import kl_measures
from autocompress.search.refine import State, refine
from autocompress.search.supernet import Supernet
from autocompress.search.tables import CostTables, cost_tables
from autocompress.search.uniform import (frontier_candidates, measured_uniform_choice, uniform_format_choice,
                                         uniform_relaxations)


class Strategy(Protocol):
    def choose(self, ctx: SearchContext) -> SearchOutcome: ...


@dataclass(frozen=True)
class SearchInputs:
    """What the search stage hands a strategy, before the importance is read and the sweep run."""

    spec: Spec
    parent_arch: Architecture
    derived: Derived
    importance_path: Path  # the importance stage's importance.json
    settings: BuildSettings  # the strategy's
    progress: Progress
    ckpt_dir: Path | None = None  # router v2's checkpoints (the stage's partial folder: a killed search resumes)


def search_context(inputs: SearchInputs, family, permuted, cfg, teacher, train_rows) -> SearchContext:
    """The context every strategy reads: the measured importance, and the global sizes swept with it
    (``feasibility.variants``; no diagnosis: the check made it). ``family`` etc.: the shared stages'
    outputs (``build.prepare.Prepared``)."""
    imp = load_importance(str(inputs.importance_path), inputs.parent_arch)
    d = inputs.derived
    swept = assess_variants(inputs.spec, inputs.parent_arch, d.profile, d.device, d.space, imp, d.limits,
                            diagnose=False)
    return SearchContext(inputs.spec, inputs.parent_arch, d, inputs.settings, family, permuted, cfg, teacher,
                         train_rows, imp, swept, inputs.progress, inputs.ckpt_dir)


def outcome_base(ctx: SearchContext) -> SearchOutcome:
    """What every strategy's outcome shares: the cvxpy start, the uniform grid's point, the variants
    swept; the chosen architecture is the start until a strategy chooses (``NoArchitecture``: no start)."""
    feas = ctx.swept.feasibility
    if feas.start is None:
        raise NoArchitecture("with the measured importance no architecture passed the exact check")
    start = ArchRecord.of(feas.start.evaluation.arch, feas.start.importance)
    uniform = ArchRecord.of(feas.uniform.evaluation.arch, feas.uniform.importance) if feas.uniform else None
    variants = tuple(dict(r) for r in ctx.swept.rows) if ctx.swept.rows else None
    if variants:
        ctx.log(f"[search] global sizes: {ctx.swept.variant.label()} (best of {len(variants)} variants)")
    return SearchOutcome(start, uniform, variants, start, "", ())


@dataclass(frozen=True)
class SupernetSearch:
    """The per-layer search's inputs at the chosen global sizes: the relaxation and exact cost
    tables of every hidden size, the parent's supernet and the cvxpy start as its state."""

    relaxes: dict[int, Relaxation]  # by hidden size
    tables: list[CostTables]  # in the order of the hidden grid
    net: Supernet  # the family's (``families.base.BuildFamily.supernet``)
    start: State

    @classmethod
    def of(cls, ctx: SearchContext) -> SupernetSearch:
        relaxes = uniform_relaxations(ctx)
        tables = [cost_tables(relaxes[d]) for d in ctx.derived.space.hidden_grid]
        net = ctx.family.supernet(ctx.permuted, ctx.cfg, ctx.derived.space, ctx.swept.parent)
        return cls(relaxes, tables, net, net.indices_of(ctx.swept.feasibility.start.evaluation.arch))


class Uniform:
    """The Minitron-style grid's frontier, measured choice (``uniform``, ``baseline``). The sweep's
    uniform point is the prior's pick in a few exact tries; the frontier tries the whole grid (with
    measured importance the prior's first picks can all fail the exact model while a narrower
    uniform point passes: Gemma 3 on the host CPU)."""

    def choose(self, ctx: SearchContext) -> SearchOutcome:
        return measured_uniform_choice(ctx, outcome_base(ctx))


class Router:
    """Router v2 alone (``router``), or followed by the measured greedy from its decode
    (``router-refine``): ``joint``."""

    def choose(self, ctx: SearchContext) -> SearchOutcome:
        base = outcome_base(ctx)
        if ctx.derived.space.uniform:
            return uniform_format_choice(ctx, base)
        s = SupernetSearch.of(ctx)
        return router_v2_choice(ctx, base, s.relaxes, s.tables, s.net, s.start)


class Autocompress:
    """The default: router v2's decode, the cvxpy start and the uniform point as seeds of the
    measured greedy; the measured choice among its candidates and the uniform grid's frontier."""

    def choose(self, ctx: SearchContext) -> SearchOutcome:
        base = outcome_base(ctx)
        if ctx.derived.space.uniform:
            return uniform_format_choice(ctx, base)
        s = SupernetSearch.of(ctx)
        settings, log, feas = ctx.settings, ctx.log, ctx.swept.feasibility
        refine_cfg, _ = search_configs(settings)
        search_kl, select_kl = kl_measures(s.net, ctx.teacher, ctx.train_rows, settings)
        run = run_router_v2(ctx, s.net, s.tables, s.start, select_kl)
        # the greedy seeds from the points router v2's prior was chosen among: the same information
        seeds, palette_seeds = {"router v2": run.decode, "cvxpy start": run.points["cvxpy point"]}, ("router v2",)
        if "uniform grid point" in run.points:
            seeds["uniform grid"] = run.points["uniform grid point"]
        log(f"[refine] measured greedy and choice among {len(seeds)} seeds (KL to the parent, before distillation)")
        t_ref = time.perf_counter()
        # the measured forwards are independent: under a launcher they are split over the ranks
        ref = refine(s.tables, seeds, search_kl, select_kl, refine_cfg, log, dist.map_shared, ctx.progress,
                     palette_seeds)
        t_ref = time.perf_counter() - t_ref
        candidates = list(ref.candidates)
        # the uniform arm's measured candidates join the pool
        extra, frontier = frontier_candidates(ctx, s.relaxes, s.net, select_kl, candidates)
        candidates += extra
        arch, how, ranked = final_choice(ctx, candidates, s.net, s.relaxes, feas, select_kl)
        # the search's choice (before the shortlist), measured (repaired: re-measured)
        router = replace(run.record, final_kl=select_kl(s.net.indices_of(arch)))
        refined = {"forwards": ref.evals, "seconds": round(t_ref, 1),
                   "tokens": SELECT_ROWS * settings.search_batch * settings.search_seq,
                   "candidates": [candidate_json(c, s.net, ctx.spec.target.tensor_parallel) for c in candidates],
                   "uniform_frontier": frontier}  # its forwards and seconds, apart from the greedy's
        # the importance against the parent, globals included
        return replace(base, chosen=record(arch, ctx.imp, ctx.parent_arch), how=how, finalists=finalists(ranked, ctx),
                       search=router.to_json(), refine=refined)


# the strategies a spec's ``search { strategy ... }`` names (``lang.model.STRATEGIES``)
STRATEGIES: dict[str, Strategy] = {"autocompress": Autocompress(), "router": Router(), "router-refine": Router(),
                                   "uniform": Uniform()}


def choose_architecture(ctx: SearchContext) -> SearchOutcome:
    """The search stage: the architecture of ``ctx.settings.strategy`` and how it was chosen."""
    return STRATEGIES[ctx.settings.strategy].choose(ctx)


__all__ = ["STRATEGIES", "SearchInputs", "Strategy", "SupernetSearch", "choose_architecture", "outcome_base",
           "search_context"]
