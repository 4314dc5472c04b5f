"""The engine interface: load an exported model, run a workload, measure it like the benchmarks do.

Definitions (facts.md "Benchmark definitions", the same as ``autocompress.cost.latency`` predicts):

* TTFT: time from a request's arrival to its first output token.
* E2E: time from arrival to the last output token.
* TPOT = (E2E - TTFT) / (out - 1), per request (``vllm bench serve``).
* throughput: output tokens of all timed requests / the elapsed wall time of the timed part.
* memory: what the engine reserves by its own accounting (vLLM: weights + KV space) and, apart,
  the increase of the process's resident memory (peak, from before loading to after the runs); on a
  GPU, the engine's measured need and device footprint (``engines.gpu_memory``).

A ``Measurement`` carries every per-request (serve) or per-iteration (batch) ``Sample`` so that any
percentile can be computed again later; the medians and p50/p90/p99 in it are derived from them.
Nothing here imports torch or an engine: adapters import theirs inside ``load``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import struct
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Protocol, runtime_checkable

from autocompress.catalog.engines import SchedulerLimits, scheduler_defaults
from autocompress.catalog.hardware import resolve_device
from autocompress.cost.memory import memory_breakdown

PERCENTILES = (50.0, 90.0, 99.0)
SAMPLE_METRICS = ("ttft_s", "tpot_s", "e2e_s")


@dataclass(frozen=True)
class EngineLimits:
    """Engine settings (derived by ``derive_limits``, or given)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    kv_space_gib: int | None = None  # vLLM CPU: VLLM_CPU_KVCACHE_SPACE; None: engine default (GPU: pool)
    enforce_eager: bool = True  # vLLM: torch.compile takes ~60 s at the first start on these CPUs
    prefix_caching: bool = False  # vLLM: enable_prefix_caching (on when a workload has a prefix share)
    threads: int | None = None  # CPU: OMP_NUM_THREADS / torch threads; None: all cores
    seed: int = 0
    gpu_memory_bytes: int | None = None  # vLLM GPU: what it may ask for (the spec's limit); None: default share
    gpu_share: int = 1  # engines on one GPU at once (paired: 2); ``engines.gpu_memory.utilization``


@dataclass(frozen=True)
class RunSettings:
    """How many runs a workload gets. Defaults are small for CPU (``vllm bench latency``: 10 + 30).

    ``iterations`` / ``requests`` are the minimum number of timed samples; with ``target_se`` set,
    sampling goes on until the relative standard error of the mean of every timed metric (TTFT,
    TPOT, E2E per sample) is below it, or ``max_s`` seconds of timed runs have passed: the count
    follows each measurement's own noise instead of a constant (on a drifting, shared host one
    request's step time varies ~10%)."""

    warmup: int = 1  # batch: warm-up iterations; serve: warm-up rounds of ``concurrency`` requests
    iterations: int = 3  # batch: timed iterations (the minimum with target_se)
    requests: int | None = None  # serve: timed requests (the minimum); None: max(4, 2 * concurrency)
    target_se: float | None = None  # relative SE of the mean to reach, e.g. 0.02
    max_s: float = 120.0  # cap on the timed part when sampling to target_se
    max_samples: int = 200

    def serve_requests(self, concurrency: int) -> int:
        return self.requests if self.requests is not None else max(4, 2 * concurrency)

    def more(self, samples: list, elapsed_s: float, minimum: int) -> bool:
        """Whether another sample is needed (``target_se``: until each metric's SE is below it)."""
        if len(samples) < minimum:
            return True
        if self.target_se is None or len(samples) >= self.max_samples or elapsed_s >= self.max_s:
            return False
        return max(relative_se([getattr(x, m) for x in samples]) for m in SAMPLE_METRICS) > self.target_se


def relative_se(values) -> float:
    """Standard error of the mean over the mean (inf for fewer than two values)."""
    xs = list(values)
    if len(xs) < 2:
        return math.inf
    mean = sum(xs) / len(xs)
    if mean <= 0:
        return 0.0
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return math.sqrt(var / len(xs)) / mean


class Ticker:
    """Counts an engine run's units (generate calls or requests, warm-up included) for progress:
    ``tick(done, total)`` after each; a no-op without ``tick``. ``total`` is the minimum count."""

    def __init__(self, tick, total: int):
        self.tick, self.total, self.done = tick, total, 0

    def __call__(self, n: int = 1) -> None:
        self.done += n
        # past the minimum (sampling to ``target_se``) the count is open: the total follows it
        self.total = max(self.total, self.done)
        if self.tick:
            self.tick(self.done, self.total)


