"""Workload latency and throughput from the per-op roofline.

A step's time is the sum of its ops' ``op_time`` plus a per-executed-block overhead (eager
steps only: inside a CUDA graph no Python runs per layer) plus the engine's per-step overhead
(scheduler, sampling, output processing). Semantics per workload mode, matching the benchmark
definitions in facts.md:

**batch** (``vllm bench latency``: B = concurrency prompts submitted together, one ``generate``):
  * TTFT = prefill_fixed + the prefill of B x the uncached input (chunked by vLLM's
    max_num_batched_tokens: whole prompts packed per step, or one long prompt in chunks), with the
    first token sampled in the step that completes each prompt;
  * decode steps t = 1 .. out-1 run all B sequences at KV length in + t; their sum is exact (every
    op's time is max of two affine functions of the KV length between sliding-window
    breakpoints, summed in closed form), so out = 32K costs no more than out = 2;
  * E2E = TTFT + sum of decode steps; TPOT = (E2E - TTFT)/(out - 1); throughput = B*out/E2E.
  * B above vLLM's max_num_seqs runs in ceil(B / max_num_seqs) equal waves one after another
    (E2E multiplies; TTFT and TPOT are a wave's).

**serve** (c streaming clients, closed loop) and **prefix_cache**: the c requests start together
and those whose prefills share a step stay in lockstep, so TTFT is the whole group's prefill and
the decode steps carry only the other groups' prefills; cached prefix tokens come in whole KV
blocks and are one set of physical blocks for every sequence (formulas: ``cost.schedule``).

**tensor parallel**: per-GPU shapes (``roofline``) plus an all-reduce per sub-block over the link.

CUDA graphs (vLLM on GPU): pure-decode steps of at most the largest capture size replay full
graphs; prefill and mixed steps of at most that many tokens run piecewise graphs (attention eager);
the steady-state serve step is costed as a decode step (full graph) carrying its amortized prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autocompress.catalog.engines import SchedulerLimits, kv_block_size
from autocompress.catalog.hardware import resolve_device
from autocompress.cost.profile import load_profile
from autocompress.cost.roofline import (Numerics, Op, Pass, block_ops, kv_read_tokens, model_ops, roofline_seconds,
                                        shared_read_tokens)
from autocompress.cost.schedule import WorkloadPlan, cached_tokens, prefill_tokens, workload_plan  # noqa: F401 (re-exported)
from autocompress.ir import Architecture, Attention, Mamba2


@dataclass(frozen=True)
class StepCost:
    total_s: float
    block_s: tuple[float, ...]  # per block (op times + layer overhead)
    head_s: float  # embedding, final norm, LM head, sampler
    overhead_s: float  # per-step engine overhead + launches + layer overheads
    compute_bound_s: float  # op time on ops whose compute side binds
    memory_bound_s: float
    weight_bytes: float

    @property
    def bound(self) -> str:
        parts = {"compute": self.compute_bound_s, "memory": self.memory_bound_s, "overhead": self.overhead_s}
        return max(parts, key=parts.get)


@dataclass(frozen=True)
class WorkloadCost:
    workload: str
    mode: str
    ttft_s: float
    tpot_s: float
    e2e_s: float
    throughput_tok_s: float  # output tokens per second, all sequences together
    prefill_s: float  # the prefill steps inside TTFT (TTFT minus prefill_fixed)
    prefill_tokens: int  # uncached tokens prefilled per request
    decode_first_s: float  # decode step at the start of generation
    decode_last_s: float  # and at its end
    layer_shares: tuple[float, ...]  # share of the mean decode step per block
    head_share: float  # embedding + LM head + sampler share of the mean decode step
    overhead_share: float  # launches + layer and step overheads share of the mean decode step
    weight_bytes_per_step: float  # per GPU, mean decode step
    decode_bound: str  # "memory" | "compute" | "overhead" for the mean decode step
    prefill_bound: str
    cuda_graphs: bool
    device: str
    profile: str
    profile_source: str  # "default" | "measured": the report says which
    fixed_s: float  # the engine's fixed per-request prefill cost (TTFT = fixed_s + prefill_s)
    decode_s: float  # the decode steps of one wave (E2E = waves * (TTFT + decode_s))
    waves: int  # batch workloads above max_num_seqs run in waves; 1 otherwise


# ---- steps --------------------------------------------------------------------------------

def _ops(arch: Architecture, p: Pass, nb: Numerics) -> list[tuple[int | None, Op]]:
    out: list[tuple[int | None, Op]] = [(None, op) for op in model_ops(arch, p, nb)]
    for i, b in enumerate(arch.blocks):
        out += [(i, op) for op in block_ops(arch, b, p, nb)]
    return out


def _executed_blocks(arch: Architecture) -> int:
    return sum(1 for b in arch.blocks if b.mixer is not None or b.ffn is not None)


def _sub_blocks(block) -> int:
    return (block.mixer is not None) + (block.ffn is not None)


def sub_block_overhead(block, k, seqs: float) -> float:
    """Eager per-step cost of a block's executed sub-blocks beyond their ops: the framework's per
    module constant, plus the attention backend's fixed and per-sequence parts (``KernelConstants``)."""
    oh = k.sub_block_overhead_s * _sub_blocks(block)
    if isinstance(block.mixer, Attention):
        oh += k.attention_overhead_s + seqs * k.attention_seq_overhead_s
    return oh


