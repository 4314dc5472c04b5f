"""The transformers adapter on a tiny heterogeneous DeciLM export (fast: seconds on two cores)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import _enginekit as ek  # noqa: E402

from autocompress.measure.engines.base import EngineLimits, RunSettings
from autocompress.measure.engines.adapters import open_engine

# one thread: on a shared two-core runner, OpenMP's spin-waiting with two threads stalls for seconds
ONE_THREAD = EngineLimits(max_num_seqs=2, max_num_batched_tokens=64, max_model_len=64, threads=1)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    ckpt, _, ref = ek.tiny_checkpoint(tmp_path_factory.mktemp("hf-engine"))
    with open_engine("transformers").load(ckpt, ek.cpu_target("transformers"), ONE_THREAD) as eng:
        yield eng, ref


@pytest.mark.parametrize("mode, settings, n", [("batch", RunSettings(warmup=1, iterations=3), 3),
                                               ("serve", RunSettings(warmup=1, requests=5), 5)])
def test_measurement_follows_the_definitions(engine, mode, settings, n):
    eng, _ = engine
    w = ek.workload(mode, c=2, n_in=24, n_out=6)
    m = eng.run(w, seed=0, settings=settings)
    ek.check_consistent(m, w, requests=n)
    assert m.engine == "transformers" and dict(m.versions).keys() >= {"torch", "transformers"}
    assert m.memory.weights_bytes == sum(p.numel() * 4 for p in eng.model.parameters())
    if mode == "serve":  # waves of c = 2, the last one of a single request; a wave's requests share times
        assert [s.e2e_s for s in m.samples[:2]] == [m.samples[0].e2e_s] * 2
        assert m.warmup == 2


def test_greedy_tokens_equal_the_reference_model(engine):
    import torch

    eng, ref = engine
    prompts = [[5, 17, 300, 42, 7, 99], [11, 12, 13, 14, 15, 16]]
    ref.generation_config.eos_token_id = None
    with torch.no_grad():
        want = ref.generate(torch.tensor(prompts), max_new_tokens=8, do_sample=False)[:, 6:].tolist()
    assert eng.generate(prompts, 8) == want
