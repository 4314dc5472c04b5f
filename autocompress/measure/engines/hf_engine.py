"""transformers ``generate`` (eager / SDPA), measured with the same definitions as the vLLM adapter.

**batch**: B = concurrency prompts of ``input`` random ids in one ``generate`` (greedy, EOS
ignored, exactly ``output`` new tokens); a streamer stamps each step: TTFT = wall time from the
call to the first generated token (the prefill step), E2E = to the end of ``generate``; warm-up
then timed iterations, a fresh random batch each time.

**serve**: transformers has no continuous batching. c clients in a closed loop are served as
sequential batches of c requests (one ``generate`` per wave; every request of a wave arrives at
its start): per-request TTFT and E2E are the wave's; requests = max(4, 2c) by default.

**prefix_cache** h: prompts share their first round(h * input) tokens, but ``generate`` has no
prefix cache across calls: every token is prefilled (recorded, not emulated).

**memory**: RSS increase (peak, from before loading to after the runs); on GPU also torch's peak
allocation. Weights = parameter bytes; the dynamic KV cache reserves nothing ahead.

**threads**: ``EngineLimits.threads`` sets torch's CPU threads (process-wide); on a busy two-core
host 1 thread ran the tiny test model 50x faster than 2 (OpenMP spin-waits).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from autocompress.catalog.hardware import resolve_device
from autocompress.measure.engines.base import (EngineLimits, Memory, Measurement, RunSettings, Sample, Ticker, host_device, model_vocab, package_versions, peak_rss_bytes, prompt_batch, reset_peak_rss, rss_bytes, shared_prefix, summarize)
from autocompress.modeling.register import causal_lm_class, register

_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class _StepClock:
    """A ``BaseStreamer``-shaped hook: generate calls ``put`` with the prompt, then once per step."""

    def __init__(self):
        self.stamps: list[float] = []

    def put(self, value) -> None:
        self.stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


class HFEngine:
    name = "transformers"

    def __init__(self, attn_implementation: str = "sdpa"):
        self.attn = attn_implementation
        self.model = None

    def load(self, model_dir, target, limits: EngineLimits | None = None) -> "HFEngine":
        import torch

        register()  # our DeciLM classes, in this process: the export's own code, without trust_remote_code

        if target.weight_precision not in _DTYPES:
            raise ValueError(f"transformers adapter: precision {target.weight_precision!r} not supported "
                             f"(allowed: {', '.join(_DTYPES)})")
        self.kind = resolve_device(target.hardware).kind
        self.limits, self.vocab = limits, model_vocab(model_dir)
        if self.kind == "cpu" and limits is not None and limits.threads:
            torch.set_num_threads(limits.threads)
        self._rss0 = rss_bytes()
        reset_peak_rss()
        t0 = time.perf_counter()
        dtype = getattr(torch, _DTYPES[target.weight_precision])
        # Gemma 3 hetero: our class, in-process; DeciLM / NemotronH-Puzzle: the Auto classes after register()
        model = causal_lm_class(model_dir).from_pretrained(Path(model_dir), dtype=dtype, trust_remote_code=False,
                                                           attn_implementation=self.attn)
        self.dev = torch.device("cuda" if self.kind == "gpu" else "cpu")
        self.model = model.to(self.dev).eval()
        self.model.generation_config.eos_token_id = None  # ignore_eos
        self.model.generation_config.pad_token_id = 0
        self.load_s = time.perf_counter() - t0
        self._rss_loaded = rss_bytes() - self._rss0
        self._weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.versions = package_versions("transformers", "torch")
        self.device = host_device(self.kind)
        self.settings = (("dtype", _DTYPES[target.weight_precision]), ("attn_implementation", self.attn),
                         ("threads", torch.get_num_threads()))
        return self

    def close(self) -> None:
        self.model = None

    def __enter__(self) -> "HFEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def generate(self, prompts: list[list[int]], max_tokens: int, clock: _StepClock | None = None):
        """Greedy continuations of equal-length token-id prompts, exactly ``max_tokens`` new tokens."""
        import torch

        ids = torch.tensor(prompts, device=self.dev)
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                      min_new_tokens=max_tokens, do_sample=False, streamer=clock)
        return out[:, ids.shape[1]:].tolist()

    def _timed(self, prompts, n_out) -> tuple[float, float]:
        clock = _StepClock()
        if self.kind == "gpu":
            import torch

            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = self.generate(prompts, n_out, clock)
        t1 = time.perf_counter()
        assert all(len(o) == n_out for o in out)
        # stamps[0]: the prompt; stamps[1]: the first new token (end of the prefill step)
        return clock.stamps[1] - t0, t1 - t0

    def _memory(self) -> Memory:
        act = need = None
        if self.kind == "gpu":  # torch's peak on the device (weights, activations, the KV cache): the need
            import torch

            need = torch.cuda.max_memory_allocated()
            act = need - self._weights
        return Memory(engine_bytes=None, weights_bytes=self._weights, kv_reserved_bytes=0, activation_bytes=act,
                      rss_increase_bytes=peak_rss_bytes() - self._rss0, rss_after_load_bytes=self._rss_loaded,
                      need_bytes=need)

    def run(self, workload, seed: int = 0, settings: RunSettings = RunSettings(), tick=None) -> Measurement:
        assert self.model is not None, "load() first"
        rng = np.random.default_rng(seed)
        prefix = shared_prefix(rng, workload, self.vocab)
        c, n_in, n_out = workload.concurrency, workload.input_tokens, workload.output_tokens
        samples, elapsed = [], 0.0
        if workload.mode == "batch":
            ticker = Ticker(tick, settings.warmup + settings.iterations)  # one generate each
            for _ in range(settings.warmup):
                self._timed(prompt_batch(rng, c, n_in, self.vocab, prefix), n_out)
                ticker()
            while settings.more(samples, elapsed, settings.iterations):
                ttft, e2e = self._timed(prompt_batch(rng, c, n_in, self.vocab, prefix), n_out)
                samples.append(Sample(ttft, e2e, n_out, n_in))
                elapsed += e2e
                ticker()
            warm = settings.warmup
            method = ("batch: one generate of the batch; TTFT = time to the first streamer step after the prompt, "
                      "E2E = time to the end of generate")
        else:
            total = settings.serve_requests(c)
            ticker = Ticker(tick, settings.warmup * c + total)  # in requests; a wave of c at a time
            for _ in range(settings.warmup):
                self._timed(prompt_batch(rng, c, n_in, self.vocab, prefix), n_out)
                ticker(c)
            while settings.more(samples, elapsed, total):
                k = min(c, total - len(samples)) if len(samples) < total else c
                ttft, e2e = self._timed(prompt_batch(rng, k, n_in, self.vocab, prefix), n_out)
                samples += [Sample(ttft, e2e, n_out, n_in) for _ in range(k)]
                elapsed += e2e
                ticker(k)
            warm = settings.warmup * c
            method = ("serve: no continuous batching in transformers: sequential waves of c requests, one generate "
                      "each; a request's TTFT / E2E are its wave's")
        return summarize(engine=self.name, versions=self.versions, device=self.device, workload=workload,
                         samples=samples, elapsed_s=elapsed, warmup=warm, memory=self._memory(), method=method,
                         settings=self.settings)
