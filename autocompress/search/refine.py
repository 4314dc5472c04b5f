"""Measured refinement: the search proposes, the parent's own KL decides.

The cvxpy start and the router score an architecture by adding up single-removal KLs, as if
removals were independent. They are not: on SmolLM2 under the host contract the additive optimum
(15 attention and 15 FFN sub-blocks removed, in different layers) measured KL 11.2 nats against
the parent before distillation, the uniform grid's best 4.1. So the final choice is measured, and
the joint effect of removals is measured too:

    greedy   from the parent at a hidden size, while a bound is violated: measure the single
             down-moves (a sub-block one step narrower or removed) in the *current* model, then
             apply the moves with the least KL added per unit of violation removed, a share of
             the violation per round (iterative removal KL: each round sees earlier removals;
             lazy: after the first round only new moves and the best earlier ones are re-measured)
    fill     while budget is left: the up-moves that stay feasible, best KL removed per cost
    palettes where the profile prices distinct GEMM shapes, the greedy again within each width
             palette of a result (``palette_candidates``, ``search.palette``)
    select   measure every candidate (router, cvxpy start, uniform grid point, greedy results)
             on rows the greedy never saw; keep the lowest KL

Costs come from the exact per-layer cost tables (``search.tables``); the caller re-checks the
winner with the exact cost model. ``measure(state, move)`` (the KL of ``state`` with ``move``
applied; ``move=None``: of ``state``) is the only tensor work and is passed in, so this module is
plain search logic (tested with synthetic tables and a synthetic KL). Passing the move, not just
the new state, lets the caller resume the forward at the move's layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from autocompress.ir import Architecture
from autocompress.progress import Progress
from autocompress.search.palette import palette_start
from autocompress.search.tables import CostTables

State = tuple  # (hidden index, attention option per layer, FFN option per layer)
Move = tuple  # (kind "a" | "f", layer, new option index)
Measure = Callable[[State, "Move | None"], float]
# ``map_fn(fn, items) == [fn(x) for x in items]``: how independent measurements are run; under a
# launcher ``build.dist.map_shared`` splits them over the ranks (every rank gets every value)
MapFn = Callable[[Callable, list], list]


def serial(fn: Callable, items: list) -> list:
    return [fn(x) for x in items]


def of_states(kl: Callable[[State], float]) -> Measure:
    """A ``Measure`` from a function of whole states (no prefix reuse)."""
    return lambda s, move=None: kl(apply(s, [move]) if move is not None else s)


@dataclass(frozen=True)
class RefineConfig:
    share: float = 0.5  # of the remaining violation removed per greedy round ...
    min_share: float = 0.03  # ... but at least this much (normalized), so the tail takes few rounds
    ffn_steps: int = 6  # an FFN down-move narrows by this many grid steps (or removes the last ones)
    max_moves: int = 12  # per round: one move frees ~1% of a bound, so a round is a batch, not all
    max_evals: int = 900  # measured forwards per greedy run (the budget; the run stops feasible-or-not)
    fill_rounds: int = 4
    # width palettes tried from each greedy result when the profile prices distinct GEMM shapes
    # (``search.palette``): numbers of FFN widths; () turns them off
    palette_sizes: tuple[int, ...] = (1, 2, 4)


@dataclass(frozen=True)
class Scored:
    name: str
    state: State
    kl: float  # measured on the selection rows


@dataclass(frozen=True)
class RefineResult:
    best: Scored
    candidates: tuple[Scored, ...]
    evals: int


def costs(tables: list[CostTables], s: State, palette=None) -> np.ndarray:
    """Normalized bound values (1 = on the bound) of a discrete state, from the exact tables.
    ``palette`` (``search.palette.Palette``): the state is one of the palette's, whose distinct
    GEMM shapes are prepaid (charged once beyond what the relaxation charges); without one, the
    relaxation's charge (the parent's count) stands and the exact re-check counts the rest."""
    t = tables[s[0]]
    e = t.expected(*t.one_hot(s[1], s[2]))
    if palette is not None and t.shape_memory:
        e = e.copy()
        e[t.names.index("memory")] += (palette.prepaid - t.charged_shapes) * t.shape_memory
    if t.kv_cap:  # vLLM-CPU's whole-GiB KV reservation: KV above what any point affords (tables._kv_terms)
        e = np.append(e, t.kv_row(t.kv_needed(s[1])))
    return e


def violation(e: np.ndarray) -> float:
    return float(np.maximum(e - 1.0, 0.0).sum())


def full_state(tables: list[CostTables], h: int) -> State:
    o = tables[h].options
    return h, tuple(max(len(x) - 1, 0) for x in o.attn), tuple(max(len(x) - 1, 0) for x in o.ffn)


def apply(s: State, moves) -> State:
    h, ca, cf = s[0], list(s[1]), list(s[2])
    for kind, l, c in moves:
        (ca if kind == "a" else cf)[l] = c
    return h, tuple(ca), tuple(cf)


def down_moves(tables: list[CostTables], s: State, cfg: RefineConfig, palette=None) -> list[Move]:
    """One step down per sub-block: KV heads one choice fewer (or removed), FFN ``ffn_steps``
    grid steps narrower (or removed once at the narrowest); never a sub-block that must stay.
    With a palette: the next smaller option the palette allows (or removed)."""
    h, ca, cf = s
    o = tables[h].options
    if palette is not None:
        return _palette_moves(o, s, palette, down=True)
    out = []
    for l, c in enumerate(ca):
        if c > 1:
            out.append(("a", l, c - 1))
        elif c == 1 and o.attn_removable[l]:
            out.append(("a", l, 0))
    for l, c in enumerate(cf):
        if c > 1:
            out.append(("f", l, max(1, c - cfg.ffn_steps)))
        elif c == 1 and o.ffn_removable[l]:
            out.append(("f", l, 0))
    return out


def up_moves(tables: list[CostTables], s: State, palette=None) -> list[Move]:
    """One grid step up per sub-block (a removed one comes back at its smallest size): fine steps,
    because the fill spends the small slack a coarse greedy round leaves. With a palette: the next
    larger option it allows."""
    h, ca, cf = s
    o = tables[h].options
    if palette is not None:
        return _palette_moves(o, s, palette, down=False)
    return ([("a", l, c + 1) for l, c in enumerate(ca) if c + 1 < len(o.attn[l])]
            + [("f", l, c + 1) for l, c in enumerate(cf) if c + 1 < len(o.ffn[l])])


def _palette_moves(o, s: State, palette, down: bool) -> list[Move]:
    out = []
    for kind, choice, allowed, removable in (("a", s[1], palette.attn, o.attn_removable),
                                             ("f", s[2], palette.ffn, o.ffn_removable)):
        for l, c in enumerate(choice):
            if down:
                nxt = max((x for x in allowed[l] if x < c), default=None)
                if nxt == 0 and not removable[l]:
                    continue
            else:
                nxt = min((x for x in allowed[l] if x > c), default=None)
            if nxt is not None:
                out.append((kind, l, nxt))
    return out


def rounds_left(v: float, cfg: RefineConfig, share: float | None = None) -> int:
    """Greedy rounds still to come at violation ``v`` if each round removes ``max(share * v,
    min_share)`` and the fill runs all its rounds: the progress estimate. ``share``: the share the
    rounds so far removed (``max_moves`` caps a round below ``cfg.share`` on long models), else
    ``cfg.share``; the estimate is redone after every round."""
    share = cfg.share if share is None else min(cfg.share, max(share, 0.05))
    n = 0
    while v > 1e-9 and n < 10_000:
        v -= max(share * v, cfg.min_share)
        n += 1
    return n + cfg.fill_rounds


def greedy(tables: list[CostTables], h: int, measure: Measure, cfg: RefineConfig,
           log: Callable[[str], None] = lambda m: None, map_fn: MapFn = serial,
           progress: Progress | None = None, start: State | None = None, palette=None,
           name: str = "") -> tuple[State | None, int]:
    """Iterative measured pruning from the parent at hidden index ``h`` (or from ``start``, a state
    at that hidden index: router v2's decode, a snapped palette state), then a measured fill.
    Returns (a state the tables call feasible, or None within the budget; forwards spent).
    ``palette``: moves stay within it and its shapes are charged (``search.palette``).
    ``progress``: one task per run, in rounds (the total re-estimated each round, ``rounds_left``)."""
    assert start is None or start[0] == h
    name = name or f"hidden {tables[h].d}"
    with (progress or Progress()).task(f"refine {name}", unit="round") as bar:
        return _greedy(tables, h, measure, cfg, log, bar, map_fn, start, palette, name)


def _greedy(tables, h, measure, cfg, log, bar, map_fn: MapFn = serial, start=None, palette=None,
            name="") -> tuple[State | None, int]:
    name = name or f"hidden {tables[h].d}"
    cost = lambda st: costs(tables, st, palette)  # noqa: E731
    s = full_state(tables, h) if start is None else start
    q, evals = measure(s), 1
    v = violation(cost(s))
    rnd, stale, v0 = 0, {}, v
    bar.set_total(rounds_left(v, cfg))
    while v > 1e-9:
        moves = [m for m in down_moves(tables, s, cfg, palette) if violation(cost(apply(s, [m]))) < v - 1e-12]
        # lazy greedy: a move measured in an earlier round keeps its KL increase as an estimate.
        # New moves are measured; then the best estimate is re-measured until the best one is
        # fresh (measured in this model), which is picked; and so on up to the round's share.
        gains = {m: v - violation(cost(apply(s, [m]))) for m in moves}
        new = [m for m in moves if m not in stale]
        if not moves or evals + len(new) > cfg.max_evals:
            log(f"[refine] {name}: greedy stopped with violation {v:.3f} ({evals} forwards)")
            return None, evals
        fresh = set(new)
        for m, kl in zip(new, map_fn(lambda m: measure(s, m), new)):
            stale[m] = kl - q
        evals += len(new)
        picked, removed, used = [], 0.0, set()
        pool, target = list(moves), max(cfg.share * v, cfg.min_share)  # a list: ties break by order
        while pool and len(picked) < cfg.max_moves and removed < target and evals < cfg.max_evals:
            m = min(pool, key=lambda x: stale[x] / gains[x])
            if m not in fresh:
                stale[m], evals = measure(s, m) - q, evals + 1
                fresh.add(m)
                continue
            pool.remove(m)
            if (m[0], m[1]) in used or (picked and removed + gains[m] > target):
                continue
            picked.append(m)
            used.add((m[0], m[1]))
            removed += gains[m]
        if not picked:  # the budget ran out inside the round
            log(f"[refine] {name}: greedy stopped with violation {v:.3f} ({evals} forwards)")
            return None, evals
        s = apply(s, picked)
        q, evals = measure(s), evals + 1
        v = violation(cost(s))
        rnd += 1
        log(f"[refine] {name} round {rnd}: {len(picked)} moves, KL {q:.3f}, violation {v:.3f}")
        observed = 1 - (v / v0) ** (1 / rnd) if v0 > 0 else None  # mean share removed per round
        bar.advance(total=rnd + rounds_left(v, cfg, observed), KL=f"{q:.3f}", violation=f"{v:.3f}", forwards=evals)
    for fill in range(cfg.fill_rounds):  # spend what the last round's overshoot left
        bar.set_total(rnd + cfg.fill_rounds - fill)
        moves = [m for m in up_moves(tables, s, palette) if violation(cost(apply(s, [m]))) <= 1e-9]
        if not moves or evals + len(moves) > cfg.max_evals + 64:
            break
        best = min(zip(map_fn(lambda m: measure(s, m), moves), moves), key=lambda x: x[0])
        evals += len(moves)
        if best[0] >= q:
            break
        s, q = apply(s, [best[1]]), best[0]
        log(f"[refine] {name} fill: KL {q:.3f}")
        bar.advance(KL=f"{q:.3f}", forwards=evals)
    bar.set_total(bar.state.done)  # the fill stopped early: the run is done
    return s, evals


def refine(tables: list[CostTables], seeds: dict[str, State], search_kl: Measure,
           select_kl: Callable[[State], float], cfg: RefineConfig = RefineConfig(),
           log: Callable[[str], None] = lambda m: None, map_fn: MapFn = serial,
           progress: Progress | None = None, palette_seeds: tuple[str, ...] = ()) -> RefineResult:
    """Greedy runs at the seeds' hidden sizes, then the measured choice among seeds and greedy
    results. ``search_kl`` and ``select_kl`` measure on disjoint rows, so the greedy results are
    not favoured by having been tuned on the rows that judge them. ``palette_seeds``: seeds whose
    palettes join too, as the greedy results' do (router v2's decode: many widths, which the exact
    model charges where the profile prices distinct GEMM shapes)."""
    cands = dict(seeds)
    evals = 0
    for name in palette_seeds:
        s = seeds[name]
        evals += palette_candidates(tables, s[0], s, search_kl, cfg, log, map_fn, progress, cands, source=name)
    for h in sorted({s[0] for s in seeds.values()}):
        s, n = greedy(tables, h, search_kl, cfg, log, map_fn, progress)
        evals += n
        if s is not None:
            cands[f"greedy (hidden {tables[h].d})"] = s
            evals += palette_candidates(tables, h, s, search_kl, cfg, log, map_fn, progress, cands)
    unique = list(dict.fromkeys(cands.values()))  # same architecture under two names: measure once
    with (progress or Progress()).task("refine: measure candidates", total=len(unique), unit="candidate") as bar:

        def measured(s: State) -> float:
            kl = select_kl(s)
            bar.advance()  # under a launcher each rank advances for its share
            return kl

        seen = dict(zip(unique, map_fn(measured, unique)))
    scored, logged = [], set()
    for name, s in cands.items():
        scored.append(Scored(name, s, seen[s]))
        if s not in logged:
            logged.add(s)
            log(f"[refine] {name}: KL {seen[s]:.3f} on the selection rows")
    evals += len(seen)
    best = min(scored, key=lambda c: c.kl)
    return RefineResult(best, tuple(scored), evals)


def palette_candidates(tables, h, s, search_kl, cfg, log, map_fn, progress, cands, source: str = "") -> int:
    """Where the profile prices distinct GEMM shapes, the palettes of ``cfg.palette_sizes`` widths
    of ``s`` (a greedy result, or router v2's decode: ``source`` names it, and its candidates),
    each refit by the greedy within it: candidates beside it (the measured choice trades
    heterogeneity against its memory). Returns the forwards spent."""
    t, evals, seen = tables[h], 0, set()
    if not t.shape_memory or "memory" not in t.names:
        return 0
    for k in cfg.palette_sizes:
        got = palette_start(t, s, k)
        if got is None or got[0].widths in seen:  # no fewer widths than the result has, or a repeat
            continue
        p, start = got
        seen.add(p.widths)
        name = f"{source + ' ' if source else ''}palette {len(p.widths)} (hidden {t.d})"
        log(f"[refine] {name}: {p.label()}, {p.prepaid} GEMM shapes prepaid ({source or 'the greedy result'} has "
            f"{t.shape_count(s[1], s[2])})")
        found, n = greedy(tables, h, search_kl, cfg, log, map_fn, progress, start=start, palette=p, name=name)
        evals += n
        if found is not None:
            cands[name] = found
    return evals


@dataclass(frozen=True)
class Choice:
    arch: Architecture  # what is built
    kl: float  # its KL on the selection rows (re-measured after a repair where a measure is given)
    how: str
    repaired: tuple[str, ...]  # one line per candidate the exact model repaired, for the log
    # every candidate that passed, least KL first, one per architecture (the first of equal ones):
    # the finalists the short distillation compares (``build.shortlist``)
    ranked: tuple["Choice", ...] = ()
    name: str = ""  # the candidate's name (``Scored.name``), with its repair


def choose(candidates, check, repair, measure=None) -> Choice | None:
    """The final choice: every candidate through the exact model (``check(c) -> (arch, ok)``); an
    over-bound one repaired (``repair(arch) -> (arch, moves)`` or None) and, with ``measure(arch)``,
    re-measured as repaired; the least KL among what passes. Without ``measure`` a repaired
    candidate keeps its measured KL (the old rule, for callers without selection rows)."""
    passed, notes = [], []
    for c in sorted(candidates, key=lambda c: c.kl):
        arch, ok = check(c)
        if ok:
            passed.append(Choice(arch, c.kl, f"measured choice: {c.name}, KL {c.kl:.3f}", (), name=c.name))
            continue
        fixed = repair(arch)
        if fixed is None:
            notes.append(f"{c.name}: over a bound, and the repair found nothing within it")
            continue
        arch, moves = fixed
        kl = measure(arch) if measure is not None else c.kl
        notes.append(f"{c.name}: over a bound for the exact model, {moves} greedy repair moves, KL {c.kl:.3f} -> "
                     f"{kl:.3f}" if measure is not None else f"{c.name}: {moves} greedy repair moves")
        passed.append(Choice(arch, kl, f"measured choice: {c.name}, KL {c.kl:.3f}, then {moves} greedy repair moves"
                             + (f" (KL {kl:.3f} as repaired)" if measure is not None else ""), (),
                             name=f"{c.name}, repaired ({moves} moves)"))
    if not passed:
        return None
    ranked: list[Choice] = []
    for c in sorted(passed, key=lambda x: x.kl):  # stable: of equal KLs the earlier candidate first
        if all(r.arch != c.arch for r in ranked):
            ranked.append(c)
    best = ranked[0]
    return Choice(best.arch, best.kl, best.how, tuple(notes), tuple(ranked), best.name)

