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

import argparse
import os
import sys

from autocompress import __version__
from autocompress.diagnostics import (EXIT_INTERNAL, EXIT_INVALID, EXIT_MEASURE, EXIT_OK, EXIT_PEER, ImportanceFileError,
                                      SpecError)

BUG_HINT = "this is a bug in autocompress {v}; please report it with the spec and this message"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="acc", description="autocompress: deployment contract in, compressed model out")
    p.add_argument("--version", action="version", version=f"autocompress {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="parse, validate and prove feasibility of a .acspec (no weights loaded)")
    c.add_argument("spec", help="path of the .acspec file")
    c.add_argument("--format", choices=("text", "md", "json"), default="text",
                   help="text: terminal summary (default); md: Markdown for a PR comment; json: machine-readable")
    c.add_argument("--out", metavar="FILE", help="write the md/json report to FILE (atomically) instead of stdout; "
                   "with --format md, its charts too (FILE-architecture.png, FILE-costs.png, beside it)")
    c.add_argument("--no-cache", action="store_true", help="recompute even if an identical check is cached")
    c.add_argument("--importance", metavar="FILE", help="use this importance file (acc build writes one in its "
                   "importance stage) instead of the prior; the report names it and its sha256")

    b = sub.add_parser("build", help="compress the parent to meet the contract and export the model (needs torch)")
    b.add_argument("spec", help="path of the .acspec file")
    b.add_argument("--work", metavar="DIR", help="stage cache folder (default: next to the output, .<output>.acc)")
    b.add_argument("--quiet", action="store_true", help="no progress bars: plain log lines with rate and ETA")
    b.add_argument("--force", action="store_true", help="replace an earlier autocompress output of another spec "
                   "(a folder autocompress did not write is never replaced), and compress even when the parent "
                   "already meets the contract as measured")
    b.add_argument("--no-calibrate", action="store_true", help="hardware cpu: do not calibrate this machine first "
                   "when it has no profile (predictions then come from another machine's)")
    b.add_argument("--baseline", choices=("uniform",), help="also build the uniform (Minitron-style) model at the "
                   "same budget into <output>-uniform and compare them in the report")

    b.add_argument("--no-verify", action="store_true", help="skip `acc verify` at the end (it runs when the target "
                   "hardware is this machine and the engine is installed)")
    b.add_argument("--nproc", type=_positive, metavar="N", help="run the build in N processes on this machine "
                   "(torchrun's agent: data parallel, FSDP2 distillation); several machines: torchrun or srun, "
                   "see docs/scale-out.md")

    v = sub.add_parser("verify", help="run the contract's workloads on an exported model and judge every bound")
    v.add_argument("out", help="the exported model folder (acc build's output)")
    v.add_argument("spec", help="the .acspec contract")
    v.add_argument("--threads", type=int, help="engine threads on CPU (default: all cores)")
    v.add_argument("--requests", type=int, help="minimum timed requests per workload (default: max(8, 2 x concurrency) on "
                   "CPU, max(4, 2 x concurrency) on GPU); sampling goes on until each metric's SE is below 2%%")
    v.add_argument("--passes", type=int, default=1, help="repeat the interleaved schedule (parent, model, parent, "
                   "baseline, parent) this many times; the ratios are averaged and their spread reported")
    v.add_argument("--quiet", action="store_true", help="no progress bars: plain log lines with rate and ETA")

    pr = sub.add_parser("profile", help="measure the engine on this machine and write a calibration profile")
    pr.add_argument("--hardware", required=True, help="catalog name of this machine's device (cpu for the host)")
    pr.add_argument("--engine", required=True, choices=("vllm", "transformers"))
    pr.add_argument("--out", metavar="FILE", help="profile file to write (default: for cpu, this machine's profile in the "
                    "acc cache, which acc check and acc build then use; else <hardware>-<engine>-measured.json)")
    pr.add_argument("--model", default="smollm2-135m", help="parent whose variants are measured (alias, folder, .gguf)")
    pr.add_argument("--threads", type=int, help="engine threads on CPU (default: all cores)")
    pr.add_argument("--quick", action="store_true", help="4 + 4 models instead of 7 + 13 (a rough profile)")
    pr.add_argument("--quiet", action="store_true", help="no progress bars: plain log lines with rate and ETA")
    pr.add_argument("--work", metavar="DIR", help="measurement cache and synthetic models (default: the acc cache); "
                    "bench/costmodel_fidelity.py uses bench/work/profiling")

    d = sub.add_parser("diff", help="what a spec change did: two contracts' verdicts, bounds, costs and starting "
                       "architectures side by side (no weights loaded)")
    d.add_argument("specs", nargs="+", metavar="SPEC", help="OLD.acspec NEW.acspec, or NEW.acspec with --base")
    d.add_argument("--base", metavar="REV", help="compare NEW.acspec with the same file at this git revision "
                   "(read with git cat-file; nothing in it is executed)")
    d.add_argument("--format", choices=("md", "json"), default="md",
                   help="md: Markdown for a PR comment (default); json: specs/spec-diff.schema.json")
    d.add_argument("--out", metavar="FILE", help="write the diff to FILE (atomically) instead of stdout")

    from autocompress.cli.eval_cmd import add_parser

    add_parser(sub)  # acc eval: its parser and command live in eval_cmd
    f = sub.add_parser("fmt", help="print the canonical form of a .acspec")
    f.add_argument("spec")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="exit 1 if the file is not in canonical form")
    g.add_argument("--write", action="store_true", help="rewrite the file in place (atomically)")
    return p


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"allowed: a whole number >= 1, got {text}")
    return n


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
        from autocompress.report.feasibility import render_json, render_markdown

        plots = None
        if fmt == "md" and args.out:  # the charts land beside the report, linked relatively
            from pathlib import Path

            from autocompress.report.plot_data import check_plots
            from autocompress.report.plots import write_plots

            out = Path(args.out)
            plots = write_plots(out.parent, check_plots(result.report), prefix=f"{out.stem}-")
        text = render_markdown(result.report, plots) if fmt == "md" else render_json(result.report)
        if args.out:
            from autocompress.cache import atomic_write_text

            atomic_write_text(args.out, text)
            sys.stderr.write(f"wrote {args.out} ({result.report['verdict']})\n")
        else:
            sys.stdout.write(text)
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
    from autocompress.compress import dist

    if args.nproc and dist.launched():
        sys.stderr.write("acc build: --nproc starts its own processes; under torchrun or srun leave it out\n")
        return EXIT_INVALID
    if args.nproc:
        from autocompress.cli.launch import launch_build
        from autocompress.compress.pipeline import plan_outputs

        code = launch_build(args)
        if code != EXIT_OK or args.no_verify:
            return code
        return _verify_build(args, plan_outputs(args.spec, args.baseline, args.force)[0], _console(stderr=True))
    if not dist.launched():
        return _build(args)
    dist.init()
    try:
        return _build(args)
    except Exception as err:
        if not _peer_lost(err):
            raise
        sys.stderr.write(f"rank {dist.rank()}: another process of this build failed or stopped answering "
                         f"({type(err).__name__}: {str(err)[:200]}); rerun the same command: it resumes\n")
        return EXIT_PEER
    finally:
        dist.shutdown()


def _peer_lost(err: Exception) -> bool:
    """Is ``err`` a collective that failed because another rank died or hung (not a bug here)?"""
    import torch.distributed as d

    text = str(err)
    return isinstance(err, d.DistError) or (isinstance(err, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Timed out waiting", "NCCL")))


def _build(args) -> int:
    from autocompress.cli.terminal import build_progress, print_stage_times
    from autocompress.compress import dist
    from autocompress.compress.pipeline import run_build
    from autocompress.compress.prepare import BuildError
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

    return verify(str(output), args.spec, None, None, console, quiet=args.quiet)


def _cmd_verify(args) -> int:
    from autocompress.cli.commands import verify

    return verify(args.out, args.spec, args.threads, args.requests, _console(stderr=True), args.passes, args.quiet)


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
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
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
