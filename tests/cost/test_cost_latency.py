"""Workload semantics (batch vs serve, prefix cache, TP, exact decode sums) and the SmolLM2 sanity band."""

import math

import pytest
from _costkit import attn, mlp, target, tiny, workload

from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.latency import decode_floor, decode_sum, predict_workload, step_cost
from autocompress.cost.profile import load_profile
from autocompress.cost.roofline import Numerics, Pass, Segment, block_ops, model_ops
from autocompress.ir import Architecture, Attention, Block, MLP

BF16 = Numerics("bf16", "bf16", 1)
ARCH = tiny([Block(attn(kv=2), mlp(256)), Block(attn(kv=1, window=64), mlp(128))])


def brute_decode(arch, seqs, lo, hi, dev, prof, nb, graph):
    return sum(step_cost(arch, Pass.decode(seqs, L), dev, prof, nb, graph).total_s for L in range(lo, hi + 1))


@pytest.mark.parametrize("seqs,lo,hi", [(1, 10, 90), (16, 60, 70), (300, 1, 80), (4, 100, 99)])
@pytest.mark.parametrize("hw", ["h100-sxm", "cpu", "l4"])
def test_decode_sum_is_exact(seqs, lo, hi, hw):
    dev = HARDWARE[hw]
    prof = load_profile(None, dev, "vllm")
    nb = Numerics("fp32" if hw == "cpu" else "bf16", "fp32" if hw == "cpu" else "bf16")
    for graph in (False, True):
        assert decode_sum(ARCH, seqs, lo, hi, dev, prof, nb, graph) == pytest.approx(
            brute_decode(ARCH, seqs, lo, hi, dev, prof, nb, graph), rel=1e-9)


def test_batch_semantics(h100, gpu_vllm):
    w = workload(c=4, mode="batch", i=100, o=10)
    r = predict_workload(ARCH, target(), w, gpu_vllm)
    prefill = step_cost(ARCH, Pass.prefill(4, 100), h100, gpu_vllm, BF16, "piecewise").total_s  # 400 <= 512 tokens
    assert r.ttft_s == pytest.approx(gpu_vllm.kernel.prefill_fixed_s + prefill)
    decode = brute_decode(ARCH, 4, 101, 109, h100, gpu_vllm, BF16, True)  # 9 steps at KV 101..109
    assert r.e2e_s == pytest.approx(r.ttft_s + decode)
    assert r.tpot_s == pytest.approx(decode / 9)
    assert r.throughput_tok_s == pytest.approx(4 * 10 / r.e2e_s)
    assert r.cuda_graphs and r.prefill_tokens == 100
    assert r.decode_first_s <= r.decode_last_s


def test_graph_modes(h100, gpu_vllm):
    p = Pass.prefill(2, 100)
    eager, piece, full = (step_cost(ARCH, p, h100, gpu_vllm, BF16, g) for g in (False, "piecewise", True))
    k = gpu_vllm.kernel
    ops = block_ops(ARCH, ARCH.blocks[0], p, BF16) + block_ops(ARCH, ARCH.blocks[1], p, BF16) + model_ops(ARCH, p, BF16)
    launches = sum(op.launches for op in ops)
    attn_launches = 2 * 2  # the attention core (2 launches) in each of the 2 blocks stays eager
    assert eager.total_s - piece.total_s == pytest.approx((launches - attn_launches) * (k.launch_s - k.graph_launch_s))
    assert piece.total_s - full.total_s == pytest.approx(attn_launches * (k.launch_s - k.graph_launch_s)
                                                         + 2 * k.layer_overhead_s)


def test_batch_prefill_is_chunked_by_max_num_batched_tokens(h100, gpu_vllm):
    # offline H100 budget is 16384 tokens: 40 x 1000 tokens -> 3 steps of 40/3 prompts
    r = predict_workload(ARCH, target(), workload(c=40, i=1000, o=2), gpu_vllm)
    step = step_cost(ARCH, Pass.prefill(40 / 3, 1000), h100, gpu_vllm, BF16).total_s
    assert r.prefill_s == pytest.approx(3 * step)
    # one prompt longer than the budget: chunks at growing context, logits in the last one
    r = predict_workload(ARCH, target(), workload(c=1, i=20000, o=2), gpu_vllm)
    steps = [step_cost(ARCH, Pass((Segment(1, 10000, 10000 * j, float(j == 1)),)), h100, gpu_vllm, BF16).total_s
             for j in range(2)]
    assert r.prefill_s == pytest.approx(sum(steps))


