"""``acc build SPEC``: compress the parent to meet the contract and export the model, in this
process, under a launcher (torchrun, srun) or in ``--nproc`` processes started here (``launch``),
then verify it when the target is this machine and its engine is installed.

``main`` imports this module only when ``acc build`` runs, after it has set the OpenMP wait policy
(torch and every stage of the build load with it).
"""

from __future__ import annotations

import sys

import torch.distributed

from autocompress.build import dist, pipeline
from autocompress.catalog.hardware import resolve_device
from autocompress.cli import launch, verify_cmd
from autocompress.cli.terminal import build_progress, console, print_stage_times
from autocompress.contract import Contract, load_contract
from autocompress.diagnostics import (EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, EXIT_PEER, BuildError,
                                      interrupted_message)
from autocompress.measure import presence
from autocompress.progress import Progress


def run(args) -> int:
    if args.nproc and dist.launched():
        sys.stderr.write("acc build: --nproc starts its own processes; under torchrun or srun leave it out\n")
        return EXIT_INVALID
    if args.nproc:
        code = launch.launch_build(args)
        if code != EXIT_OK or args.no_verify:
            return code
        contract = load_contract(args.spec)
        return verify_build(args, pipeline.plan_outputs(contract, args.baseline, args.force)[0],
                            console(stderr=True), contract)
    if not dist.launched():
        return build(args)
    dist.init()
    try:
        code = build(args)
    except KeyboardInterrupt:
        # Ctrl-C reaches every worker of the terminal's process group: each stops as a lone build
        # does (its stage's temporary folder removed, the stages before it cached), rank 0 says so
        if dist.is_main():
            sys.stderr.write(interrupted_message("build") + "\n")
        code = EXIT_INTERRUPTED
    except Exception as err:
        if not peer_lost(err):
            raise
        sys.stderr.write(f"rank {dist.rank()}: another process of this build failed or stopped answering "
                         f"({type(err).__name__}: {str(err)[:200]}); rerun the same command: it resumes\n")
        code = EXIT_PEER
    finally:
        dist.shutdown()
    dist.leave(code)  # not a return: gloo's threads outlive the group and can abort a normal exit


def peer_lost(err: Exception) -> bool:
    """Is ``err`` a collective that failed because another rank died or hung (not a bug here)?"""
    text = str(err)
    return isinstance(err, torch.distributed.DistError) or (isinstance(err, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Timed out waiting", "NCCL")))


def build(args) -> int:
    """One process's build (rank 0 speaks for it under a launcher), then its verification. The
    spec is parsed and its parent resolved here, once (``contract``): every stage reads that."""
    contract = load_contract(args.spec)  # a SpecError here is the CLI's exit 2, before any work
    out = console(stderr=True)
    # under a launcher rank 0 speaks for the build; the others report nothing but their own errors
    progress = build_progress(out, quiet=args.quiet) if dist.is_main() else Progress()
    try:
        result = pipeline.run_build(contract, args.work, progress=progress, baseline=args.baseline,
                                    force=args.force, no_calibrate=args.no_calibrate)
    except BuildError as err:
        if dist.is_main():
            (sys.stdout if err.exit_code == EXIT_OK else sys.stderr).write(f"{args.spec}: {err}\n")
        return err.exit_code
    finally:
        if hasattr(progress.sink, "close"):
            progress.sink.close()
    if not dist.is_main():
        return EXIT_OK
    print_stage_times(out, result.report["timings_s"], result.report["total_s"])
    sys.stdout.write(f"built {result.output}\n")
    if args.no_verify:
        return EXIT_OK
    return verify_build(args, result.output, out, contract)


def verify_build(args, output, console, contract: Contract | None = None) -> int:
    """``acc verify`` after a build when the target is this machine and its engine is installed.
    ``contract``: the build's (else the spec file is read)."""
    contract = contract or load_contract(args.spec)
    spec = contract.spec
    here, where = presence.hardware_present(resolve_device(spec.target.hardware))
    eng, why = presence.engine_available(spec.target.engine)
    if not (here and eng):
        sys.stdout.write(f"not verified by measurement: {where if not here else why}; "
                         f"`acc verify {output} {args.spec}` writes the predicted report\n")
        return EXIT_OK
    # an A/B needs two passes: one pass of the same two models read 0.929 and 1.036 on memory
    # (docs/measurement.md), too coarse for the 5% the comparison is judged at
    passes = 2 if getattr(args, "baseline", None) else 1
    return verify_cmd.verify(str(output), contract, None, None, console, passes=passes, quiet=args.quiet)
