"""The ``acc`` command's entry point (``run``), also ``python -m autocompress.cli`` (used under ``torchrun``)."""

import signal
import sys

from autocompress.diagnostics import EXIT_INTERRUPTED, interrupted_message

try:  # Ctrl-C can land in these imports (0.15 s, before ``main`` handles it): the same line, exit 130
    from autocompress.cli.main import main
except KeyboardInterrupt:
    sys.stderr.write(interrupted_message(sys.argv[1] if len(sys.argv) > 1 else None) + "\n")
    sys.exit(EXIT_INTERRUPTED)


def run() -> int:
    """The ``acc`` command (``pyproject.toml``'s script) and ``python -m autocompress.cli``."""
    code = main()
    # the command is done and has said so: a Ctrl-C while the interpreter exits (torch's teardown
    # takes a while) would otherwise print a traceback or kill it with SIGINT, without the line
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(run())
