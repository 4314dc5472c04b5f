"""``acc verify OUT SPEC``: measure the exported model where the target is this machine, judge every
bound, print the report (``measure.verify``); ``acc build`` ends with it too."""

from __future__ import annotations

import os
import sys

from autocompress.cli.terminal import build_progress, console
from autocompress.contract import Contract
from autocompress.diagnostics import EXIT_INVALID
from autocompress.measure.verify import VerifyError, run_verify


def run(args) -> int:
    return verify(args.out, args.spec, args.threads, args.requests, console(stderr=True), args.passes, args.quiet,
                  args.pairings)


def verify(out: str, spec: str | Contract, threads, requests, console, passes: int = 1, quiet: bool = False,
           pairings: int = 0) -> int:
    """``spec``: a spec file's path, or the contract ``acc build`` already parsed and resolved."""
    progress = build_progress(console, quiet=quiet)
    try:
        res = run_verify(out, spec, threads=threads, requests=requests, passes=passes, progress=progress,
                         pairings=pairings)
    except VerifyError as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_INVALID
    finally:
        progress.sink.close()
    sys.stdout.write(open(os.path.join(out, "verify-report.md")).read())
    return res.exit_code
