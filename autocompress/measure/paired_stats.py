"""The statistics of paired engines (``measure.paired``): a round's ratios, when to stop sampling,
and how a cell's process pairings combine. Pure arithmetic on measurements; no engine here."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")


def round_ratios(pairs: list[tuple[dict, dict]]) -> tuple[dict, dict, dict]:
    """(ratio, relative SE, per-round ratios) per metric from (model chunk, reference chunk) medians."""
    ratio, se, per = {}, {}, {}
    for k in METRICS:
        rs = [a[k] / r[k] for a, r in pairs]
        per[k] = rs
        ratio[k] = statistics.fmean(rs)
        se[k] = statistics.stdev(rs) / math.sqrt(len(rs)) / ratio[k] if len(rs) > 1 else math.nan
    return ratio, se, per


@dataclass(frozen=True)
class Sampling:
    """How many rounds a cell gets: at least ``rounds``, then two more at a time (so the order
    stays balanced) while the largest relative SE over ``judge`` exceeds ``target_se``, up to
    ``max_rounds`` (made even) or ``cap_s`` seconds of the cell. ``cap_s`` may be a function of
    nothing, called once as the cell starts (a run's budget shared among the cells left). No
    ``target_se``: exactly ``rounds``."""

    rounds: int = 8
    target_se: float | None = None
    max_rounds: int | None = None
    cap_s: object = None
    judge: tuple[str, ...] = ("tpot_s", "e2e_s", "throughput_tok_s")

    def __post_init__(self):
        if self.rounds < 2:
            raise ValueError(f"at least 2 rounds (one of each order), not {self.rounds}")
        if self.target_se is not None and self.max_rounds is None and self.cap_s is None:
            raise ValueError("an SE target needs max_rounds or cap_s: a noisy cell would never stop")
        if self.max_rounds is not None:
            object.__setattr__(self, "max_rounds", max(self.rounds, self.max_rounds + self.max_rounds % 2))

    def cap(self) -> float | None:
        return self.cap_s() if callable(self.cap_s) else self.cap_s

    def more(self, pairs: list, started: float, cap: float | None = None) -> bool:
        n = len(pairs)
        if n < self.rounds:
            return True
        if self.target_se is None:
            return False
        if n % 2:
            return True  # finish the balanced pair of rounds
        if (self.max_rounds is not None and n >= self.max_rounds) or \
                (cap is not None and time.perf_counter() - started >= cap):
            return False
        _, se, _ = round_ratios(pairs)
        return max(se[k] for k in self.judge) > self.target_se


def combine(parts: list[dict]) -> dict:
    """One cell from its process pairings (``_summary`` dicts): the mean of the pairings' ratios, and
    an SE that counts the spread *between* pairings (a pair of processes carries a level of its own,
    5-9% on batched work, that its rounds cannot show: docs/decisions.md, twenty-eighth session).
    With K pairings the between-pairing SE is stdev/sqrt(K), from K - 1 degrees of freedom, so it is
    itself noisy; the SE kept is the larger of it and the rounds' SE pooled over the pairings."""
    n = len(parts)
    if n == 1:
        return parts[0] | {"se_rounds": parts[0]["se"], "se_between": {k: math.nan for k in METRICS}}
    ratio = {k: statistics.fmean(p["ratio"][k] for p in parts) for k in METRICS}
    within = {k: math.sqrt(sum((p["se"][k] * p["ratio"][k]) ** 2 for p in parts)) / n / ratio[k] for k in METRICS}
    between = {k: statistics.stdev(p["ratio"][k] for p in parts) / math.sqrt(n) / ratio[k] for k in METRICS}
    return {"ratio": ratio, "se": {k: max(within[k], between[k]) for k in METRICS}, "se_rounds": within,
            "se_between": between, "per_round": {k: [x for p in parts for x in p["per_round"][k]] for k in METRICS},
            "absolute": {k: statistics.fmean(p["absolute"][k] for p in parts) for k in METRICS},
            "reference_absolute": {k: statistics.fmean(p["reference_absolute"][k] for p in parts) for k in METRICS}}
