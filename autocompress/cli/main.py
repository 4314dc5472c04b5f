"""The ``acc`` command line. The only module that prints with rich.

Exit codes (documented in the README):
  0  success; for ``acc check``: the contract is feasible
  1  the contract is infeasible, proved (``acc check``, ``acc build``), or not met (``acc verify``)
  2  invalid input: a spec, profile, output folder or command-line error, rendered with file:line:col
  3  internal error: a bug in autocompress; the message asks to report it
  4  no architecture was found, but infeasibility is not proved (``acc check``, ``acc build``)
  5  a distributed ``acc build`` lost a process (killed, or stopped answering): rerunning resumes
(``acc eval``: 0, or 2 for a bad argument or benchmark data that is not installed)

Imports are deliberately lazy: ``acc check`` must answer in well under two seconds, so rich,
cvxpy and the stages are imported inside the commands that use them, and torch never is.
"""

from __future__ import annotations

import os
import sys

from autocompress import __version__
from autocompress.cli.parser import build_parser
from autocompress.diagnostics import (EXIT_INTERNAL, EXIT_INVALID, EXIT_MEASURE, EXIT_OK, EXIT_PEER, ImportanceFileError,
                                      SpecError)

BUG_HINT = "this is a bug in autocompress {v}; please report it with the spec and this message"


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _print_errors(err: SpecError, warnings=()) -> None:
    # Plain text, no markup: the rendered caret lines must keep their columns.
    text = err.render()
    sys.stderr.write(text + "\n")
    n = len([d for d in err.diagnostics if d.severity == "error"])
    sys.stderr.write(f"{n} error{'s' if n != 1 else ''} in {err.path}\n")


def _cmd_check(args) -> int:
    from autocompress.check import run_check

    result = run_check(args.spec, use_cache=not args.no_cache, importance=args.importance)
    for w in result.warnings:
        sys.stderr.write(w + "\n")
    if args.format == "text" and not args.out:
        from autocompress.cli.terminal import print_feasibility

        print_feasibility(_console(), result.report)
    else:
        fmt = "md" if args.format == "text" else args.format
        from autocompress.cli.commands import emit
        from autocompress.report.feasibility import render_json, render_markdown

        plots = None
        if fmt == "md" and args.out:  # the charts land beside the report, linked relatively
            from pathlib import Path

            from autocompress.report.plot_data import check_plots
            from autocompress.report.plots import write_plots

            out = Path(args.out)
            plots = write_plots(out.parent, check_plots(result.report), prefix=f"{out.stem}-")
        text = render_markdown(result.report, plots) if fmt == "md" else render_json(result.report)
        emit(text, args.out, f" ({result.report['verdict']})")
    return result.exit_code


def _cmd_fmt(args) -> int:
    from autocompress.lang.api import format_spec, load_spec

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
        from autocompress.cache import atomic_write_text

        atomic_write_text(args.spec, text)
        return EXIT_OK
    sys.stdout.write(text)
    return EXIT_OK


def _cmd_build(args) -> int:
    if "OMP_WAIT_POLICY" not in os.environ:
        # OpenMP threads that spin at every barrier lose ~10x on a host shared with other work (a
        # HellaSwag forward took 5.4 s instead of 0.47 s here); the build's own math waits passively.
        # Engine measurements keep the engine's default (``measure.runner.run_worker`` drops it).
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ["ACC_SET_OMP_WAIT_POLICY"] = "1"
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.stderr.write("acc build needs torch and transformers: install them with scripts/install-full.sh\n")
        return EXIT_INVALID
    from autocompress.build import dist

    if args.nproc and dist.launched():
        sys.stderr.write("acc build: --nproc starts its own processes; under torchrun or srun leave it out\n")
        return EXIT_INVALID
    if args.nproc:
        from autocompress.cli.launch import launch_build
        from autocompress.build.pipeline import plan_outputs

        code = launch_build(args)
        if code != EXIT_OK or args.no_verify:
            return code
        return _verify_build(args, plan_outputs(args.spec, args.baseline, args.force)[0], _console(stderr=True))
    if not dist.launched():
        return _build(args)
    dist.init()
    try:
        code = _build(args)
    except Exception as err:
        if not _peer_lost(err):
            raise
        sys.stderr.write(f"rank {dist.rank()}: another process of this build failed or stopped answering "
                         f"({type(err).__name__}: {str(err)[:200]}); rerun the same command: it resumes\n")
        code = EXIT_PEER
    finally:
        dist.shutdown()
    dist.leave(code)  # not a return: gloo's threads outlive the group and can abort a normal exit