def _op_terms(op: Op, device, profile, nb: Numerics, in_graph: bool) -> tuple[float, float, float, float, float]:
    """(time, compute-bound time, memory-bound time, launch overhead, weight bytes) of one op in a step."""
    k = profile.kernel
    c, m = roofline_seconds(op, device, profile, nb.weight)
    launch = op.launches * (k.graph_launch_s if in_graph else k.launch_s)
    return (max(c, m) + launch, max(c, m) if c > m else 0.0, max(c, m) if c <= m else 0.0, launch,
            op.weight_bytes)


def step_cost(arch: Architecture, p: Pass, device, profile, nb: Numerics, graph: bool | str = False) -> StepCost:
    """Time of one engine step running pass ``p``.

    ``graph``: False (eager), True (a full CUDA graph: graph launch costs, no per-layer Python) or
    ``"piecewise"`` (vLLM's piecewise graphs for mixed / prefill steps of at most the largest
    capture size in tokens: graph launch costs except for the attention core, which runs eagerly
    between the pieces, and the per-layer overhead stays).

    Identical blocks have identical ops: each distinct block's op terms are computed once (a
    NemotronH-56B step has 118 blocks of a few kinds), then summed over the layers in order.
    """
    k = profile.kernel
    layer_oh = 0.0 if graph is True else k.layer_overhead_s
    seqs = p.seqs
    sub_oh = [0.0 if graph is True else sub_block_overhead(b, k, seqs) for b in arch.blocks]
    blocks = [0.0] * arch.num_layers
    head = comp = mem = wbytes = 0.0
    overhead = k.step_overhead_s + layer_oh * _executed_blocks(arch) + sum(sub_oh)

    def terms(ops: list[Op]) -> list[tuple[float, float, float, float, float]]:
        return [_op_terms(op, device, profile, nb, graph is True or (graph == "piecewise" and op.cls != "attention"))
                for op in ops]

    for t, c, m, launch, w in terms(model_ops(arch, p, nb)):
        comp += c
        mem += m
        overhead += launch
        wbytes += w
        head += t
    per_block: dict = {}
    for i, b in enumerate(arch.blocks):
        rows = per_block.get(b)
        if rows is None:
            rows = per_block[b] = terms(block_ops(arch, b, p, nb))
        for t, c, m, launch, w in rows:
            comp += c
            mem += m
            overhead += launch
            wbytes += w
            blocks[i] += t
    for i, b in enumerate(arch.blocks):
        if b.mixer is not None or b.ffn is not None:
            blocks[i] += layer_oh + sub_oh[i]
    total = sum(blocks) + head + k.step_overhead_s
    return StepCost(total, tuple(blocks), head, overhead, comp, mem, wbytes)


