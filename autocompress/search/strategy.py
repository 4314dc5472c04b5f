"""Choosing the architecture: cvxpy starting point with measured importance, then per strategy

    autocompress    router v2's decode (``joint_search.run_router_v2``), the cvxpy start and the
                    uniform point as seeds, the measured greedy; the measured choice among its
                    candidates and the uniform grid's frontier, measured as strategy uniform
                    measures it (the default: ``bench/results/search_ablation.md``)
    greedy          the same with router v1's decode as the router's seed (the default until
                    2026-12-05; v1 never moved from the cvxpy start in a measured run)
    router          router v2 alone: router and supernet temporaries trained together (``joint_search``)
    router-refine   router v2, then the measured greedy from its decode and the measured choice
    uniform         the Minitron-style grid's frontier, measured choice (``baseline``)

Every strategy sees the same importance, cost model, bounds and teacher outputs; only the search
differs, so a user can A/B them with one line of the spec (``bench/search_ablation.py`` does).
"""

from __future__ import annotations

import time

import torch

from autocompress.build import dist
from autocompress.diagnostics import BuildError
from autocompress.search.refine import RefineConfig, refine
from autocompress.search.tables import cost_tables
from autocompress.diagnostics import EXIT_NOT_FOUND
from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.metrics import Relaxation
from autocompress.feasibility.objective import load_importance
from autocompress.feasibility.rounding import repair_and_fill
from autocompress.ir import arch_to_dict


def arch_json(arch, importance: float) -> dict:
    return {**arch_to_dict(arch), "importance_kept": float(f"{importance:.4g}")}


