"""The engine interface without an engine: definitions, prompts, derived settings, lazy imports."""

from __future__ import annotations

import math
import subprocess
import sys

import _enginekit as ek
import numpy as np
import pytest

from autocompress.measure.engines.adapters import ADAPTERS
from autocompress.measure.engines.base import EngineLimits, RunSettings, Sample, derive_limits, percentile
from autocompress.measure.engines.base import Memory, prompt_batch, shared_prefix, summarize
from autocompress.lang.model import ENGINES

MEM = Memory(None, 1, 0, None, 1, 1)


def test_every_engine_the_grammar_accepts_has_an_adapter():
    assert set(ADAPTERS) == set(ENGINES)


def test_importing_the_engines_imports_no_engine():
    code = ("import sys, autocompress, autocompress.measure.engines.adapters; "
            "print(any(m in sys.modules for m in ('vllm', 'torch', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("p, want", [(0, 1.0), (50, 2.5), (100, 4.0), (90, 3.7)])
def test_percentile_interpolates_between_ranks_like_numpy(p, want):
    assert percentile([4.0, 1.0, 3.0, 2.0], p) == pytest.approx(want)
    assert percentile([4.0, 1.0, 3.0, 2.0], p) == pytest.approx(np.percentile([4, 1, 3, 2], p))


def test_prompts_draw_ids_below_the_vocab_and_share_the_prefix():
    rng = np.random.default_rng(0)
    w = ek.workload(n_in=100, h=0.9)
    prefix = shared_prefix(rng, w, vocab=50)
    assert len(prefix) == 90
    batch = prompt_batch(rng, 3, 100, 50, prefix)
    assert all(len(p) == 100 and p[:90] == prefix for p in batch)
    assert all(0 <= t < 50 for p in batch for t in p)
    assert len({tuple(p[90:]) for p in batch}) == 3  # distinct tails
    assert shared_prefix(rng, ek.workload(h=0.0), 50) == []
    assert len(shared_prefix(rng, ek.workload(n_in=10, h=1.0), 50)) == 9  # the last token is always computed


def test_prompts_are_seeded():
    a = prompt_batch(np.random.default_rng(7), 2, 16, 1000)
    assert a == prompt_batch(np.random.default_rng(7), 2, 16, 1000)


def test_tpot_is_decode_time_per_token_after_the_first():
    s = Sample(ttft_s=0.5, e2e_s=2.5, output_tokens=5, input_tokens=8)
    assert s.tpot_s == pytest.approx(0.5)
    assert Sample(0.5, 0.5, 1, 8).tpot_s == 0.0


def _summary(mode: str, samples):
    w = ek.workload(mode, c=2, n_in=8, n_out=5)
    elapsed = sum(s.e2e_s for s in samples) if mode == "batch" else 4.0
    return w, summarize(engine="x", versions=(("x", "1"),), device="cpu", workload=w, samples=samples,
                        elapsed_s=elapsed, warmup=1, memory=MEM, method="m")


@pytest.mark.parametrize("mode", ["batch", "serve"])
def test_summary_is_consistent(mode):
    samples = [Sample(0.1 * i, 1.0 + 0.5 * i, 5, 8) for i in range(1, 6)]
    w, m = _summary(mode, samples)
    ek.check_consistent(m, w, requests=5)
    assert m.ttft_s == pytest.approx(0.3) and m.e2e_s == pytest.approx(2.5)
    tokens = 5 * 5 * (2 if mode == "batch" else 1)  # a batch sample is the whole batch of c = 2
    assert m.throughput_tok_s == pytest.approx(tokens / m.elapsed_s)
    assert m.percentile("e2e_s", 99) == pytest.approx(percentile([s.e2e_s for s in samples], 99))


def test_serve_requests_default_to_two_rounds_at_least_four():
    assert RunSettings().serve_requests(1) == 4
    assert RunSettings().serve_requests(8) == 16
    assert RunSettings(requests=3).serve_requests(8) == 3


def test_limits_come_from_our_derivation():
    arch = ek.kit.hetero_arch(vocab=ek.VOCAB)
    wls = [ek.workload("serve", c=3, n_in=100, n_out=20), ek.workload("batch", c=2, n_in=50, n_out=10, h=0.5)]
    lim = derive_limits(arch, ek.cpu_target(), wls)
    assert lim == EngineLimits(max_num_seqs=3, max_num_batched_tokens=2048, max_model_len=136, kv_space_gib=1,
                               enforce_eager=True, prefix_caching=True)
    gpu = derive_limits(arch, ek.cpu_target().__class__(hardware="rtx-4090", engine="vllm", weight_precision="bf16",
                                                       kv_precision="bf16"), wls[:1])
    # CUDA graphs on a GPU (the cost model charges graph replay there), eager on the CPU
    assert gpu.kv_space_gib is None and not gpu.prefix_caching and gpu.max_num_seqs == 3 and not gpu.enforce_eager
    assert derive_limits(arch, ek.cpu_target(), wls, enforce_eager=False).enforce_eager is False


def test_limits_reserve_whole_gib_of_kv_on_cpu():
    # 200 sequences x 4096 tokens of the tiny model's KV (fp32, 16-token pages): several GiB, rounded up
    arch = ek.kit.hetero_arch(vocab=ek.VOCAB)
    from autocompress.cost.memory import kv_cache_bytes

    w = ek.workload("serve", c=200, n_in=4000, n_out=96)
    need = kv_cache_bytes(arch, 200, 4096, 4, 4, 1, 16)
    lim = derive_limits(arch, ek.cpu_target(), [w])
    assert lim.kv_space_gib == math.ceil(need / (1 << 30)) > 1


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_adapters_satisfy_the_protocol_without_loading(name):
    from autocompress.measure.engines.base import Engine
    from autocompress.measure.engines.adapters import open_engine

    eng = open_engine(name)
    assert isinstance(eng, Engine) and eng.name == name
