"""Strategies ``router`` and ``router-refine``: router v2 in the search stage (orchestration).

    kd loss     the supernet (its weights + router v2's adapters) on the step's training rows,
                top-k KL against the cached teacher outputs (``teacher``), as distillation
    prior       the better of the points the default strategy's greedy seeds from (the cvxpy point,
                the uniform grid's), by KL on the selection rows: all start from the same information
    train       ``router_v2.train_router_v2`` with that point as a prior (its hidden size kept),
                checkpointed in the stage's partial folder (a killed build resumes the search),
                progress with an ETA
    router        the decode is the one candidate, with its width palettes where the profile
                  prices distinct GEMM shapes (``palette``: each refit by the greedy within it)
    router-refine the measured greedy (``refine``) from the decode: pruned while over a bound,
                  filled while under; the decode and the greedy's result are measured on the
                  selection rows and the lower KL wins
    final       ``final.final_choice``: the exact cost model has the last word (greedy repair)

The tensor math lives in ``router_v2``, ``adapters``, ``supernet`` and ``teacher``. A run is a
``RouterRun`` (its decode, the seed points by name, its ``RouterRecord``); the record meets JSON
only in the search's outcome (``RouterRecord.to_json``: the report's ``search`` entry).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from autocompress.build import dist
from autocompress.data.teacher import topk_kl
from autocompress.feasibility.metrics import Relaxation
from autocompress.search.config import search_configs
from autocompress.search.context import SearchContext, SearchOutcome
from autocompress.search.final import candidate_json, final_choice, finalists, record
from autocompress.search.measures import kl_measures
from autocompress.search.refine import Scored, State, greedy, palette_candidates
from autocompress.search.router_v2 import RouterStep, train_router_v2
from autocompress.search.supernet import Supernet
from autocompress.search.tables import CostTables
from autocompress.search.uniform import uniform_seed


@dataclass(frozen=True)
class RouterRecord:
    """Router v2's run as the report lists it (``to_json``: the outcome's ``search`` entry)."""

    steps: int  # training steps taken (all of them, resumed ones included)
    seconds: float
    tokens: int  # training tokens: steps x search batch x search tokens
    prior: str  # the name of the seed point that became the prior
    learn_hidden: bool
    moved_from_prior: int  # choices (hidden size, each layer's attention and FFN) the decode changed
    decode_moves: int  # ``RouterResult.decode_moves``
    decode_fills: int  # ``RouterResult.decode_fills``
    points_kl: dict[str, float]  # each seed point's KL on the selection rows, by name
    first: RouterStep | None  # the history's first and last steps (None: no step was taken)
    last: RouterStep | None
    final_kl: float | None = None  # the search's choice's KL on the selection rows, set by the strategy

    @property
    def forwards(self) -> int:
        """Selection forwards spent on the seed points (one each) to choose the prior."""
        return len(self.points_kl)

    def to_json(self) -> dict:
        """The report's ``search`` entry; ``prior_kl``: the cvxpy point's, whichever became the prior."""
        out = {"router": "v2", "steps": self.steps, "seconds": round(self.seconds, 1), "tokens": self.tokens,
               "prior": self.prior, "learn_hidden": self.learn_hidden, "moved_from_prior": self.moved_from_prior,
               "decode_moves": self.decode_moves, "decode_fills": self.decode_fills,
               "prior_kl": round(self.points_kl["cvxpy point"], 4),
               "points_kl": {n: round(k, 4) for n, k in self.points_kl.items()}, "forwards": self.forwards,
               "first": self.first.to_json() if self.first else None,
               "last": self.last.to_json() if self.last else None}
        if self.final_kl is not None:
            out["final_kl"] = round(self.final_kl, 4)
        return out


@dataclass(frozen=True)
class RouterRun:
    """What ``run_router_v2`` hands a strategy."""

    decode: State  # router v2's decode (``router_v2.budget_decode``), before the exact model's check
    points: dict[str, State]  # the seed points it chose its prior among, by name ("cvxpy point", ...)
    record: RouterRecord


def run_router_v2(ctx: SearchContext, net: Supernet, tables: list[CostTables], start: State,
                  select_kl: Callable[[State], float]) -> RouterRun:
    """Router v2 trained from the better-measured of the greedy's seed points as its prior. Shared
    by ``router``, ``router-refine`` and ``autocompress`` (whose greedy seeds from the same points:
    returned so the search looks them up once; their KLs stay in ``select_kl``'s memo)."""
    log, progress, settings, ckpt_dir = ctx.log, ctx.progress, ctx.settings, ctx.ckpt_dir
    teacher, train_rows, feas = ctx.teacher, ctx.train_rows, ctx.swept.feasibility
    _, cfg = search_configs(settings)
    n, b, T = len(train_rows), settings.search_batch, settings.search_seq

    def kd_loss(step, choices, params):
        rows = [(step * b + i) % n for i in range(b)]
        t = teacher.get(rows)
        target = type(t)(t.values[:, :T], t.indices[:, :T], t.lse[:, :T])
        return topk_kl(net.forward(train_rows[rows][:, :T], choices, params=params), target)

    # the prior: the better-measured of the points the greedy strategy seeds from (the cvxpy point
    # and the uniform grid's), so both strategies start from the same information
    points = {"cvxpy point": start}
    if (u := uniform_seed(net, feas, log)) is not None:
        points["uniform grid point"] = u
    point_kl = {name: select_kl(p) for name, p in points.items()}
    prior_name = min(point_kl, key=point_kl.get)
    prior = points[prior_name]
    log("[search] router v2 prior: " + ", ".join(f"{n} KL {k:.3f}" for n, k in point_kl.items())
        + f" -> {prior_name} (hidden {net.hidden_grid[prior[0]]}" + (")" if cfg.learn_hidden else ", kept)"))
    log(f"[search] router v2: {cfg.steps} steps x {b} x {T} tokens ({cfg.steps * b * T} tokens), prior {cfg.prior} "
        f"on the {prior_name}, tau {cfg.tau_start:g} -> {cfg.tau_end:g}, adapters rank {cfg.rank}")
    with progress.task("search (router v2)", total=cfg.steps, unit="step") as bar:
        def show(rec: RouterStep) -> None:
            worst = max(rec.expected.items(), key=lambda kv: kv[1])
            bar.advance(KD=f"{rec.quality:.4f}", tau=f"{rec.tau:.2f}", worst=f"{worst[0]} {worst[1]:.3f}")
        res = train_router_v2(tables, kd_loss, net.params, cfg, prior=prior, on_step=show,
                              ckpt_dir=Path(ckpt_dir) / "router_v2" if ckpt_dir is not None else None,
                              on_resume=lambda k: (log(f"[search] router v2 resumes at step {k}"),
                                                   bar.advance(k, cached=True)))
    decode = res.decode
    moved = _moved(prior, decode)
    log(f"[search] router v2 decode: {moved} of {2 * len(start[1]) + 1} choices differ from the {prior_name}"
        + (f"; {res.decode_moves} changes brought its argmax within the cost tables" if res.decode_moves else "")
        + (f"; {res.decode_fills} changes spent the slack it left" if res.decode_fills else ""))
    first, last = (res.history[0], res.history[-1]) if res.history else (None, None)
    record = RouterRecord(len(res.history), res.seconds, len(res.history) * b * T, prior_name, cfg.learn_hidden,
                          moved, res.decode_moves, res.decode_fills, point_kl, first, last)
    return RouterRun(decode, points, record)


def router_v2_choice(ctx: SearchContext, base: SearchOutcome, relaxes: dict[int, Relaxation],
                     tables: list[CostTables], net: Supernet, start: State) -> SearchOutcome:
    """The outcome of ``settings.strategy`` in (``router``, ``router-refine``). ``base``: its shared
    part (``strategy``); ``relaxes``, ``tables``, ``net``, ``start``: the supernet search's inputs."""
    log, progress, settings = ctx.log, ctx.progress, ctx.settings
    refine_cfg, _ = search_configs(settings)
    b, T = settings.search_batch, settings.search_seq
    search_kl, select_kl = kl_measures(net, ctx.teacher, ctx.train_rows, settings)
    run = run_router_v2(ctx, net, tables, start, select_kl)
    decode = run.decode
    seeds = {"router v2": decode}
    t_ref, evals = time.perf_counter(), 0
    # where the profile prices distinct GEMM shapes (vllm-cpu), the decode's many FFN widths cost
    # memory the tables do not charge; its palettes, refit within them, are candidates beside it
    # (cpu-vllm: the decode alone was repaired by 25 moves, KL 0.452 -> 0.783)
    evals += palette_candidates(tables, decode[0], decode, search_kl, refine_cfg, log, dist.map_shared, progress,
                                seeds, source="router v2")
    if settings.strategy == "router-refine":
        s, n = greedy(tables, decode[0], search_kl, refine_cfg, log, dist.map_shared, progress, start=decode)
        evals += n
        if s is not None:
            seeds["greedy from router v2"] = s
    cands = [Scored(name, s, select_kl(s)) for name, s in seeds.items()]
    # the prior points were measured to pick the prior, and as references only: they are not
    # candidates of these strategies
    evals += len(cands) + run.record.forwards
    for c in cands:
        log(f"[refine] {c.name}: KL {c.kl:.3f} on the selection rows")
    arch, how, ranked = final_choice(ctx, cands, net, relaxes, ctx.swept.feasibility, select_kl)
    final = net.indices_of(arch)
    final_kl = select_kl(final)  # a candidate's, measured above; repaired by the exact model: measured now
    if all(c.state != final for c in cands):
        evals += 1
        log(f"[refine] the architecture after the exact model's repair: KL {final_kl:.3f}")
    refined = {"forwards": evals, "seconds": round(time.perf_counter() - t_ref, 1), "tokens": 4 * b * T,
               "candidates": [candidate_json(c, net, ctx.spec.target.tensor_parallel) for c in cands]}
    return replace(base, chosen=record(arch, ctx.imp, ctx.parent_arch), how=how, finalists=finalists(ranked, ctx),
                   search=replace(run.record, final_kl=final_kl).to_json(), refine=refined)


def _moved(a, b) -> int:
    """Choices (hidden size, each layer's attention and FFN option) in which two points differ."""
    return int(a[0] != b[0]) + sum(x != y for x, y in zip(a[1], b[1])) + sum(x != y for x, y in zip(a[2], b[2]))


__all__ = ["RouterRecord", "RouterRun", "router_v2_choice", "run_router_v2"]
