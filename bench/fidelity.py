"""Cost-model fidelity: how close the cost model's predicted ratios to the parent come to vLLM's.

Three modes, on SmolLM2-135M and models derived from it (random weights: time and memory depend
on shapes only):

    python -m bench.fidelity interleaved [--passes 2] [--threads N] [--heldout-seed N]
        [--calibration-from JSON] [--workloads NAME ...] [--hardware h200] [--out STEM]
    python -m bench.fidelity paired [--fitted JSON] [--heldout-seed 3] [--budget-min 90]
        [--target-se 0.025] [--rounds 4] [--max-rounds 16] [--pairings 4] [--workloads NAME ...]
        [--extend RUN.json] [--rescore] [--fresh] [--hardware h200] [--out STEM] [--root DIR]
    python -m bench.fidelity refit RUN.json [--calibration-from JSON] [--params JSON] [--own-fit]
        [--stable X] [--ref-agree X] [--scan KEY=V1,V2,...] [--add-run JSON]

* ``interleaved``: every model in a fresh engine process between two of the parent's; the
  calibration models fit a profile, the held-out ones score it (``bench.lib.fidelity_interleaved``).
* ``paired``: each held-out model and the parent loaded side by side, taking turns in chunks, in
  ``--pairings`` pairs of fresh processes with the start order swapped, every cell sampled to an
  SE target; scored with the profile an interleaved run fitted (``--fitted``). ``--rescore``
  rewrites the table from the stored JSON; ``--extend`` adds pairings to a finished run
  (``bench.lib.fidelity_paired``). The README's fidelity figures are this mode's table.
* ``refit``: a stored interleaved run refitted and rescored by this checkout's fitter, no engine
  (``bench.lib.fidelity_refit``).

Results: ``bench/results/fidelity/`` (``interleaved``, ``paired``: Markdown table and JSON).
"""

from __future__ import annotations

import argparse
import sys

from bench.lib import fidelity_interleaved, fidelity_paired, fidelity_refit
from bench.lib.cli import mode_parser

MODES = {"interleaved": fidelity_interleaved, "paired": fidelity_paired, "refit": fidelity_refit}


def parser() -> argparse.ArgumentParser:
    return mode_parser("python -m bench.fidelity", __doc__, MODES)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return MODES[args.mode].run(args)


if __name__ == "__main__":
    sys.exit(main())