@dataclass(frozen=True)
class Sample:
    """One request (serve) or one iteration of the whole batch (batch)."""

    ttft_s: float
    e2e_s: float
    output_tokens: int  # per request
    input_tokens: int
    cached_tokens: int | None = None  # prefix-cache hits the engine reports (vLLM), per request
    engine_ttft_s: float | None = None  # the engine's own TTFT where it reports one (a cross-check)

    @property
    def tpot_s(self) -> float:
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


@dataclass(frozen=True)
class Memory:
    engine_bytes: int | None  # the engine's own accounting: weights + reserved KV (+ activations if known)
    weights_bytes: int | None
    kv_reserved_bytes: int | None
    activation_bytes: int | None  # None: the engine does not report it (vLLM CPU)
    rss_increase_bytes: int  # peak resident memory after the runs minus before loading
    rss_after_load_bytes: int  # resident memory increase once loaded, before any request
    kv_peak_bytes: int | None = None  # KV blocks in use at the busiest engine step x bytes per block
    need_bytes: int | None = None  # vLLM GPU: non-KV (its start-up profile) + kv_peak (``engines.gpu_memory``)
    device_bytes: int | None = None  # GPU: device memory in use now less before loading (the context excluded)
    kv_preemptions: int | None = None  # vLLM: requests preempted for want of KV blocks (None: not counted)


@dataclass(frozen=True)
class Measurement:
    engine: str
    versions: tuple[tuple[str, str], ...]  # (package, version): engine, torch, transformers
    device: str
    workload: str
    mode: str
    concurrency: int
    input_tokens: int
    output_tokens: int
    prefix_cache: float
    n: int  # timed samples
    warmup: int  # warm-up iterations (batch) or requests (serve)
    ttft_s: float  # medians over the samples
    tpot_s: float
    e2e_s: float
    throughput_tok_s: float
    elapsed_s: float  # wall time of the timed part
    percentiles: tuple[tuple[str, float, float], ...]  # (metric, p, value): ttft_s/tpot_s/e2e_s x p50/p90/p99
    memory: Memory
    samples: tuple[Sample, ...]
    method: str  # how TTFT and E2E were obtained (differs per engine and mode)
    settings: tuple[tuple[str, str], ...] = field(default=())  # the engine arguments used

    def percentile(self, metric: str, p: float) -> float:
        return percentile([getattr(s, metric) for s in self.samples], p)


@runtime_checkable
class Engine(Protocol):
    name: str

    def load(self, model_dir, target, limits: EngineLimits) -> "Engine": ...

    def run(self, workload, seed: int = 0, settings: RunSettings = RunSettings(), tick=None) -> Measurement:
        """``tick(done, total)``: called after each generate call or request, warm-up included."""

    def close(self) -> None: ...

    def __enter__(self) -> "Engine": ...

    def __exit__(self, *exc) -> None: ...


# ---- helpers shared by the adapters ------------------------------------------------------------