def test_batch_beyond_max_num_seqs_runs_in_waves(gpu_vllm):
    # offline H100 default: 1024 sequences per step
    one = predict_workload(ARCH, target(), workload(c=1024, i=100, o=10), gpu_vllm)
    two = predict_workload(ARCH, target(), workload(c=2048, i=100, o=10), gpu_vllm)
    assert two.e2e_s == pytest.approx(2 * one.e2e_s) and two.tpot_s == pytest.approx(one.tpot_s)
    assert two.throughput_tok_s == pytest.approx(one.throughput_tok_s)


def test_serve_semantics(h100, gpu_vllm):
    """Staggered clients (a budget that fits one prompt per step: g = 1): one prefill mixed with
    c - 1 decodes, each decode step carrying (c-1)/out of a prefill (cost.schedule)."""
    from autocompress.catalog.engines import SchedulerLimits

    c, i, o = 8, 200, 50
    r = predict_workload(ARCH, target(), workload(c=c, mode="serve", i=i, o=o), gpu_vllm,
                         limits=SchedulerLimits(300, 256))
    mean_kv = i + o / 2
    share = (c - 1) / o
    step = Pass.decode(c, mean_kv) + Pass((Segment(share, i, 0, share),))
    assert r.tpot_s == pytest.approx(step_cost(ARCH, step, h100, gpu_vllm, BF16, graph=True).total_s)
    ttft_step = Pass.prefill(1, i) + Pass.decode(c - 1, mean_kv)
    assert r.ttft_s == pytest.approx(gpu_vllm.kernel.prefill_fixed_s
                                     + step_cost(ARCH, ttft_step, h100, gpu_vllm, BF16, "piecewise").total_s)
    assert r.e2e_s == pytest.approx(r.ttft_s + (o - 1) * r.tpot_s)
    assert r.throughput_tok_s == pytest.approx(c * o / r.e2e_s)
    # a single client is plain decoding at the mean context
    one = predict_workload(ARCH, target(), workload(c=1, mode="serve", i=i, o=o), gpu_vllm)
    assert one.tpot_s == pytest.approx(step_cost(ARCH, Pass.decode(1, mean_kv), h100, gpu_vllm, BF16, True).total_s)


def test_serve_in_lockstep_waits_for_the_whole_group(h100, gpu_vllm):
    """H100's server budget (8192 tokens) prefills all 8 prompts in one step: every request's TTFT is
    that step, and the decode steps carry no prefill."""
    c, i, o = 8, 200, 50
    r = predict_workload(ARCH, target(), workload(c=c, mode="serve", i=i, o=o), gpu_vllm)
    prefill = step_cost(ARCH, Pass.prefill(c, i), h100, gpu_vllm, BF16, False).total_s  # 1600 > 512: eager
    assert r.ttft_s == pytest.approx(gpu_vllm.kernel.prefill_fixed_s + prefill)
    assert r.tpot_s == pytest.approx(step_cost(ARCH, Pass.decode(c, i + o / 2), h100, gpu_vllm, BF16, True).total_s)
    assert r.e2e_s == pytest.approx(r.ttft_s + (o - 1) * r.tpot_s)


def test_prefix_cache_halves_prefilled_tokens(h100, gpu_vllm):
    r = predict_workload(ARCH, target(), workload(c=1, i=1000, o=2, h=0.5), gpu_vllm)
    assert r.prefill_tokens == 504  # vLLM caches whole 16-token blocks: 31 of them (496 tokens)
    # 504 new tokens attend to the 496 cached ones too
    step = step_cost(ARCH, Pass.prefill(1, 504, 496), h100, gpu_vllm, BF16, "piecewise").total_s
    assert r.prefill_s == pytest.approx(step)
    full = predict_workload(ARCH, target(), workload(c=1, i=1000, o=2), gpu_vllm)
    assert r.prefill_s < full.prefill_s
    # all cached but the last, partial block (96 of 100 tokens)
    assert predict_workload(ARCH, target(), workload(i=100, o=2, h=1.0), gpu_vllm).prefill_tokens == 4
    # transformers has no paged cache: the share itself, less the last token
    tf = load_profile(None, h100, "transformers")
    assert predict_workload(ARCH, target(engine="transformers"), workload(i=100, o=2, h=1.0), tf).prefill_tokens == 1


