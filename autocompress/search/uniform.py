"""The search's uniform choices: every layer the same sizes, chosen by measured KL.

    uniform_format_choice    formats with one size per axis (Mixtral, Qwen-MoE): the uniform
                             point of each global variant, the least KL
    measured_uniform_choice  strategy uniform, the fair Minitron++ arm: the grid's frontier,
                             measured as ``search.baseline`` measures it
    frontier_candidates      the same measurement as candidates of the default strategy, ranked
                             beside its greedy's (the uniform arm's information, given to both)
    uniform_seed             the uniform grid's best point as a seed of the per-layer search

Apart from ``search.strategy`` so the per-layer search reads alone; the measures are
``search.measures``, the report's JSON and the error ``search.final``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from autocompress.feasibility.metrics import Relaxation
from autocompress.feasibility.variants import apply
from autocompress.search.baseline import MeasuredFrontier, measure_frontier
from autocompress.search.context import SearchContext, SearchOutcome
from autocompress.search.final import NoArchitecture, finalists, record
from autocompress.search.measures import kl_measures
from autocompress.search.refine import RefineConfig, Scored, State
from autocompress.search.supernet import Supernet


def uniform_seed(net, feas, log):
    """The uniform grid's best point as a state of this supernet, or None (none passed, or it has
    other global sizes than this supernet's)."""
    if feas.uniform is None:
        return None
    try:
        return net.indices_of(feas.uniform.evaluation.arch)
    except ValueError:
        log("[search] the uniform grid's best point has other global sizes than this supernet's: not a seed")
        return None


def uniform_format_choice(ctx: SearchContext, base: SearchOutcome) -> SearchOutcome:
    """Formats with one size per axis (``SearchSpace.uniform``: Mixtral, Qwen-MoE): every layer has
    the same sizes, so there is no per-layer choice for a router to learn. The candidates are the
    best uniform point of each global variant (expert width) that the exact cost model accepted;
    the parent's KL on held-apart training rows picks one, as ``refine`` does for the others.
    ``base``: the outcome's shared part (start, uniform point, variants; ``strategy``)."""
    t0 = time.perf_counter()
    swept, settings = ctx.swept, ctx.settings
    cands = []
    for v, f in swept.tried or ((swept.variant, swept.feasibility),):
        if f.start is None:
            continue
        net = ctx.family.supernet(ctx.permuted, ctx.cfg, ctx.derived.space, apply(ctx.parent_arch, v))
        _, select_kl = kl_measures(net, ctx.teacher, ctx.train_rows, settings)
        arch = f.start.evaluation.arch
        kl = select_kl(net.indices_of(arch))
        ctx.log(f"[search] uniform point ({v.label()}): hidden {arch.hidden_size}, {arch.params() / 1e6:.2f}M params, "
                f"KL {kl:.3f}")
        cands.append((kl, v, arch))
    kl, v, arch = min(cands, key=lambda c: c[0])
    how = (f"measured choice among the uniform points of {len(cands)} global variants: {v.label()}, KL {kl:.3f} "
           "(one size per axis in this format: no per-layer search)")
    refined = {"forwards": len(cands), "seconds": round(time.perf_counter() - t0, 1),
               "tokens": 4 * settings.search_batch * settings.search_seq, "candidates": [
                   {"name": f"uniform ({c[1].label()})", "kl": round(c[0], 4), "hidden": c[2].hidden_size,
                    "attention": sum(1 for b in c[2].blocks if b.attention),
                    "ffn": sum(1 for b in c[2].blocks if b.ffn)} for c in cands]}
    ctx.log(f"[search] {how}")
    return replace(base, chosen=record(arch, ctx.imp, ctx.parent_arch), how=how,
                   finalists=finalists([(f"uniform ({c[1].label()})", c[0], c[2])
                                        for c in sorted(cands, key=lambda c: c[0])], ctx), refine=refined)


def uniform_relaxations(ctx: SearchContext) -> dict[int, Relaxation]:
    """The relaxation of every hidden size of the grid at the chosen global sizes (the cost tables'
    and the uniform frontier's input), with the measured importance of that variant."""
    sp, variant, derived = ctx.derived.space, ctx.swept.parent, ctx.derived
    vimp = ctx.imp.for_variant(ctx.parent_arch, variant)
    return {d: Relaxation(variant, d, ctx.spec, derived.profile, derived.device, sp, vimp, derived.limits)
            for d in sp.hidden_grid}


def measured_uniform_choice(ctx: SearchContext, base: SearchOutcome) -> SearchOutcome:
    """Strategy uniform (the fair Minitron++ arm, ``search.baseline``): the grid's frontier
    candidates, all meeting the contract, chosen by the KL autocompress's final choice uses."""
    relaxes = uniform_relaxations(ctx)
    net = ctx.family.supernet(ctx.permuted, ctx.cfg, ctx.derived.space, ctx.swept.parent)
    _, select_kl = kl_measures(net, ctx.teacher, ctx.train_rows, ctx.settings)
    measured = _frontier(ctx, relaxes, net, select_kl, "baseline: measure candidates")
    if measured is None:
        raise NoArchitecture("no uniform (identical-layer) architecture of the grid passes the exact cost model "
                             "and fits this parent's supernet; use `strategy autocompress`")
    how = (f"uniform grid (hidden, KV heads, FFN width, depth) under the exact cost model; measured choice "
           f"among {measured.record['forwards']} frontier candidates: KL {measured.kl:.3f}")
    return replace(base, chosen=record(measured.arch, ctx.imp, ctx.parent_arch), how=how,
                   finalists=finalists(measured.ranked, ctx), refine=measured.record)


def frontier_candidates(ctx: SearchContext, relaxes: dict[int, Relaxation], net: Supernet,
                        select_kl: Callable[[State], float], have=()) -> tuple[list[Scored], dict | None]:
    """The default's share of the uniform arm's information: the uniform grid's frontier measured
    as strategy uniform measures it (same candidates, rows, budget), as ``refine.Scored``
    candidates ranked beside the greedy's, and the record of that measurement (None: no frontier).
    A frontier point already among ``have`` (the greedy's candidates; the uniform grid seed is
    one) is not listed twice: the report keeps the greedy's name for it."""
    measured = _frontier(ctx, relaxes, net, select_kl, "search: uniform frontier")
    if measured is None:
        return [], None
    seen = {c.state for c in have}
    # select_kl caches by state: the exact value, not the record's rounded one, ranks it beside the greedy's
    out = [Scored(name, state, select_kl(state)) for name, _, arch in measured.ranked
           if (state := net.indices_of(arch)) not in seen]
    return out, {**{k: measured.record[k] for k in ("forwards", "tokens", "seconds", "frontier", "skipped")},
                 "listed": len(out)}


def _frontier(ctx: SearchContext, relaxes: dict[int, Relaxation], net: Supernet,
              select_kl: Callable[[State], float], label: str) -> MeasuredFrontier | None:
    """``baseline.measure_frontier`` with the budget both callers must share: the greedy's
    refinement budget (``RefineConfig.max_evals`` search forwards of search batch x search tokens),
    so the uniform arm and the default's frontier candidates measure the same candidates."""
    per_forward = ctx.settings.search_batch * ctx.settings.search_seq
    return measure_frontier(relaxes, ctx.derived, net.indices_of, select_kl, per_forward, RefineConfig().max_evals,
                            ctx.progress, label)
