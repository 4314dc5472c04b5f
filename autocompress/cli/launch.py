"""``acc build SPEC --nproc N``: torchrun's agent started in this process (``torch.distributed.launcher``).

The same as ``torchrun --standalone --nproc-per-node N -m autocompress.cli build SPEC``, with two
differences a user sees: what can be answered before any worker starts is answered here, so the
documented exit codes hold (an invalid spec or output folder: 2; an infeasible contract: 1; no
architecture found: 4), and a worker's own exit code comes back as this command's (torchrun
itself exits 1 whatever its workers returned). Verification (``acc verify``) runs here after the
workers have exited, with the whole machine to itself.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from autocompress import check
from autocompress.build.pipeline import plan_outputs
from autocompress.build.prepare import check_verdict
from autocompress.contract import load_contract
from autocompress.diagnostics import EXIT_INFEASIBLE, EXIT_INVALID, EXIT_NOT_FOUND, BuildError


def worker_argv(args) -> list[str]:
    """The ``acc build`` command line every worker runs (verification is left to the launcher)."""
    argv = ["build", args.spec, "--no-verify"]
    if args.work:
        argv += ["--work", args.work]
    if args.baseline:
        argv += ["--baseline", args.baseline]
    argv += [flag for flag, on in (("--quiet", args.quiet), ("--force", args.force)) if on]
    return argv


def exit_code(failures: dict[int, int], first: int) -> int:
    """The launcher's exit code from its failed workers' (rank -> exit code; negative: killed by a
    signal) and the rank that failed first.

    A documented failure every rank reports alike (1, 2, 4) wins; otherwise the first failure's code,
    a signal as 128 + its number (as a shell reports it): the ranks that saw it die and the ones
    torchrun then stopped say less."""
    for code in failures.values():
        if code in (EXIT_INFEASIBLE, EXIT_INVALID, EXIT_NOT_FOUND):
            return code
    code = failures.get(first, 1)
    return code if code > 0 else 128 - code


def launch_build(args) -> int:
    """Pre-check the spec, its output folders and the verdict, then run ``args.nproc`` workers."""
    contract = load_contract(args.spec)  # parsed and resolved once for both pre-checks
    plan_outputs(contract, args.baseline, args.force)  # SpecError at the output line: exit 2
    try:
        check_verdict(check.check_contract(contract))  # cached: the workers read the same answer
    except BuildError as err:
        sys.stderr.write(f"{args.spec}: {err}\n")
        return err.exit_code

    # torchrun's defaults for one machine: a standalone rendezvous on a free port, one thread per
    # worker unless OMP_NUM_THREADS says otherwise (N workers on N cores)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc)))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=args.nproc, run_id=str(uuid.uuid4()),
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1)
    try:
        elastic_launch(config, sys.executable)("-m", "autocompress.cli", *worker_argv(args))
    except ChildFailedError as err:
        return exit_code({rank: f.exitcode for rank, f in err.failures.items()}, err.get_first_failure()[0])
    except SignalException as err:
        # the agent turns Ctrl-C into this (after stopping the workers, which saw it too): the same
        # exit 130 and line as a build in one process (``main``)
        if err.sigval == signal.SIGINT:
            raise KeyboardInterrupt from None
        raise
    return 0