def test_tensor_parallel_halves_weight_reads(gpu_vllm):
    arch = tiny([Block(attn(kv=4), mlp(4096))] * 4)
    one = predict_workload(arch, target(tp=1), workload(c=1, i=100, o=20), gpu_vllm)
    two = predict_workload(arch, target(tp=2), workload(c=1, i=100, o=20), gpu_vllm)
    replicated = 2 * 64 * (1 + 2 * 4 + 1)  # gathered embedding row, 2 norms per block, final norm
    assert two.weight_bytes_per_step == pytest.approx((one.weight_bytes_per_step - replicated) / 2 + replicated)
    assert two.tpot_s > one.tpot_s  # so tiny a model is launch-bound: the all-reduces cost more than they save


def test_transformers_engine_has_no_graphs_or_chunking():
    dev = HARDWARE["h100-sxm"]
    prof = load_profile(None, dev, "transformers")
    r = predict_workload(ARCH, target(engine="transformers"), workload(c=1, i=20000, o=3), prof)
    assert not r.cuda_graphs and r.profile == "gpu-transformers-default"
    assert r.prefill_s == pytest.approx(step_cost(ARCH, Pass.prefill(1, 20000), dev, prof, BF16).total_s)


def smollm2() -> Architecture:
    blk = Block(Attention(9, 3, 64), MLP(1536))
    return Architecture("llama", 49152, 576, 9, 64, True, (blk,) * 30, name="smollm2-135m")


def test_smollm2_decode_floor_and_band():
    arch = smollm2()
    assert arch.params() == 134_515_008
    t, w = target("h100-sxm"), workload(c=1, mode="serve", i=512, o=64)
    # weights read per step: every block, the final norm, the tied head, one gathered row (bf16)
    weights = 2 * (arch.params() + 576)
    kv = 30 * 2 * 3 * 64 * 2 * 513  # 30 layers, K and V, 3 kv heads x 64, bf16, KV length in + 1
    floor = decode_floor(arch, t, w)
    assert floor == pytest.approx((weights + kv) / 3.35e12, rel=1e-12)
    assert 80e-6 < floor < 90e-6  # ~270 MB / 3.35 TB/s
    r = predict_workload(arch, t, w)
    assert floor <= r.tpot_s < 5e-3  # engine overheads dominate at batch 1
    assert r.decode_bound == "overhead" and r.profile_source == "default"
    assert sum(r.layer_shares) + r.head_share == pytest.approx(1 - 5e-4 / r.tpot_s)  # rest: step overhead


def test_long_outputs_are_cheap_to_predict():
    import time
    arch = smollm2()
    t0 = time.perf_counter()
    r = predict_workload(arch, target("h200"), workload(c=64, i=1024, o=32768))
    assert time.perf_counter() - t0 < 0.3
    assert math.isfinite(r.e2e_s) and r.decode_last_s > r.decode_first_s


def test_serial_fraction_adds_the_unhidden_side_and_keeps_sums_exact():
    """op time = max(c, m) + s * min(c, m); the closed-form decode sum stays exact with it."""
    from dataclasses import replace

    from autocompress.cost.roofline import Op, op_time, roofline_seconds

    dev = HARDWARE["cpu"]
    loaded = load_profile(None, dev, "vllm")
    prof = replace(loaded, kernel=replace(loaded.kernel, serial_fraction=0.0))
    serial = replace(prof, kernel=replace(prof.kernel, serial_fraction=0.4))
    nb = Numerics("fp32", "fp32")
    op = Op("g", 3e8, 2e6, 1.0, "gemm", 2e6)
    c, m = roofline_seconds(op, dev, prof, "fp32")
    assert op_time(op, dev, serial, "fp32") - op_time(op, dev, prof, "fp32") == pytest.approx(0.4 * min(c, m))
    for seqs, lo, hi in ((1, 10, 90), (8, 100, 140)):
        got = decode_sum(ARCH, seqs, lo, hi, dev, serial, nb, False)
        assert got == pytest.approx(brute_decode(ARCH, seqs, lo, hi, dev, serial, nb, False), rel=1e-9)
        assert got > decode_sum(ARCH, seqs, lo, hi, dev, prof, nb, False)
