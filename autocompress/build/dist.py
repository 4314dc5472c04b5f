"""Data parallelism over processes for ``acc build``: who this process is, the process group, and
the few collectives the stages use (``torch.distributed``).

    torchrun --nproc-per-node N -m autocompress.cli build SPEC    one node (--nnodes ... for more)
    srun ... torchrun ... -m autocompress.cli build SPEC           Slurm, one torchrun per node
    srun python -m autocompress.cli build SPEC                     Slurm, one task per rank (mapped here)
    acc build SPEC --nproc N                                       torchrun's agent, started by ``launch``

Without a launcher nothing here does anything: ``active()`` is False, ``rank()`` 0, ``world()`` 1,
and every stage takes its single-process path, unchanged. Under a launcher the stages keep three rules:

* rank 0 alone writes stage folders, reports and the export (``stages.run_stage``); the others wait
  at a barrier and read what it wrote;
* work is split by position (``share``) and results are put back in single-process order
  (``gather_rows``), so sums are added in the same order: the importance, the teacher outputs and
  the search's measurements are bit-identical at every world size (tests pin it); only the
  distillation's gradient sum is rounded differently (``distill_dist``);
* collectives move tensors, never pickled objects, and every decision is taken on gathered values
  that are identical on every rank, so the ranks stay in lockstep without further messages.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from datetime import timedelta
from typing import Callable, Mapping, NoReturn, Sequence, TypeVar

import torch
import torch.distributed as d

T = TypeVar("T")

# 30 min, gloo's own default, stated: a dead peer is seen in milliseconds (its sockets close), but
# a hung one only at this timeout, and rank-0-only sections (evaluation, export) are waited for at
# a barrier that counts against it. ACC_DIST_TIMEOUT_S overrides.
DEFAULT_TIMEOUT_S = 1800.0


def slurm_env(env: Mapping[str, str]) -> dict[str, str]:
    """The torch.distributed variables of a Slurm task started by ``srun`` without torchrun
    (one task per rank); ``{}`` when torchrun (``WORLD_SIZE``) or no multi-task step is present.

    MASTER_ADDR must be exported by the batch script on several nodes
    (``scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1``); the port defaults to one
    derived from the job id, so two jobs on one node do not collide."""
    # the batch script itself is step "batch" (id 0xfffffffe): it is not a rank of anything
    if ("WORLD_SIZE" in env or env.get("SLURM_STEP_ID", "batch") in ("batch", "extern", "4294967294", "4294967295")
            or int(env.get("SLURM_NTASKS", "1")) < 2):
        return {}
    out = {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env["SLURM_NTASKS"], "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
           "MASTER_PORT": env.get("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))}
    if "MASTER_ADDR" not in env:
        if int(env.get("SLURM_NNODES", "1")) > 1:
            raise RuntimeError("srun across nodes without torchrun: export MASTER_ADDR in the batch script "
                               "(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)")
        out["MASTER_ADDR"] = "127.0.0.1"
    return out


def launched(env: Mapping[str, str] | None = None) -> bool:
    """Was this process started by torchrun (any world size, 1 included) or as one of several srun tasks?"""
    env = os.environ if env is None else env
    return "WORLD_SIZE" in env or bool(slurm_env(env))


def active() -> bool:
    return bool(d.is_available() and d.is_initialized())


def rank() -> int:
    return d.get_rank() if active() else 0


def world() -> int:
    return d.get_world_size() if active() else 1


def is_main() -> bool:
    return rank() == 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def device():
    """Where the distributed distillation computes: ``cuda:LOCAL_RANK`` under NCCL, else the CPU."""
    return torch.device(f"cuda:{local_rank()}") if "nccl" in backend() else torch.device("cpu")


def backend() -> str:
    """gloo on CPUs; with GPUs, NCCL for CUDA tensors and gloo for the CPU ones (the shared stages)."""
    if os.environ.get("ACC_DIST_BACKEND"):
        return os.environ["ACC_DIST_BACKEND"]
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def init() -> None:
    """Join the process group of this launch (idempotent)."""
    if active():
        return
    os.environ.update(slurm_env(os.environ))
    timeout = timedelta(seconds=float(os.environ.get("ACC_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S)))
    r, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun keeps one store across restarts (--max-restarts): the dead attempt's keys are
        # still in it, and 4 of 9 restarts failed to connect to the dead ranks' addresses in the
        # research runs (torch 2.13). One key prefix per attempt: 5 of 5 restarts succeeded.
        store = d.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
        store = d.PrefixStore(f"acc-attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        d.init_process_group(backend(), store=store, rank=r, world_size=ws, timeout=timeout)
    else:
        d.init_process_group(backend(), rank=r, world_size=ws, timeout=timeout)
    if "nccl" in backend():
        torch.cuda.set_device(local_rank())


def shutdown() -> None:
    if active():
        # Every rank reaches this point before any tears its group down: a rank that destroyed its
        # gloo group while rank 0 was still writing (the main-only save) aborted once in CI
        # ("terminate called without an active exception", SIGABRT, resume at world size 2).
        d.barrier()
        d.destroy_process_group()


def leave(code: int) -> NoReturn:
    """End a launched process with ``code`` once its group is shut down, without the interpreter's
    finalization.

    FSDP2's sharded parameters keep the gloo backend alive after ``destroy_process_group`` (its
    native threads, ``pt_gloo_runloop`` and ``gloo_tcp_loop``, still run after it).
    At exit they race the interpreter's finalization and the C++ static destructors, and now and
    then one calls std::terminate: "terminate called without an active exception", SIGABRT after a
    build that succeeded (once in ~130 resumes looped on 2 cores; 2 of 2 clean-clone CI runs once).
    So the Python exit handlers run while everything is alive, the streams are flushed, and the
    process ends at once."""
    atexit._run_exitfuncs()  # noqa: SLF001  (the registered handlers, while the interpreter is whole)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def barrier() -> None:
    if active():
        d.barrier()


def share(n: int, r: int | None = None, ws: int | None = None) -> range:
    """Positions of ``n`` items that rank ``r`` handles: contiguous, the first ``n % ws`` ranks one more."""
    r, ws = rank() if r is None else r, world() if ws is None else ws
    q, extra = divmod(n, ws)
    start = r * q + min(r, extra)
    return range(start, start + q + (r < extra))


def gather_rows(local, n: int):
    """The ``n`` rows computed by every rank on its ``share(n)`` (``local``: [len(share), ...]),
    in position order, on every rank. Identity without a launcher."""
    if not active() or n == 0:  # every rank sees the same n: none of them calls the collective
        return local
    ws, m = world(), -(-n // world())
    pad = torch.zeros((m, *local.shape[1:]), dtype=local.dtype)
    pad[: len(local)] = local
    parts = [torch.empty_like(pad) for _ in range(ws)]
    d.all_gather(parts, pad)
    return torch.cat([p[: len(share(n, r, ws))] for r, p in enumerate(parts)])


def map_shared(fn: Callable[[T], float], items: Sequence[T]) -> list[float]:
    """``[fn(x) for x in items]`` with the items split over the ranks; every rank gets all values."""
    if not active() or not items:
        return [fn(x) for x in items]
    mine = [fn(items[i]) for i in share(len(items))]
    return gather_rows(torch.tensor(mine, dtype=torch.float64), len(items)).tolist()


def all_sum(t):
    """In-place sum over the ranks of a CPU (gloo) or device tensor; identity without a launcher."""
    if active():
        d.all_reduce(t)
    return t


def from_main(value: bool | int) -> bool | int:
    """Rank 0's ``value`` on every rank: one decision ("the stage folder exists", "resume at step 40")."""
    if not active():
        return value
    t = torch.tensor([int(value)], dtype=torch.int64)
    d.broadcast(t, src=0)
    return type(value)(t.item())


def main_first(fn: Callable[[], T]) -> T:
    """Rank 0 runs ``fn`` (it fills a cache), then the others (they read it): no two ranks write one file."""
    if not active():
        return fn()
    if is_main():
        out = fn()
        barrier()
        return out
    barrier()
    return fn()


def main_only(fn: Callable[[], T]) -> T | None:
    """Rank 0 runs ``fn``; the others wait for it and get None."""
    out = fn() if is_main() else None
    barrier()
    return out
