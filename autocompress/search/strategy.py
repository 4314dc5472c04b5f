"""Choosing the architecture: cvxpy starting point with measured importance, then per strategy

    autocompress    router v2's decode (``joint.run_router_v2``), the cvxpy start and the uniform
                    point as seeds, the measured greedy; the measured choice among its candidates
                    and the uniform grid's frontier, measured as strategy uniform measures it
                    (the default: ``bench/results/quality/arms.md``)
    router          router v2 alone: router and supernet temporaries trained together (``joint``)
    router-refine   router v2, then the measured greedy from its decode and the measured choice
    uniform         the Minitron-style grid's frontier, measured choice (``uniform``, ``baseline``)

Every strategy sees the same importance, cost model, bounds and teacher outputs; only the search
differs, so a user can A/B them with one line of the spec (``bench/quality.py --arms`` does).
"""

from __future__ import annotations

import time

from autocompress.build import dist
from autocompress.families.base import family_of
from autocompress.feasibility.metrics import Relaxation
from autocompress.feasibility.objective import load_importance
from autocompress.feasibility.variants import assess_variants
from autocompress.search.config import search_configs
from autocompress.search.final import NoArchitecture, arch_json, candidate_json, final_choice, finalists_json
from autocompress.search.joint import router_v2_choice, run_router_v2
from autocompress.search.measures import kl_measures
from autocompress.search.baseline import SELECT_ROWS
from autocompress.search.refine import refine
from autocompress.search.tables import cost_tables
from autocompress.search.uniform import frontier_candidates, measured_uniform_choice, uniform_format_choice


def choose_architecture(spec, parent_arch, derived, importance_path, permuted, cfg, teacher, train_rows, settings,
                        progress, family=None, ckpt_dir=None) -> dict:
    """The search stage: the architecture of ``settings.strategy`` and how it was chosen (JSON).
    ``family``: the parent's ``families.base.BuildFamily`` (its supernet); default: by the IR family.
    ``ckpt_dir``: where router v2 checkpoints (the stage's partial folder: a killed search resumes)."""
    log = progress.log
    family = family or family_of(parent_arch.family)
    imp = load_importance(str(importance_path), parent_arch)
    swept = assess_variants(spec, parent_arch, derived.profile, derived.device, derived.space, imp, derived.limits,
                            diagnose=False)
    feas = swept.feasibility
    if feas.start is None:
        raise NoArchitecture("with the measured importance no architecture passed the exact check")
    out = {"start": arch_json(feas.start.evaluation.arch, feas.start.importance),
           "uniform": arch_json(feas.uniform.evaluation.arch, feas.uniform.importance) if feas.uniform else None}
    if swept.rows:
        log(f"[search] global sizes: {swept.variant.label()} (best of {len(swept.rows)} variants)")
        out["variants"] = [dict(r) for r in swept.rows]
    if settings.strategy == "uniform":  # feas.uniform is the prior's pick in a few exact tries: the
        # frontier below tries the whole grid (with measured importance the prior's first picks can
        # all fail the exact model while a narrower uniform point passes: Gemma 3 on the host CPU)
        return measured_uniform_choice(out, spec, swept, derived, family, permuted, cfg, teacher, train_rows,
                                       settings, imp, parent_arch, progress)
    sp = derived.space
    if sp.uniform:
        return uniform_format_choice(out, swept, family, permuted, cfg, teacher, train_rows, settings, sp, imp,
                                     parent_arch, log)
    variant = swept.parent  # the parent at the chosen global sizes (the parent itself for Llama)
    vimp = imp.for_variant(parent_arch, variant)
    relaxes = {d: Relaxation(variant, d, spec, derived.profile, derived.device, sp, vimp, derived.limits)
               for d in sp.hidden_grid}
    tables = [cost_tables(relaxes[d]) for d in sp.hidden_grid]
    net = family.supernet(permuted, cfg, sp, variant)
    start = net.indices_of(feas.start.evaluation.arch)
    if settings.strategy in ("router", "router-refine"):
        return router_v2_choice(out, spec, derived, feas, relaxes, tables, net, start, teacher, train_rows, settings,
                                imp, parent_arch, progress, ckpt_dir)
    # the default, autocompress
    refine_cfg, _ = search_configs(settings)
    search_kl, select_kl = kl_measures(net, teacher, train_rows, settings)
    decode, record, points = run_router_v2(net, tables, start, feas, teacher, train_rows, settings, select_kl,
                                           progress, ckpt_dir)
    # the greedy seeds from the points router v2's prior was chosen among: the same information
    seeds, palette_seeds = {"router v2": decode, "cvxpy start": points["cvxpy point"]}, ("router v2",)
    if "uniform grid point" in points:
        seeds["uniform grid"] = points["uniform grid point"]
    log(f"[refine] measured greedy and choice among {len(seeds)} seeds (KL to the parent, before distillation)")
    t_ref = time.perf_counter()
    # the measured forwards are independent: under a launcher they are split over the ranks
    ref = refine(tables, seeds, search_kl, select_kl, refine_cfg, log, dist.map_shared, progress, palette_seeds)
    t_ref = time.perf_counter() - t_ref
    candidates = list(ref.candidates)
    # the uniform arm's measured candidates join the pool
    extra, frontier = frontier_candidates(relaxes, derived, net, select_kl, settings, progress, candidates)
    candidates += extra
    arch, how, ranked = final_choice(candidates, net, spec, derived, relaxes, feas, log, select_kl)
    out["architecture"] = arch_json(arch, imp.score(arch, parent_arch))  # against the parent, globals included
    out["how"] = how
    out["finalists"] = finalists_json(ranked, settings.finalists, imp, parent_arch)
    # the search's choice (before the shortlist), measured (repaired: re-measured)
    record["final_kl"] = round(select_kl(net.indices_of(arch)), 4)
    out["search"] = record
    out["refine"] = {"forwards": ref.evals, "seconds": round(t_ref, 1),
                     "tokens": SELECT_ROWS * settings.search_batch * settings.search_seq,
                     "candidates": [candidate_json(c, net, spec.target.tensor_parallel) for c in candidates],
                     "uniform_frontier": frontier}  # its forwards and seconds, apart from the greedy's
    return out


__all__ = ["choose_architecture"]
