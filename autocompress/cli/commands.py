"""``acc verify``, ``acc profile`` and ``acc diff``: the commands that measure or compare, apart
from ``main.py`` (argument parsing, check, build, the exit-code guard) so each stays readable.
They render progress with rich through ``terminal.build_progress`` and write reports to stdout,
or to ``--out`` through ``emit`` (``acc check`` too)."""

from __future__ import annotations

import os
import sys

from autocompress.diagnostics import EXIT_INVALID, EXIT_OK


def emit(text: str, out: str | None, note: str = "") -> None:
    """A report to ``out`` (atomically, and said on stderr: stdout stays empty), or to stdout."""
    if out:
        from autocompress.cache import atomic_write_text

        atomic_write_text(out, text)
        sys.stderr.write(f"wrote {out}{note}\n")
    else:
        sys.stdout.write(text)


def verify(out: str, spec: str, threads, requests, console, passes: int = 1, quiet: bool = False,
           pairings: int = 0) -> int:
    from autocompress.cli.terminal import build_progress
    from autocompress.measure.verify import VerifyError, run_verify

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


def profile(args, console) -> int:
    from autocompress.cli.terminal import build_progress
    from autocompress.calibrate.profile import ProfileRunError, run_profile

    out = args.out  # None: this machine's profile in the cache (cpu), or <hardware>-<engine>-measured.json
    progress = build_progress(console, quiet=args.quiet)
    try:
        run = run_profile(args.hardware, args.engine, out, model=args.model, threads=args.threads, quick=args.quick,
                          root=args.work, progress=progress)
    except ProfileRunError as err:
        sys.stderr.write(f"acc profile: {err}\n")
        return EXIT_INVALID
    finally:
        progress.sink.close()
    sys.stdout.write(f"wrote {run.path} ({run.calibration} calibration + {run.heldout} held-out models)\n")
    return EXIT_OK


def diff(args) -> int:
    from autocompress.diff import DiffError, run_diff
    from autocompress.report.diff import render_diff_json, render_diff_markdown

    want = 1 if args.base else 2
    if len(args.specs) != want:
        sys.stderr.write("acc diff: give OLD.acspec NEW.acspec, or --base REV NEW.acspec\n")
        return EXIT_INVALID
    old, new = (None, args.specs[0]) if args.base else args.specs
    try:
        res = run_diff(old, new, args.base)
    except DiffError as err:
        sys.stderr.write(f"acc diff: {err}\n")
        return EXIT_INVALID
    for s in (res.diff["old"], res.diff["new"]):
        for line in s["errors"]:
            sys.stderr.write(line + "\n")
    text = render_diff_markdown(res.diff) if args.format == "md" else render_diff_json(res.diff)
    emit(text, args.out)
    return res.exit_code
