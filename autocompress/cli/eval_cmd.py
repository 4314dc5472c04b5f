"""``acc eval MODEL_DIR``: the parser entry and the command (kept apart from ``main.py``).

Exit codes: 0 the table was printed; 2 a bad argument or the benchmark data is not installed
(the message holds the install command). ``OMP_WAIT_POLICY=PASSIVE`` is set before torch is
imported: on shared cores spinning OpenMP threads made scoring ~10x slower in wall time.
"""

from __future__ import annotations

import json
import os
import sys


def add_parser(sub) -> None:
    e = sub.add_parser("eval", help="accuracy of a model folder and its parent on eight benchmarks (offline data)")
    e.add_argument("model", help="the model folder (an acc build output, or any Hugging Face folder)")
    e.add_argument("--parent", help="the parent to compare with (folder, .gguf, alias; default: the build's spec's)")
    e.add_argument("--full", action="store_true", help="every document (34,507; hours on CPU) instead of the "
                   "seeded subsamples (1,200)")
    e.add_argument("--tasks", help="comma-separated subset of arc_easy,arc_challenge,hellaswag,piqa,winogrande,"
                   "boolq,openbookqa,mmlu")
    e.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE (atomically)")
    e.add_argument("--work", metavar="DIR", help="stage cache folder (default: <acc cache>/accuracy)")
    e.add_argument("--quiet", action="store_true", help="plain progress lines instead of bars")


def cmd_eval(args) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from autocompress.evaluate.benchmarks.command import EvalInputError, run_eval
    from autocompress.evaluate.benchmarks.data import EvalDataMissing
    from autocompress.cache import atomic_write_text
    from rich.console import Console

    from autocompress.cli.terminal import build_progress
    from autocompress.diagnostics import EXIT_INVALID, EXIT_OK
    from autocompress.report.accuracy import render_accuracy_markdown

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    try:
        progress = build_progress(Console(stderr=True, highlight=False, soft_wrap=True), quiet=args.quiet)
        r = run_eval(args.model, args.parent, args.full, tasks, args.work, progress)
    except (EvalInputError, EvalDataMissing) as err:
        sys.stderr.write(f"acc eval: {err}\n")
        return EXIT_INVALID
    if args.json:
        atomic_write_text(args.json, json.dumps(r, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(render_accuracy_markdown(r))
    return EXIT_OK
