"""``acc profile --hardware H --engine E``: measure the engine on this machine and write the
calibration profile that ``acc check``, ``build`` and ``verify`` then find (``calibrate.profile``)."""

from __future__ import annotations

import sys

from autocompress.calibrate.profile import ProfileRunError, run_profile
from autocompress.cli.terminal import build_progress, console
from autocompress.diagnostics import EXIT_INVALID, EXIT_OK


def run(args) -> int:
    out = args.out  # None: this machine's profile in the cache (cpu), or <hardware>-<engine>-measured.json
    progress = build_progress(console(stderr=True), quiet=args.quiet)
    try:
        result = run_profile(args.hardware, args.engine, out, model=args.model, threads=args.threads,
                             quick=args.quick, root=args.work, progress=progress)
    except ProfileRunError as err:
        sys.stderr.write(f"acc profile: {err}\n")
        return EXIT_INVALID
    finally:
        progress.sink.close()
    sys.stdout.write(f"wrote {result.path} ({result.calibration} calibration + {result.heldout} held-out models)\n")
    return EXIT_OK
