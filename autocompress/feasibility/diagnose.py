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


def _bound_names(spec) -> list[tuple[str, str, str, float]]:
    out = [(f"{w.name}.{b.metric}", b.metric, b.op, b.value) for w in spec.workloads for b in w.bounds]
    if spec.target.memory_limit_bytes:
        out.append(("memory", "memory", "<=", float(spec.target.memory_limit_bytes)))
    return out


def _values(relaxes, name: str, drop: frozenset, skip=frozenset()) -> dict[int, float | None]:
    """Per hidden size, the LP's best normalized value of one bound (> 1 violates) with ``drop``
    left out; None where infeasible (hidden sizes in ``skip`` are known to be)."""
    out = {}
    for d, relax in relaxes.items():
        r = None if d in skip else solve(relax, objective=name, drop=drop)
        out[d] = r.value if r is not None and r.x is not None else None
    return out


def _best_value(values: dict, metric: str, value: float) -> float | None:
    """The best value over the hidden grid, in the bound's units."""
    found = [v for v in values.values() if v is not None]
    if not found:
        return None
    best_norm = min(found)
    if metric == "throughput":  # the LP bounds E2E <= c*out/X; turn the best E2E back into tok/s
        return value / best_norm
    return best_norm * value


def diagnose(spec, relaxes) -> tuple[Diagnosis, ...]:
    """For each bound: the best value reachable with every other bound kept; where the others
    conflict among themselves, the floor with every other bound dropped.

    A bound out of reach even alone at a hidden size (its floor above the bound) makes every LP
    that keeps it infeasible there: those are not solved (infeasible is what they would say)."""
    out = []
    names = _bound_names(spec)
    everything = frozenset(n for n, *_ in names) | {"memory"}
    unreachable: dict[int, set[str]] = {d: set() for d in relaxes}  # per hidden size, bounds no point meets
    for name, metric, op, value in names:
        known = frozenset(d for d, out_of_reach in unreachable.items() if out_of_reach - {name})
        best = _best_value(_values(relaxes, name, frozenset({name}), known), metric, value)
        basis = "others kept"
        if best is not None:
            ok = best >= value if metric == "throughput" else best <= value
            note = ("within reach once the other bounds hold" if ok else
                    "out of reach with the other bounds kept")
        else:
            basis = "alone"
            alone = _values(relaxes, name, everything)
            for d, v in alone.items():
                if v is None or v > 1.0 + 1e-6:  # margin: clear of the solver's tolerance
                    unreachable[d].add(name)
            best = _best_value(alone, metric, value)
            if best is None:
                note = "no architecture in the search space reaches it"
            else:
                ok = best >= value if metric == "throughput" else best <= value
                note = ("the other bounds conflict among themselves; alone, this bound is within reach" if ok else
                        "out of reach even with every other bound dropped")
        out.append(Diagnosis(name, metric, op, value, best, note, basis))
    return tuple(out)


def engine_limits(spec, profile, device) -> tuple[Diagnosis, ...]:
    """Bounds no architecture can meet because of the engine on this device, with the largest
    legal value. vLLM on a GPU requests the memory bound from the device as its pool, and its CUDA
    context is allocated outside the pool (facts.md, vLLM memory accounting): a bound above the
    device memory less the context can never hold."""
    t = spec.target
    if t.engine != "vllm" or device.kind != "gpu" or not t.memory_limit_bytes:
        return ()
    context = profile.memory.cuda_context_bytes
    largest = device.memory_bytes - context
    if t.memory_limit_bytes <= largest:
        return ()
    note = (f"vLLM requests the bound from the device as its memory pool and needs {context / GiB:.2f} GiB of CUDA "
            f"context outside it; on {device.name} ({device.memory_bytes / GiB:.2f} GiB) the largest memory bound "
            f"that can hold is {largest / GiB:.2f} GiB")
    return (Diagnosis("memory", "memory", "<=", float(t.memory_limit_bytes), float(largest), note, "engine"),)