def search_configs(settings):
    """(router v1 config, refinement config, router v2 config) of a build: the search stage runs
    with these and its cache key holds them, so a changed default re-runs the search."""
    from autocompress.search.router import SearchConfig
    from autocompress.search.router_v2 import RouterV2Config

    per_step = settings.search_batch * settings.search_seq
    v2 = RouterV2Config(steps=max(1, settings.search_tokens // per_step), tau_start=settings.search_temperature,
                        tau_end=settings.search_temperature / 20, seed=settings.seed)
    return SearchConfig(steps=settings.search_steps, seed=settings.seed), RefineConfig(), v2


def search_key_parts(settings) -> tuple[str, str]:
    """What the search stage's cache key holds besides its upstream keys: every build setting and
    both search configs, defaults included."""
    import json
    from dataclasses import asdict

    configs = [asdict(c) for c in search_configs(settings)]
    return json.dumps(settings.as_dict(), sort_keys=True), json.dumps(configs, sort_keys=True)


class NoArchitecture(BuildError):
    """No architecture was found, infeasibility not proved: exit 4 with the reason, not a traceback."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_NOT_FOUND)


def _measures(net, teacher, train_rows, settings):
    """Two KL-to-the-parent measures on disjoint training rows (top-k teacher outputs from the
    cache): ``refine.Measure`` for the greedy, and a function of states that judges candidates.

    The greedy measures many one-move variants of one state: the residual stream entering each
    layer is kept for the last state seen, and a variant's forward resumes at its move's layer."""
    from autocompress.search.refine import apply
    from autocompress.data.teacher import topk_kl

    T, b, n = settings.search_seq, settings.search_batch, len(train_rows)

    def rows_of(rows):
        rows = [r % n for r in rows]
        t = teacher.get(rows)
        return train_rows[rows][:, :T], type(t)(t.values[:, :T], t.indices[:, :T], t.lse[:, :T])

    ids, target = rows_of(range(n - b, n))
    kept: dict = {}

    def search_kl(state, move=None) -> float:
        with torch.no_grad():
            if kept.get("state") != state:
                xs = {}
                tap = lambda ev, l, *t: xs.__setitem__(l, t[0]) if ev == "block" else None  # noqa: E731
                kept.update(state=state, xs=xs, kl=float(topk_kl(net.forward(ids, net.one_hot(state), tap=tap), target)))
            if move is None:
                return kept["kl"]
            l = move[1]
            logits = net.forward(ids, net.one_hot(apply(state, [move])), start=(l, kept["xs"][l]))
            return float(topk_kl(logits, target))

    sel_ids, sel_target = rows_of(range(n - 5 * b, n - b))
    judged: dict = {}  # a state's KL on the selection rows, measured once: the prior, the seeds and
    # the final check ask for the same points

    def select_kl(state) -> float:
        if state not in judged:
            with torch.no_grad():
                judged[state] = float(topk_kl(net.forward(sel_ids, net.one_hot(state)), sel_target))
        return judged[state]
    return search_kl, select_kl


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


def choose_architecture(spec, parent_arch, derived, importance_path, permuted, cfg, teacher, train_rows, settings,
                        progress, family=None, ckpt_dir=None) -> dict:
    """The search stage: the architecture of ``settings.strategy`` and how it was chosen (JSON).
    ``family``: the parent's ``families.base.BuildFamily`` (its supernet); default: by the IR family.
    ``ckpt_dir``: where router v2 checkpoints (the stage's partial folder: a killed search resumes)."""
    from autocompress.families.base import family_of
    from autocompress.feasibility.variants import assess_variants

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
        # all fail the exact model while a narrower uniform point passes: Gemma 3 host, 2026-12-01)
        from autocompress.search.uniform import measured_uniform_choice

        return measured_uniform_choice(out, spec, swept, derived, family, permuted, cfg, teacher, train_rows,
                                       settings, imp, parent_arch, progress)

    from autocompress.search.router import train_router
    from autocompress.data.teacher import topk_kl

    sp = derived.space
    if sp.uniform:
        from autocompress.search.uniform import uniform_format_choice

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
        from autocompress.search.joint import router_v2_choice

        return router_v2_choice(out, spec, derived, feas, relaxes, tables, net, start, teacher, train_rows, settings,
                                imp, parent_arch, progress, ckpt_dir)
    n, b, T = len(train_rows), settings.search_batch, settings.search_seq

    def quality(step, ph, pa, pf):
        rows = [(step * b + i) % n for i in range(b)]
        ids = train_rows[rows][:, :T]
        target = teacher.get(rows)
        target = type(target)(target.values[:, :T], target.indices[:, :T], target.lse[:, :T])
        logits = net.forward(ids, (ph, pa, pf))
        return topk_kl(logits, target)

    router_cfg, refine_cfg, _ = search_configs(settings)
    search_kl, select_kl = _measures(net, teacher, train_rows, settings)
    if settings.strategy == "autocompress":
        from autocompress.search.joint import run_router_v2

        decode, record, points = run_router_v2(net, tables, start, feas, teacher, train_rows, settings, select_kl,
                                               progress, ckpt_dir)
        # the greedy seeds from the points router v2's prior was chosen among: the same information
        seeds, palette_seeds = {"router v2": decode, "cvxpy start": points["cvxpy point"]}, ("router v2",)
        if "uniform grid point" in points:
            seeds["uniform grid"] = points["uniform grid point"]
    else:
        with progress.task("search", total=router_cfg.steps, unit="step") as bar:
            def show(rec):
                worst = max(rec["expected"].items(), key=lambda kv: kv[1])
                bar.advance(KD=f"{rec['quality']:.4f}", tau=f"{rec['tau']:.2f}", worst=f"{worst[0]} {worst[1]:.3f}")
            res = train_router(tables, quality, router_cfg, start, show)
        seeds, palette_seeds = {"router": (res.hidden_index, res.attn_choice, res.ffn_choice), "cvxpy start": start}, ()
        record = {"steps": len(res.history), "seconds": round(res.seconds, 1),
                  "first": res.history[0] if res.history else None, "last": res.history[-1] if res.history else None}
        if (u := uniform_seed(net, feas, log)) is not None:
            seeds["uniform grid"] = u
    log(f"[refine] measured greedy and choice among {len(seeds)} seeds (KL to the parent, before distillation)")
    t_ref = time.perf_counter()
    # the measured forwards are independent: under a launcher they are split over the ranks
    ref = refine(tables, seeds, search_kl, select_kl, refine_cfg, log, dist.map_shared, progress, palette_seeds)
    t_ref = time.perf_counter() - t_ref
    candidates = list(ref.candidates)
    if settings.strategy == "autocompress":  # the uniform arm's measured candidates join the pool
        from autocompress.search.uniform import frontier_candidates

        extra, frontier = frontier_candidates(relaxes, derived, net, select_kl, settings, progress, candidates)
        candidates += extra
    arch, how, ranked = final_choice(candidates, net, spec, derived, relaxes, feas, log, select_kl)
    out["architecture"] = arch_json(arch, imp.score(arch, parent_arch))  # against the parent, globals included
    out["how"] = how
    out["finalists"] = finalists_json(ranked, settings.finalists, imp, parent_arch)
    if record.get("router") == "v2":  # the search's choice (before the shortlist), measured (repaired: re-measured)
        record["final_kl"] = round(select_kl(net.indices_of(arch)), 4)
    out["search"] = record
    out["refine"] = {"forwards": ref.evals, "seconds": round(t_ref, 1), "tokens": 4 * settings.search_batch * settings.search_seq,
                     "candidates": [candidate_json(c, net, spec.target.tensor_parallel) for c in candidates]}
    if settings.strategy == "autocompress":  # its forwards and seconds, apart from the greedy's
        out["refine"]["uniform_frontier"] = frontier
    return out


def candidate_json(c, net, tp: int = 1) -> dict:
    """A measured candidate as the report lists it: sizes, distinct FFN widths and GEMM shapes
    (what a palette limits, ``search.palette``), and its KL."""
    from autocompress.cost.memory import gemm_shapes
    from autocompress.ir import MLP

    arch = net.architecture(*c.state)
    return {"name": c.name, "kl": round(c.kl, 4), "hidden": net.hidden_grid[c.state[0]],
            "attention": sum(1 for a in c.state[1] if a), "ffn": sum(1 for f in c.state[2] if f),
            "ffn_widths": len({b.ffn.width for b in arch.blocks if isinstance(b.ffn, MLP)}),
            "shapes": gemm_shapes(arch, tp)}  # per GPU, as the profile charges them


def final_choice(candidates, net, spec, derived, relaxes, feas, log, select_kl=None) -> tuple:
    """(architecture, how, ranked): the candidate of least KL among those the exact cost model accepts,
    each over-bound one after a greedy repair and, given ``select_kl``, re-measured as repaired (a
    repaired candidate's KL before its repair says nothing about what is built: the free greedy's
    extra GEMM shapes are charged only here, and its repair can cost more than a palette's KL);
    else the cvxpy start. The exact model has the last word (``refine.choose``). ``ranked``: every
    candidate that passed as ``(name, KL, architecture)``, least KL first (``finalists_json``)."""
    from autocompress.search.refine import choose

    def check(c):
        arch = net.architecture(*c.state)
        return arch, evaluate(arch, spec, derived.profile, derived.device, derived.limits).ok

    def repair(arch):
        arch, ev, moves = repair_and_fill(relaxes[arch.hidden_size], arch, derived.profile, derived.device, fill=False)
        return (arch, moves) if ev.ok else None

    measure = (lambda arch: select_kl(net.indices_of(arch))) if select_kl is not None else None
    picked = choose(candidates, check, repair, measure)
    if picked is None:
        arch, how = feas.start.evaluation.arch, "cvxpy starting point (no candidate passed)"
        ranked = [("cvxpy start", None, arch)]
    else:
        arch, how = picked.arch, picked.how
        ranked = [(c.name, c.kl, c.arch) for c in picked.ranked]
        for r in picked.repaired:
            log(f"[search] {r}")
    how += f" ({moved_layers(arch, feas)} of {arch.num_layers} layers differ from the cvxpy start)"
    log(f"[search] {how}: hidden {arch.hidden_size}, {arch.params() / 1e6:.1f}M params")
    return arch, how, ranked


def moved_layers(arch, feas) -> int:
    return sum(a != b for a, b in zip(arch.blocks, feas.start.evaluation.arch.blocks))


def finalists_json(ranked, n: int, imp, parent_arch) -> list[dict]:
    """The search's ``finalists``: its ``n`` best candidates that meet the contract, least KL before
    distillation first, from ``(name, KL, architecture)``; the shortlist stage distils them briefly."""
    return [{"name": name, "kl": None if kl is None else round(float(kl), 4),
             "architecture": arch_json(arch, imp.score(arch, parent_arch))} for name, kl, arch in ranked[:n]]