def percentile(values, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, and ``vllm bench serve``'s)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def prompt_batch(rng, n: int, input_tokens: int, vocab: int, prefix: list[int] | None = None) -> list[list[int]]:
    """``n`` prompts of ``input_tokens`` random ids < ``vocab``, starting with the shared ``prefix``."""
    prefix = prefix or []
    tail = input_tokens - len(prefix)
    return [prefix + [int(x) for x in rng.integers(0, vocab, tail)] for _ in range(n)]


def shared_prefix(rng, workload, vocab: int) -> list[int]:
    """The first round(h * input) tokens every prompt shares (prefix-cache share h), or none."""
    k = round(workload.prefix_cache * workload.input_tokens)
    k = min(k, workload.input_tokens - 1)  # the last prompt token is always computed
    return [int(x) for x in rng.integers(0, vocab, k)] if k > 0 else []


def rss_bytes() -> int:
    """Current resident memory of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def peak_rss_bytes() -> int:
    """Peak resident memory (VmHWM) since the last ``reset_peak_rss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: writing 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def package_versions(*names: str) -> tuple[tuple[str, str], ...]:
    out = []
    for n in names:
        try:
            out.append((n, version(n)))
        except PackageNotFoundError:
            pass
    return tuple(out)


def host_device(kind: str) -> str:
    if kind == "gpu":
        import torch

        return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
    except OSError:
        pass
    return f"{name} ({os.cpu_count()} cores)"


def model_vocab(model_dir) -> int:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return int(cfg.get("vocab_size") or cfg["text_config"]["vocab_size"])


def checkpoint_weight_bytes(model_dir, elem_bytes: int) -> int:
    """Weights as loaded: the checkpoint's tensors (safetensors headers, no torch) at ``elem_bytes`` each.

    vLLM on CPU repacks linear weights into oneDNN buffers and drops the Parameters, so counting the
    module's parameters after loading sees only the embedding; the checkpoint is the reliable count.
    """
    total = 0
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                total += math.prod(info["shape"]) * elem_bytes
    return total


def summarize(*, engine: str, versions, device: str, workload, samples: list[Sample], elapsed_s: float, warmup: int,
              memory: Memory, method: str, settings=()) -> Measurement:
    """Medians, percentiles and throughput (all output tokens of the timed samples / elapsed) from samples."""
    assert samples, "no timed samples"
    pct = tuple((m, p, percentile([getattr(s, m) for s in samples], p)) for m in SAMPLE_METRICS for p in PERCENTILES)
    med = {m: percentile([getattr(s, m) for s in samples], 50.0) for m in SAMPLE_METRICS}
    if workload.mode == "batch":  # a sample is the whole batch
        tokens = sum(s.output_tokens for s in samples) * workload.concurrency
    else:
        tokens = sum(s.output_tokens for s in samples)
    return Measurement(
        engine=engine, versions=tuple(versions), device=device, workload=workload.name, mode=workload.mode,
        concurrency=workload.concurrency, input_tokens=workload.input_tokens, output_tokens=workload.output_tokens,
        prefix_cache=workload.prefix_cache, n=len(samples), warmup=warmup, ttft_s=med["ttft_s"], tpot_s=med["tpot_s"],
        e2e_s=med["e2e_s"], throughput_tok_s=tokens / elapsed_s, elapsed_s=elapsed_s, percentiles=pct, memory=memory,
        samples=tuple(samples), method=method, settings=tuple((k, str(v)) for k, v in settings),
    )


def derive_limits(arch, target, workloads, scheduler=None, slack: int = 16, enforce_eager: bool | None = None,
                  kv_space_gib: int | None = None, threads: int | None = None, seed: int = 0) -> EngineLimits:
    """Engine settings from our derivation: the scheduler budgets ``autocompress.plan.derive.engine_limits``
    recommends (max_num_seqs = the largest concurrency), max_model_len = the longest input + output
    + ``slack``; on vLLM CPU the KV space = ceil(KV needed) GiB from ``memory_breakdown``, on a GPU the
    spec's memory limit as what vLLM may ask for. CUDA graphs (``enforce_eager`` False) on a GPU, as the
    cost model and the plan assume there; eager on the CPU, where torch.compile takes about a minute per
    start and the model charges no graph."""
    workloads = tuple(workloads)
    device = resolve_device(target.hardware)
    if scheduler is None:
        base = scheduler_defaults(target.engine, device, server=any(w.mode == "serve" for w in workloads))
        seqs = max(w.concurrency for w in workloads)
        scheduler = SchedulerLimits(base.max_num_batched_tokens, max(1, seqs))
    longest = max(w.input_tokens + w.output_tokens for w in workloads) + slack
    if enforce_eager is None:
        enforce_eager = device.kind != "gpu"
    if kv_space_gib is None and target.engine == "vllm" and device.kind == "cpu":
        kv_space_gib = memory_breakdown(arch, target, workloads, device=device, limits=scheduler).cpu_kv_space_gib
    return EngineLimits(  # on a GPU the spec's memory limit is what vLLM may ask for (gpu_memory_utilization)
        gpu_memory_bytes=target.memory_limit_bytes if device.kind == "gpu" else None,
        max_num_seqs=scheduler.max_num_seqs,
        max_num_batched_tokens=max(scheduler.max_num_batched_tokens, 1),
        max_model_len=longest, kv_space_gib=kv_space_gib, enforce_eager=enforce_eager,
        prefix_caching=any(w.prefix_cache > 0 for w in workloads), threads=threads, seed=seed,
    )