def _sum_max_affine(c1: float, s1: float, c2: float, s2: float, lo: int, hi: int) -> float:
    """Exact sum over integers x in [lo, hi] of max(c1 + s1*x, c2 + s2*x)."""
    def series(c, s, a, b):  # sum_{x=a}^{b} c + s*x
        n = b - a + 1
        return 0.0 if n <= 0 else n * c + s * (a + b) * n / 2.0
    if hi < lo:
        return 0.0
    if s1 == s2:
        return series(max(c1, c2), s1, lo, hi)
    xc = (c2 - c1) / (s1 - s2)  # lines cross here; line 1 wins for x > xc iff s1 > s2
    split = min(max(math.floor(xc), lo - 1), hi)
    left, right = ((c2, s2), (c1, s1)) if s1 > s2 else ((c1, s1), (c2, s2))
    return series(*left, lo, split) + series(*right, split + 1, hi)


def decode_sum(arch: Architecture, seqs: float, kv_lo: int, kv_hi: int, device, profile, nb: Numerics,
               graph: bool = False, shared: float = 0.0) -> float:
    """Exact sum of decode step times for KV lengths kv_lo..kv_hi (inclusive), in closed form;
    ``shared``: the first KV tokens every sequence shares (prefix cache, ``Segment.shared``).

    Between sliding-window breakpoints every op's FLOPs and bytes are affine in the KV length, so
    its time is the max of two affine functions plus a constant; each piece sums in closed form.
    """
    if kv_hi < kv_lo:
        return 0.0
    # a window's shared-prefix rows also stop being affine where the prefix slides out (window + shared)
    windows = {b.mixer.sliding_window for b in arch.blocks if isinstance(b.mixer, Attention) and b.mixer.sliding_window}
    cuts = sorted({x for w in windows for x in ((w, w + int(shared)) if shared else (w,)) if kv_lo <= x < kv_hi})
    bounds, lo = [], kv_lo
    for w in cuts:
        bounds.append((lo, w))
        lo = w + 1
    bounds.append((lo, kv_hi))
    k = profile.kernel
    launch = k.graph_launch_s if graph else k.launch_s
    const = k.step_overhead_s + (0.0 if graph else k.layer_overhead_s * _executed_blocks(arch)
                                 + sum(sub_block_overhead(b, k, seqs) for b in arch.blocks))
    total = 0.0
    for a, b in bounds:
        pa, pb = Pass.decode(seqs, a, shared), Pass.decode(seqs, a + 1, shared)

        def sums(ops_a: list[Op], ops_b: list[Op]) -> list[float]:
            out = []
            for oa, ob in zip(ops_a, ops_b):
                ca, ma = roofline_seconds(oa, device, profile, nb.weight)
                cb, mb = roofline_seconds(ob, device, profile, nb.weight)
                # x = L - a: time = max(ca + (cb-ca) x, ma + (mb-ma) x)
                out.append(_sum_max_affine(ca, cb - ca, ma, mb - ma, 0, b - a) + (b - a + 1) * oa.launches * launch)
            return out

        for term in sums(model_ops(arch, pa, nb), model_ops(arch, pb, nb)):
            total += term
        per_block: dict = {}  # identical blocks, identical sums (``step_cost``)
        for blk in arch.blocks:
            rows = per_block.get(blk)
            if rows is None:
                rows = per_block[blk] = sums(block_ops(arch, blk, pa, nb), block_ops(arch, blk, pb, nb))
            for term in rows:
                total += term
        total += (b - a + 1) * const
    return total


