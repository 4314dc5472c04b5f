"""The search's final choice and its record: every measured candidate through the exact cost model
(an over-bound one repaired, then re-measured), the least KL wins, and the JSON the search stage
writes (the architecture, its finalists, its candidates) for the shortlist and the report.

Shared by every strategy (``strategy``, ``joint``, ``uniform``), so they choose and report alike.
"""

from __future__ import annotations

from typing import Callable, Sequence

from autocompress.cost.memory import gemm_shapes
from autocompress.diagnostics import EXIT_NOT_FOUND, BuildError
from autocompress.feasibility.assess import Feasibility
from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.metrics import Relaxation
from autocompress.feasibility.rounding import repair_and_fill
from autocompress.feasibility.objective import Importance
from autocompress.ir import MLP, Architecture
from autocompress.search.context import ArchRecord, Finalist, SearchContext
from autocompress.search.refine import Scored, State, choose
from autocompress.search.supernet import Supernet

# a candidate that passed the exact model, as the finalists list it: (name, KL before distillation
# on the selection rows or None, architecture)
Ranked = tuple[str, float | None, Architecture]


class NoArchitecture(BuildError):
    """No architecture was found, infeasibility not proved: exit 4 with the reason, not a traceback."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_NOT_FOUND)


def candidate_json(c: Scored, net: Supernet, tp: int = 1) -> dict:
    """A measured candidate as the report lists it: sizes, distinct FFN widths and GEMM shapes
    (what a palette limits, ``search.palette``), and its KL."""
    arch = net.architecture(*c.state)
    return {"name": c.name, "kl": round(c.kl, 4), "hidden": net.hidden_grid[c.state[0]],
            "attention": sum(1 for a in c.state[1] if a), "ffn": sum(1 for f in c.state[2] if f),
            "ffn_widths": len({b.ffn.width for b in arch.blocks if isinstance(b.ffn, MLP)}),
            "shapes": gemm_shapes(arch, tp)}  # per GPU, as the profile charges them


def final_choice(ctx: SearchContext, candidates: list[Scored], net: Supernet, relaxes: dict[int, Relaxation],
                 feas: Feasibility, select_kl: Callable[[State], float] | None = None,
                 ) -> tuple[Architecture, str, list[Ranked]]:
    """(architecture, how, ranked): the candidate of least KL among those the exact cost model accepts,
    each over-bound one after a greedy repair and, given ``select_kl``, re-measured as repaired (a
    repaired candidate's KL before its repair says nothing about what is built: the free greedy's
    extra GEMM shapes are charged only here, and its repair can cost more than a palette's KL);
    else the cvxpy start. The exact model has the last word (``refine.choose``). ``ranked``: every
    candidate that passed as ``(name, KL, architecture)``, least KL first (``finalists``)."""
    spec, derived, log = ctx.spec, ctx.derived, ctx.log

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


def moved_layers(arch: Architecture, feas: Feasibility) -> int:
    return sum(a != b for a, b in zip(arch.blocks, feas.start.evaluation.arch.blocks))


def finalists(ranked: Sequence[Ranked], ctx: SearchContext) -> tuple[Finalist, ...]:
    """The search's ``finalists``: its ``settings.finalists`` best candidates that meet the contract,
    least KL before distillation first, from ``(name, KL, architecture)``; the shortlist stage
    distils them briefly."""
    return tuple(Finalist(name, kl, record(arch, ctx.imp, ctx.parent_arch))
                 for name, kl, arch in ranked[:ctx.settings.finalists])


def record(arch: Architecture, imp: Importance, parent_arch: Architecture) -> ArchRecord:
    """``arch`` with the share of the parent's importance it keeps (globals included)."""
    return ArchRecord.of(arch, imp.score(arch, parent_arch))


__all__ = ["NoArchitecture", "Ranked", "candidate_json", "final_choice", "finalists", "moved_layers", "record"]
