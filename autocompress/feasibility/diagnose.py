"""Diagnosis of an infeasible contract: for each bound, what would make the contract feasible.

Each bound is relaxed alone: its best value with every other bound kept, and where the others
conflict among themselves, its floor with all of them dropped. These are relaxation values (lower
bounds on what an architecture can reach), and the report says so. Conditions that no
architecture changes (``engine_limits``: a memory bound the engine cannot honour on the device)
are one line each, with the largest value that can hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.feasibility.lp import solve
from autocompress.plan.budget import Budget, BudgetBound

GiB = 1 << 30


@dataclass(frozen=True)
class Diagnosis:
    bound: str  # "chat.tpot" | "memory"
    metric: str
    op: str
    value: float  # the contract's bound (SI)
    best: float | None  # best value reachable (continuous relaxation), None: none
    note: str
    basis: str = "others kept"  # "others kept": every other bound holds; "alone": all others dropped;
    #                             "engine": a limit of the engine on this device, whatever the architecture


def _values(relaxes, name: str, drop: frozenset, skip=frozenset()) -> dict[int, float | None]:
    """Per hidden size, the LP's best normalized value of one bound (> 1 violates) with ``drop``
    left out; None where infeasible (hidden sizes in ``skip`` are known to be)."""
    out = {}
    for d, relax in relaxes.items():
        r = None if d in skip else solve(relax, objective=name, drop=drop)
        out[d] = r.value if r is not None and r.x is not None else None
    return out


def _best_value(values: dict, bound: BudgetBound) -> float | None:
    """The best value over the hidden grid, in the bound's units."""
    found = [v for v in values.values() if v is not None]
    return bound.from_normalized(min(found)) if found else None


def diagnose(budget: Budget, relaxes) -> tuple[Diagnosis, ...]:
    """For each bound: the best value reachable with every other bound kept; where the others
    conflict among themselves, the floor with every other bound dropped.

    A bound out of reach even alone at a hidden size (its floor above the bound) makes every LP
    that keeps it infeasible there: those are not solved (infeasible is what they would say)."""
    out = []
    everything = frozenset(budget.names) | {"memory"}
    unreachable: dict[int, set[str]] = {d: set() for d in relaxes}  # per hidden size, bounds no point meets
    for b in budget:
        name = b.name
        known = frozenset(d for d, out_of_reach in unreachable.items() if out_of_reach - {name})
        best = _best_value(_values(relaxes, name, frozenset({name}), known), b)
        basis = "others kept"
        if best is not None:
            ok = b.holds(best)
            note = ("within reach once the other bounds hold" if ok else
                    "out of reach with the other bounds kept")
        else:
            basis = "alone"
            alone = _values(relaxes, name, everything)
            for d, v in alone.items():
                if v is None or v > 1.0 + 1e-6:  # margin: clear of the solver's tolerance
                    unreachable[d].add(name)
            best = _best_value(alone, b)
            if best is None:
                note = "no architecture in the search space reaches it"
            else:
                ok = b.holds(best)
                note = ("the other bounds conflict among themselves; alone, this bound is within reach" if ok else
                        "out of reach even with every other bound dropped")
        out.append(Diagnosis(name, b.metric, b.op, b.value, best, note, basis))
    return tuple(out)


def engine_limits(spec, profile, device) -> tuple[Diagnosis, ...]:
    """Bounds no architecture can meet because of the engine on this device, with the largest
    legal value. vLLM on a GPU requests the memory bound from the device as its pool, and its CUDA
    context is allocated outside the pool (facts.md, vLLM memory accounting): a bound above the
    device memory less the context can never hold."""
    bound = Budget.of(spec).memory
    if spec.target.engine != "vllm" or device.kind != "gpu" or bound is None:
        return ()
    context = profile.memory.cuda_context_bytes
    largest = device.memory_bytes - context
    if bound.value <= largest:
        return ()
    note = (f"vLLM requests the bound from the device as its memory pool and needs {context / GiB:.2f} GiB of CUDA "
            f"context outside it; on {device.name} ({device.memory_bytes / GiB:.2f} GiB) the largest memory bound "
            f"that can hold is {largest / GiB:.2f} GiB")
    return (Diagnosis(bound.name, bound.metric, bound.op, bound.value, float(largest), note, "engine"),)
