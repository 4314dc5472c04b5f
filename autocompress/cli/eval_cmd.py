"""``acc eval MODEL_DIR``: the model's and its parent's accuracy on eight benchmarks (offline data).

Exit codes: 0 the table was printed; 2 a bad argument or the benchmark data is not installed
(the message holds the install command). ``main`` sets ``OMP_WAIT_POLICY=PASSIVE`` before this
module (and torch) is imported: on shared cores spinning OpenMP threads made scoring ~10x slower
in wall time.
"""

from __future__ import annotations

import json
import sys

from autocompress.cache import atomic_write_text
from autocompress.cli.terminal import build_progress, console
from autocompress.diagnostics import EXIT_INVALID, EXIT_OK
from autocompress.evaluate.benchmarks.command import EvalInputError, run_eval
from autocompress.evaluate.benchmarks.data import EvalDataMissing
from autocompress.report.accuracy import render_accuracy_markdown


def run(args) -> int:
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    try:
        progress = build_progress(console(stderr=True), quiet=args.quiet)
        r = run_eval(args.model, args.parent, args.full, tasks, args.work, progress)
    except (EvalInputError, EvalDataMissing) as err:
        sys.stderr.write(f"acc eval: {err}\n")
        return EXIT_INVALID
    if args.json:
        atomic_write_text(args.json, json.dumps(r, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(render_accuracy_markdown(r))
    return EXIT_OK
