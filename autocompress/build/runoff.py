"""The shortlist's runoff: a near-tie after the short distillations is distilled again, twice as long.

    entrants    the shortlist's leader and its runner-up, when the runner-up's KL after the short
                distillation is within ``runoff_margin`` of the leader's (none otherwise)
    distil      both from the parent's permuted weights again for ``runoff_steps`` steps (twice
                the shortlist's), by ``shortlist.short_distill_choice`` itself: the same recipe,
                the same held-apart validation rows, the same resumability
    choose      the least KL after the longer distillation; of equal ones the first round's order

Why: a 15-step distillation ranks finalists that differ by tenths of a nat, not by a few
thousandths. On the ablation's code-5070 seed-1 build the greedy led router v2 by 0.2% after 15
steps (1.9415 against 1.9454) and the default shipped the greedy; distilled 30 steps router v2
led by 2.8%, after 60 by 5.6%, and the full build's held-out KL and code perplexity agreed.
Where the lead was 1.0% (npc-5080 seed 0) it grew to 2.5% at 30 steps: the runoff confirms such a
leader rather than overturning it. The margin, 2%, covers both measured near-ties; of the
ablation's 20 first rounds 8 had a runner-up within 1.3%, the next nearest was 3.9% behind, so 2%
sits in that gap.

Cost: two distillations of ``runoff_steps``; at the defaults (15 x 2) that is 60 steps, one
build's distillation, spent only on a near-tie (with ``finalists 2``, 2 x 60: two).
"""

from __future__ import annotations

from autocompress.build.shortlist import describe as first_round


def entrants(first: dict, margin: float) -> list[int]:
    """Indices into ``first["finalists"]`` of the runoff's two entrants (leader first), or []."""
    rows = first["finalists"]
    if margin <= 0 or len(rows) < 2:
        return []
    lead, second = sorted(range(len(rows)), key=lambda j: (rows[j]["kl_after"], j))[:2]
    return [lead, second] if rows[second]["kl_after"] <= rows[lead]["kl_after"] * (1 + margin) else []


def merge(first: dict, second: dict, picked: list[int], margin: float) -> dict:
    """The shortlist's result with its runoff: ``chosen`` is the runoff's winner (an index into the
    first round's finalists), ``chosen_first_round`` what the first round alone would have chosen."""
    return {**first, "chosen": picked[second["chosen"]], "chosen_first_round": first["chosen"],
            "runoff": {"margin": margin, "entrants": picked, "steps": second["steps"],
                       "kl_after": [r["kl_after"] for r in second["finalists"]],
                       "seconds": second["seconds"]}}


def describe(result: dict) -> str:
    """The build's ``how`` for a shortlist's choice, with its runoff when there was one."""
    ro = result.get("runoff")
    if not ro:
        return first_round(result)
    rows, (a, b), (ka, kb) = result["finalists"], ro["entrants"], ro["kl_after"]
    return (first_round(result) + f"; runoff at {ro['steps']} steps ({rows[a]['name']} and {rows[b]['name']} "
            f"within {ro['margin']:.0%} after {result['steps']}): KL {ka:.3f} against {kb:.3f}")


__all__ = ["describe", "entrants", "merge"]
