"""The memory safety margin of a measured profile, from the calibration's own evidence.

The exact memory model predicts ``non_kv + margin + KV`` and a contract's memory bound is met when
that is within it; the margin is ``margin_fraction * (non_kv + graphs) + margin_bytes``. The
default profile's guess is 5% + 150 MiB. On the README contract (2,816 MiB) that is 227 MiB, 8.1%
of the bound: a build that meets the bound exactly as predicted measures ~10% under it, so a user
would pay a tenth of the budget for a guess.

A measured profile has what the guess stood in for:

- ``margin_fraction``: the model's error on memory over the held-out architectures (prediction
  without margin against the measured peak RSS), and over the calibration models each predicted
  by a memory fit without it (leave-one-out: the memory terms are two numbers fitted on 4-7 models,
  so one refit per model costs nothing and turns a quick calibration's 2 errors into 6). The larger of the p95 *under*-prediction
  (measured above predicted: the direction that breaks a bound) and the median absolute error, so
  a model that happens to over-predict every held-out model still keeps its typical error as slack.
- ``margin_bytes``: twice the standard deviation of the reference's peak RSS over its interleaved
  runs (the same parent, measured 2n+1 times in one calibration): how far one measurement of one
  model moves by itself, independent of the model's error.

Both are kept within the default's (a calibration never widens the margin beyond the guess it
replaces, and a calibration without the evidence keeps the guess). The derivation is written into
the profile (``measurement.margin``) so a report's margin can be traced to its numbers.
"""

from __future__ import annotations

import math
import statistics

from autocompress.calibrate.fit import pct


def safety_margin(memory_errors: list[float], reference_rss: list[int], default_fraction: float,
                  default_bytes: int, loo_errors: list[float] = ()) -> tuple[float, int, dict]:
    """``(margin_fraction, margin_bytes, basis)``. ``memory_errors``: predicted (no margin) over
    measured, minus 1, per held-out architecture; ``loo_errors``: the same, per calibration model
    predicted by the memory terms refitted without it (``fit.loo_memory_errors``; a quick
    calibration holds out 2 models, too few for a p95); ``reference_rss``: the reference's peak RSS per run."""
    basis: dict = {"default_fraction": default_fraction, "default_bytes": default_bytes}
    held = len(memory_errors)
    memory_errors = list(memory_errors) + list(loo_errors)
    if memory_errors:
        under = sorted(max(0.0, 1.0 / (1.0 + e) - 1.0) for e in memory_errors)  # measured / predicted - 1
        p95_under = pct(under, 95)
        median_abs = statistics.median(abs(e) for e in memory_errors)
        fraction = min(default_fraction, max(p95_under, median_abs))
        basis.update(heldout=held, leave_one_out=len(loo_errors), p95_under_prediction=round(p95_under, 4),
                     median_abs_error=round(median_abs, 4))
    else:
        fraction = default_fraction
    if len(reference_rss) > 1:
        sd = statistics.stdev(reference_rss)
        nbytes = min(default_bytes, int(math.ceil(2.0 * sd)))
        basis.update(reference_runs=len(reference_rss), reference_rss_sd_bytes=int(round(sd)))
    else:
        nbytes = default_bytes
    basis.update(fraction=round(fraction, 4), bytes=nbytes,
                 rule="fraction: max(p95 under-prediction, median |error|) on held-out memory and on "
                      "the calibration models left out of the memory fit one at a time; "
                      "bytes: 2 x SD of the reference's peak RSS over its runs; each at most the default")
    return round(fraction, 4), nbytes, basis