def _peer_lost(err: Exception) -> bool:
    """Is ``err`` a collective that failed because another rank died or hung (not a bug here)?"""
    import torch.distributed as d

    text = str(err)
    return isinstance(err, d.DistError) or (isinstance(err, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Timed out waiting", "NCCL")))


def _build(args) -> int:
    from autocompress.cli.terminal import build_progress, print_stage_times
    from autocompress.build import dist
    from autocompress.build.pipeline import run_build
    from autocompress.diagnostics import BuildError
    from autocompress.progress import Progress

    console = _console(stderr=True)
    # under a launcher rank 0 speaks for the build; the others report nothing but their own errors
    progress = build_progress(console, quiet=args.quiet) if dist.is_main() else Progress()
    try:
        result = run_build(args.spec, args.work, progress=progress, baseline=args.baseline, force=args.force,
                           no_calibrate=args.no_calibrate)
    except BuildError as err:
        if dist.is_main():
            (sys.stdout if err.exit_code == EXIT_OK else sys.stderr).write(f"{args.spec}: {err}\n")
        return err.exit_code
    finally:
        if hasattr(progress.sink, "close"):
            progress.sink.close()
    if not dist.is_main():
        return EXIT_OK
    print_stage_times(console, result.report["timings_s"], result.report["total_s"])
    sys.stdout.write(f"built {result.output}\n")
    if args.no_verify:
        return EXIT_OK
    return _verify_build(args, result.output, console)


def _verify_build(args, output, console) -> int:
    """``acc verify`` after a build when the target is this machine and its engine is installed."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.lang.api import load_spec
    from autocompress.measure.presence import engine_available, hardware_present

    spec = load_spec(args.spec)
    here, where = hardware_present(resolve_device(spec.target.hardware))
    eng, why = engine_available(spec.target.engine)
    if not (here and eng):
        sys.stdout.write(f"not verified by measurement: {where if not here else why}; "
                         f"`acc verify {output} {args.spec}` writes the predicted report\n")
        return EXIT_OK
    from autocompress.cli.commands import verify

    # an A/B needs two passes: one pass of the same two models read 0.929 and 1.036 on memory in the
    # eighth session (bench/results/cpu-vllm-readme), too coarse for the 5% the comparison is judged at
    passes = 2 if getattr(args, "baseline", None) else 1
    return verify(str(output), args.spec, None, None, console, passes=passes, quiet=args.quiet)


def _cmd_verify(args) -> int:
    from autocompress.cli.commands import verify

    return verify(args.out, args.spec, args.threads, args.requests, _console(stderr=True), args.passes, args.quiet,
                  args.pairings)


def _cmd_profile(args) -> int:
    from autocompress.cli.commands import profile

    return profile(args, _console(stderr=True))


def _cmd_diff(args) -> int:
    from autocompress.cli.commands import diff

    return diff(args)


def _cmd_eval(args) -> int:
    from autocompress.cli.eval_cmd import cmd_eval

    return cmd_eval(args)


COMMANDS = {"check": _cmd_check, "build": _cmd_build, "fmt": _cmd_fmt, "verify": _cmd_verify,
            "profile": _cmd_profile, "diff": _cmd_diff, "eval": _cmd_eval}


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
        from autocompress.measure.runner import MeasureError

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
