"""The ``acc`` command line: parse the arguments, run the command's module, map errors to exit codes.

Exit codes (documented in the README):
  0  success; for ``acc check``: the contract is feasible
  1  the contract is infeasible, proved (``acc check``, ``acc build``), or not met (``acc verify``)
  2  invalid input: a spec, profile, output folder or command-line error, rendered with file:line:col
  3  internal error: a bug in autocompress; the message asks to report it
  4  no architecture was found, but infeasibility is not proved (``acc check``, ``acc build``)
  5  a distributed ``acc build`` lost a process (killed, or stopped answering): rerunning resumes
  6  a measurement failed (the engine worker crashed or ran past its time limit): rerunning resumes
(``acc eval``: 0, or 2 for a bad argument or benchmark data that is not installed)

Layering: ``acc check`` must answer in well under two seconds, and a repeated check from the
cache in a fraction of one, so this module, ``check_cmd`` and ``diff_cmd`` import only light modules
(no torch, and until a check misses the cache no parser or solver: ``autocompress.check``). Every
other command's module is imported by the dispatch table below only when that command runs:
``fmt`` loads the parser, ``build`` and ``eval`` torch and their stages, ``verify`` and ``profile``
the measurement code.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from autocompress import __version__
from autocompress.cli import check_cmd, diff_cmd
from autocompress.cli.parser import build_parser
from autocompress.diagnostics import (EXIT_INTERNAL, EXIT_INVALID, EXIT_MEASURE, ImportanceFileError, MeasureError,
                                      SpecError)

BUG_HINT = "this is a bug in autocompress {v}; please report it with the spec and this message"


def _print_errors(err: SpecError) -> None:
    # Plain text, no markup: the rendered caret lines must keep their columns.
    text = err.render()
    sys.stderr.write(text + "\n")
    n = len([d for d in err.diagnostics if d.severity == "error"])
    sys.stderr.write(f"{n} error{'s' if n != 1 else ''} in {err.path}\n")


# ---- dispatch: each command's module, imported when the command runs ---------------------------------

def _fmt(args) -> int:
    from autocompress.cli import fmt_cmd  # the parser (lark)

    return fmt_cmd.run(args)


def _build(args) -> int:
    if "OMP_WAIT_POLICY" not in os.environ:
        # Set before torch loads. OpenMP threads that spin at every barrier lose ~10x on a host shared
        # with other work (a HellaSwag forward took 5.4 s instead of 0.47 s here); the build's own math
        # waits passively. Engine measurements keep the engine's default (``measure.runner.worker_env``
        # drops it).
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ["ACC_SET_OMP_WAIT_POLICY"] = "1"
    if importlib.util.find_spec("torch") is None:
        sys.stderr.write("acc build needs torch and transformers: install them with scripts/install-full.sh\n")
        return EXIT_INVALID
    from autocompress.cli import build_cmd  # torch and every stage of the build

    return build_cmd.run(args)


def _verify(args) -> int:
    from autocompress.cli import verify_cmd  # the exact cost model and the measurement code

    return verify_cmd.run(args)


def _profile(args) -> int:
    from autocompress.cli import profile_cmd  # the measurement code and the fit

    return profile_cmd.run(args)


def _eval(args) -> int:
    # set before torch loads: on shared cores spinning OpenMP threads made scoring ~10x slower in wall time
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from autocompress.cli import eval_cmd  # torch, the benchmarks' data and scorer

    return eval_cmd.run(args)


COMMANDS = {"check": check_cmd.run, "build": _build, "fmt": _fmt, "verify": _verify, "profile": _profile,
            "diff": diff_cmd.run, "eval": _eval}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return EXIT_INVALID
    try:
        return COMMANDS[args.command](args)
    except SpecError as err:
        _print_errors(err)
        return EXIT_INVALID
    except FileNotFoundError as err:
        sys.stderr.write(f"{err.filename}: error: no such file\n")
        return EXIT_INVALID
    except ImportanceFileError as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_INVALID
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence: never a bare traceback
        if os.environ.get("ACC_DEBUG"):
            raise
        if isinstance(err, MeasureError):
            # Not a bug: the engine worker crashed, ran past its time limit (a busy host) or could not
            # take ACC_MEASURE_NICE. The stages before it are cached: the same command resumes there.
            sys.stderr.write(f"measurement failed: {err}\n"
                             "the stages before it are cached: rerun the same command, on a quieter machine or "
                             "with ACC_MEASURE_NICE=-10 as root (README \"Measuring on a shared machine\")\n")
            return EXIT_MEASURE
        sys.stderr.write(f"internal error: {type(err).__name__}: {err}\n")
        sys.stderr.write(BUG_HINT.format(v=__version__) + " (set ACC_DEBUG=1 for the traceback)\n")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