def predict_workload(arch: Architecture, target, workload, profile=None, device=None,
                     limits: SchedulerLimits | None = None) -> WorkloadCost:
    """TTFT, TPOT, E2E and throughput of one workload (semantics in the module docstring).

    ``limits`` overrides vLLM's default max_num_batched_tokens / max_num_seqs.
    """
    device = device or resolve_device(target.hardware)
    profile = profile or load_profile(target.profile, device, target.engine)
    nb = Numerics.from_target(target)
    plan = workload_plan(target, workload, device, profile, limits)
    n_in, n_out, c = workload.input_tokens, workload.output_tokens, workload.concurrency
    prefill = sum(step_cost(arch, p, device, profile, nb, g).total_s * n for p, n, g in plan.prefill)
    ttft = plan.fixed_s + prefill
    graph = plan.decode_graph
    if plan.mode == "batch":
        decode_total = decode_sum(arch, plan.decode_seqs, plan.kv_lo, plan.kv_hi, device, profile, nb, graph,
                                  plan.shared)
        e2e = plan.waves * (ttft + decode_total)
        tpot = decode_total / plan.decode_steps if plan.decode_steps else 0.0
    else:
        tpot = step_cost(arch, plan.mean_pass, device, profile, nb, graph).total_s
        e2e = ttft + (decode_total := plan.decode_steps * tpot)
    throughput = c * n_out / e2e
    q, ctx, chunk = plan.prefill_tokens, n_in - plan.prefill_tokens, plan.chunk
    mean = step_cost(arch, plan.mean_pass, device, profile, nb, graph)
    seqs = plan.mean_pass.segments[0].seqs  # decoding sequences per step (per wave in batch mode)
    pre = step_cost(arch, Pass.prefill(plan.group, min(q, chunk), ctx, shared=plan.shared), device, profile, nb)
    first = step_cost(arch, plan.decode_pass(n_in + 1), device, profile, nb, graph).total_s
    last = step_cost(arch, plan.decode_pass(n_in + max(n_out - 1, 1)), device, profile, nb, graph).total_s
    return WorkloadCost(
        workload=workload.name, mode=workload.mode, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, throughput_tok_s=throughput,
        prefill_s=prefill, prefill_tokens=q, decode_first_s=first, decode_last_s=last,
        layer_shares=tuple(t / mean.total_s for t in mean.block_s), head_share=mean.head_s / mean.total_s,
        overhead_share=mean.overhead_s / mean.total_s, weight_bytes_per_step=mean.weight_bytes,
        decode_bound=mean.bound, prefill_bound=pre.bound, cuda_graphs=graph, device=device.name,
        profile=profile.name, profile_source=profile.source, fixed_s=plan.fixed_s, decode_s=decode_total, waves=plan.waves,
    )


def decode_floor(arch: Architecture, target, workload, device=None) -> float:
    """Physical floor of one decode step (seconds): bytes that must move / peak bandwidth.

    Bytes = weights read by a decode step of the workload's concurrency (per GPU; MoE: the
    distinct experts touched; LM head; embedding rows gathered) + the KV cache read at the first
    decode step (KV length in + 1, sliding windows capped; a cached prefix once, not per sequence)
    + Mamba states read. No efficiency
    factor, no launches, no engine overhead: nothing can beat it.
    """
    device = device or resolve_device(target.hardware)
    nb = Numerics.from_target(target)
    c, L = workload.concurrency, workload.input_tokens + 1
    p = Pass.decode(c, L)
    weights = sum(op.weight_bytes for _, op in _ops(arch, p, nb))
    shared = cached_tokens(workload, target.engine, device) if kv_block_size(target.engine, device) else 0
    state = 0.0
    for b in arch.blocks:
        m = b.mixer
        if isinstance(m, Attention):
            # a prefix in shared blocks must move once, not once per sequence
            rows = c * kv_read_tokens(1, L - 1, m.sliding_window) - (c - 1) * shared_read_tokens(
                1, L - 1, shared, m.sliding_window)
            state += 2 * m.kv_heads * m.head_dim / nb.tp * nb.kvb * rows
        elif isinstance(m, Mamba2):
            conv_ch = m.d_inner + 2 * m.groups * m.state_size
            state += c * nb.a * ((m.conv_kernel - 1) * conv_ch + m.heads * m.head_dim * m.state_size) / nb.tp
    return (weights + state) / device.bandwidth_bytes_s
