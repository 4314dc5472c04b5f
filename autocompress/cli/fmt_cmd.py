"""``acc fmt SPEC``: the canonical form of a contract, printed, checked (``--check``) or written back."""

from __future__ import annotations

import sys

from autocompress.cache import atomic_write_text
from autocompress.diagnostics import EXIT_OK
from autocompress.lang.api import format_spec, load_spec


def run(args) -> int:
    with open(args.spec, "rb") as fh:
        original = fh.read().decode("utf-8", errors="replace")
    spec = load_spec(args.spec)
    text = format_spec(spec, source=original)
    if args.check:
        if text != original:
            sys.stderr.write(f"{args.spec}: not in canonical form (run `acc fmt --write {args.spec}`)\n")
            return 1
        return EXIT_OK
    if args.write:
        atomic_write_text(args.spec, text)
        return EXIT_OK
    sys.stdout.write(text)
    return EXIT_OK
