"""``acc diff OLD NEW`` (or ``--base REV NEW``): two contracts' verdicts, bounds, costs and starting
architectures side by side, as Markdown for a pull request or as JSON."""

from __future__ import annotations

import sys

from autocompress import diff
from autocompress.cli.terminal import emit
from autocompress.diagnostics import EXIT_INVALID
from autocompress.report.diff import render_diff_json, render_diff_markdown


def run(args) -> int:
    want = 1 if args.base else 2
    if len(args.specs) != want:
        sys.stderr.write("acc diff: give OLD.acspec NEW.acspec, or --base REV NEW.acspec\n")
        return EXIT_INVALID
    old, new = (None, args.specs[0]) if args.base else args.specs
    try:
        res = diff.run_diff(old, new, args.base, confine=args.confine)
    except diff.DiffError as err:
        sys.stderr.write(f"acc diff: {err}\n")
        return EXIT_INVALID
    for s in (res.diff["old"], res.diff["new"]):
        for line in s["errors"]:
            sys.stderr.write(line + "\n")
    text = render_diff_markdown(res.diff) if args.format == "md" else render_diff_json(res.diff)
    emit(text, args.out)
    return res.exit_code
