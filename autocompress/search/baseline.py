"""The fair Minitron++ baseline: the uniform arm's measured choice among its grid candidates.

Minitron ranks its candidate architectures by measured quality, not by an importance prior. The
single top candidate by the prior is not enough: on serve-h100 it (KV 1 in every layer) collapsed
to code ppl 67.9, while other uniform points at the same cost (fewer layers, more KV heads) would
have gone unmeasured. So:

    candidates  the uniform grid's frontier (``feasibility.uniform.uniform_frontier``): for every
                hidden size, depth, KV-head count (and expert count) the widest FFN the exact cost
                model accepts; all meet the contract
    measure     each candidate's KL to the parent on the *selection rows* autocompress's final
                choice uses (``measures.kl_measures``: the same rows, tokens and top-k teacher), best
                prior first, while the budget lasts
    choose      the lowest KL

Budget: the same number of measured tokens autocompress's refinement may spend
(``RefineConfig.max_evals`` forwards of search batch x search tokens). A selection forward reads
4x a search forward's rows, so at most ``max_evals // 4`` candidates are measured; the report lists
both arms' actual forwards and tokens. Orchestration only: the KL is passed in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from autocompress.feasibility.uniform import uniform_frontier
from autocompress.ir import Architecture

SELECT_ROWS = 4  # a selection forward reads 4 x search batch rows (``measures.kl_measures``)


def budget_of(max_evals: int) -> int:
    """How many candidates the refinement budget of ``max_evals`` search forwards measures."""
    return max(1, max_evals // SELECT_ROWS)


@dataclass(frozen=True)
class MeasuredFrontier:
    """The uniform arm's measured choice (``measured_uniform``)."""

    arch: Architecture  # the least KL
    kl: float
    record: dict  # the report's ``refine`` entry (its JSON): forwards, tokens, budget, every candidate
    # every measured candidate as (name, KL, architecture), least KL first: the search's finalists
    ranked: tuple[tuple[str, float, Architecture], ...]


def measure_frontier(relaxes: dict, derived, to_state: Callable, select_kl: Callable, search_tokens: int,
                     max_evals: int, progress, label: str) -> MeasuredFrontier | None:
    """``measured_uniform`` over the grid's frontier (``feasibility.uniform.uniform_frontier`` of
    ``relaxes``, the exact cost model's accepted points), with a progress bar named ``label``; None
    when no uniform point meets the contract (or none is expressible in this supernet)."""
    frontier = uniform_frontier(relaxes, derived.profile, derived.device, derived.limits)
    if not frontier:
        return None
    progress.log(f"[search] uniform grid: {len(frontier)} frontier candidates meet the contract; measured by KL to "
                 "the parent")
    with progress.task(label, total=min(len(frontier), budget_of(max_evals)), unit="candidate") as bar:
        try:
            return measured_uniform(frontier, select_kl, to_state, max_evals, search_tokens, progress.log,
                                    bar.advance)
        except NothingMeasured:  # none of them expressible in this supernet (any other error propagates)
            return None


class NothingMeasured(ValueError):
    """No frontier candidate was expressible in the supernet (``measured_uniform``)."""


def measured_uniform(frontier: list, select_kl: Callable, to_state: Callable, max_evals: int, search_tokens: int,
                     log: Callable[[str], None] = lambda m: None,
                     tick: Callable[[], None] = lambda: None) -> MeasuredFrontier:
    """The measured choice among ``frontier``'s candidates, and every measured one.

    ``frontier``: (arch, evaluation, prior importance, hidden) best prior first; ``to_state(arch)``
    the supernet's state (``ValueError``: not expressible there, skipped); ``search_tokens``: the
    tokens of one search forward (search batch x search tokens); ``tick()`` after each measured one."""
    budget = budget_of(max_evals)
    t0 = time.perf_counter()
    scored, skipped = [], 0
    for arch, ev, prior, d in frontier:
        if len(scored) >= budget:
            break
        try:
            state = to_state(arch)
        except ValueError:  # other global sizes than this supernet's
            skipped += 1
            continue
        kl = float(select_kl(state))
        kept = [b for b in arch.blocks if b.attention or b.ffn]
        kv = sorted({b.attention.kv_heads for b in kept if b.attention})
        width = sorted({b.ffn.width for b in kept if b.ffn and hasattr(b.ffn, "width")})
        ffns = sum(1 for b in kept if b.ffn)
        # Gemma 3 under vLLM keeps every attention, so its depth cut removes MLPs only: say how many are left
        mlps = f" ({ffns} with an FFN)" if ffns != len(kept) else ""
        # the hidden size leads: candidates of one depth and KV at two widths must not share a name
        name = (f"uniform: hidden {d}, {len(kept)} layers{mlps}, KV {'/'.join(map(str, kv)) or '-'}, "
                f"FFN {'/'.join(map(str, width)) or '-'}")
        scored.append({"name": name, "kl": round(kl, 4), "hidden": d, "layers": len(kept),
                       "attention": sum(1 for b in arch.blocks if b.attention),
                       "ffn": sum(1 for b in arch.blocks if b.ffn), "prior": float(f"{prior:.4g}"), "arch": arch})
        log(f"[baseline] {name}: KL {kl:.3f} (prior {prior:.4g})")
        tick()
    if not scored:
        raise NothingMeasured("no uniform candidate could be measured on this supernet")
    best = min(scored, key=lambda c: c["kl"])
    top_prior = scored[0]
    log(f"[baseline] measured choice: {best['name']}, KL {best['kl']:.3f} "
        f"(the prior's top: {top_prior['kl']:.3f}); {len(scored)} of {len(frontier)} frontier candidates measured")
    entry = {"forwards": len(scored), "tokens_per_forward": SELECT_ROWS * search_tokens,
             "tokens": len(scored) * SELECT_ROWS * search_tokens, "budget_tokens": max_evals * search_tokens,
             "seconds": round(time.perf_counter() - t0, 1), "frontier": len(frontier), "skipped": skipped,
             "candidates": [{k: v for k, v in c.items() if k != "arch"} for c in scored]}
    ranked = tuple((c["name"], c["kl"], c["arch"]) for c in sorted(scored, key=lambda c: c["kl"]))
    return MeasuredFrontier(best["arch"], best["kl"], entry, ranked)
