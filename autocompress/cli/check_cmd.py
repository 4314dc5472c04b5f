"""``acc check SPEC``: the verdict as a terminal summary, or the Markdown / JSON report.

The light path of the command line: nothing here or below it imports torch, and a repeated check
is answered from the cache without the parser or the solver (``autocompress.check``). With
``--format md --out FILE`` the report's charts are drawn beside it (matplotlib, when installed).
"""

from __future__ import annotations

import sys
from pathlib import Path

from autocompress import check
from autocompress.cli.terminal import console, emit, print_feasibility
from autocompress.report.feasibility import render_json, render_markdown
from autocompress.report.plot_data import check_plots
from autocompress.report.plots import write_plots


def run(args) -> int:
    result = check.run_check(args.spec, use_cache=not args.no_cache, importance=args.importance, confine=args.confine)
    for w in result.warnings:
        sys.stderr.write(w + "\n")
    if args.format == "text" and not args.out:
        print_feasibility(console(), result.report)
        return result.exit_code
    fmt = "md" if args.format == "text" else args.format
    plots = None
    if fmt == "md" and args.out:  # the charts land beside the report, linked relatively
        out = Path(args.out)
        plots = write_plots(out.parent, check_plots(result.report), prefix=f"{out.stem}-")
    text = render_markdown(result.report, plots) if fmt == "md" else render_json(result.report)
    emit(text, args.out, f" ({result.report['verdict']})")
    return result.exit_code
