"""The serve workload's closed loop keeps c requests in flight while it samples to the SE target
(``VLLMEngine._serve``), on a scripted engine: no vLLM needed."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

np = pytest.importorskip("numpy")

from autocompress.measure.engines.base import RunSettings, Ticker  # noqa: E402
from autocompress.measure.engines.vllm_engine import VLLMEngine  # noqa: E402
from autocompress.lang.model import Workload  # noqa: E402


class LockstepEngine:
    """vLLM's ``LLMEngine`` as the closed loop sees it: every request in flight gets one token per
    step and finishes after ``n_out``; it records how many were in flight at each step."""

    def __init__(self, n_out: int):
        self.n_out, self.left, self.batches = n_out, {}, []

    def add_request(self, rid, prompt, params):
        self.left[rid] = self.n_out

    def has_unfinished_requests(self) -> bool:
        return bool(self.left)

    def step(self):
        self.batches.append(len(self.left))
        outs = []
        for rid in list(self.left):
            self.left[rid] -= 1
            done = self.left[rid] == 0
            outs.append(SimpleNamespace(request_id=rid, outputs=[SimpleNamespace(token_ids=[7])], finished=done,
                                        num_cached_tokens=0, metrics=None))
            if done:
                del self.left[rid]
        return outs


@dataclass(frozen=True)
class Scripted(RunSettings):
    """Sampling that asks for more until ``until`` samples are done, as a noisy host's SE would."""
    until: int = 10

    def more(self, samples, elapsed_s, minimum):
        return len(samples) < max(minimum, self.until)


def _serve(c: int, n_out: int, settings: RunSettings):
    eng = object.__new__(VLLMEngine)
    fake = LockstepEngine(n_out)
    eng.llm, eng.vocab = SimpleNamespace(llm_engine=fake), 100
    eng.limits = SimpleNamespace(prefix_caching=False)
    eng._params = lambda n, delta=False: None
    w = Workload(name="shared", concurrency=c, mode="serve", input_tokens=8, output_tokens=n_out, prefix_cache=0.0)
    samples, _, warm, _ = eng._serve(w, np.random.default_rng(0), [], settings, Ticker(None, 0))
    return samples, fake.batches, warm


def test_sampling_past_the_minimum_adds_whole_rounds():
    # the minimum is 2 rounds of 4; the SE "asks" for more until 10 samples: a per-request decision
    # started a third round, then two requests of a fourth, which decoded as a batch of 2
    samples, batches, _ = _serve(4, 3, Scripted(warmup=0, requests=8, target_se=0.02, until=10))
    assert len(samples) == 12 and all(s.output_tokens == 3 for s in samples)
    assert batches == [4] * 9  # three rounds of three steps, every one with 4 in flight


def test_a_fixed_count_is_rounded_up_to_whole_rounds_after_the_warm_up_round():
    samples, batches, warm = _serve(3, 2, RunSettings(warmup=1, requests=7, target_se=None))
    assert len(samples) == 9 and warm == 3  # 7 asked: three whole rounds of 3
    assert batches == [3, 3] + [3] * 6  # the warm-up round, then three timed rounds, every step with 3 in flight
