"""The engine's schedule of serve workloads (lockstep groups, the queueing of simultaneous arrivals)
and the shared-prefix KV read: the limits where they reduce to one prefill mixed with decodes and
one KV read per sequence, and the direction and size of each term."""

from dataclasses import replace

import pytest
from _costkit import attn, mlp, target, tiny, workload

from autocompress.catalog.engines import SchedulerLimits
from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.latency import decode_floor, decode_sum, predict_workload, step_cost
from autocompress.cost.profile import load_profile
from autocompress.cost.roofline import Numerics, Pass, block_ops, charged_bytes, shared_read_tokens
from autocompress.cost.schedule import cached_tokens, lockstep_group, workload_plan
from autocompress.ir import Architecture, Attention, Block, MLP

CPU = HARDWARE["cpu"]
FP32 = Numerics("fp32", "fp32")
ARCH = tiny([Block(attn(kv=2), mlp(256)), Block(attn(kv=1, window=64), mlp(128))])
SMOL = Architecture("llama", 49152, 576, 9, 64, True, (Block(Attention(9, 3, 64), MLP(1536)),) * 30, name="smollm2")
HOST = SchedulerLimits(2096, 12)  # what the engine runs the host example with (derive_limits)


def cpu_profile(reread: float = 1.0):
    prof = load_profile(None, CPU, "vllm")
    return replace(prof, kernel=replace(prof.kernel, shared_kv_reread=reread))


def chat(c: int, h: float = 0.95):
    return workload(c=c, mode="serve", i=2048, o=32, h=h, name="chat")


def test_lockstep_group_is_what_fits_one_step():
    assert lockstep_group(12, 128, 2096) == 12  # the host chat: 12 x 128 tokens in one step
    assert lockstep_group(12, 2048, 2096) == 1  # one 2K prompt per step, the rest decoding
    assert lockstep_group(12, 512, 2096) == 4  # 4 x 512 + 8 decodes <= 2096
    assert lockstep_group(1, 5000, 2096) == 1
    assert lockstep_group(7, 1, 10) == 7


def test_cached_prefix_comes_in_whole_blocks():
    w = chat(12)
    assert cached_tokens(w, "vllm", CPU) == 1920  # round(0.95 * 2048) = 1946 -> 15 blocks of 128
    assert cached_tokens(w, "vllm", HARDWARE["h100-sxm"]) == 1936  # 16-token blocks on GPU
    assert cached_tokens(w, "transformers", CPU) == 1946
    assert cached_tokens(chat(12, 0.0), "vllm", CPU) == 0


def test_one_client_without_prefix_is_the_model_of_before():
    """c = 1, no prefix: TTFT = one prefill, TPOT = one decode step at the mean context."""
    prof = cpu_profile(0.1)  # the shared-prefix term must not act without sharing
    w = workload(c=1, mode="serve", i=256, o=64)
    r = predict_workload(SMOL, target("cpu", w="fp32", kv="fp32"), w, prof, CPU, HOST)
    pre = step_cost(SMOL, Pass.prefill(1, 256), CPU, prof, FP32).total_s
    assert r.ttft_s == pytest.approx(prof.kernel.prefill_fixed_s + pre)
    assert r.tpot_s == pytest.approx(step_cost(SMOL, Pass.decode(1, 256 + 32), CPU, prof, FP32).total_s)
    # and one client with a prefix has nothing to share with
    one = predict_workload(SMOL, target("cpu", w="fp32", kv="fp32"), chat(1), prof, CPU, HOST)
    assert one.tpot_s == pytest.approx(predict_workload(SMOL, target("cpu", w="fp32", kv="fp32"), chat(1),
                                                        cpu_profile(1.0), CPU, HOST).tpot_s)


def test_simultaneous_arrivals_queue_for_the_group_prefill():
    """Every request of a lockstep group waits for the whole group's prefill: TTFT grows with c
    (about linearly once the prefill is compute-bound), and the decode steps carry no prefill."""
    prof, t = cpu_profile(), target("cpu", w="fp32", kv="fp32")
    ttft = {c: predict_workload(SMOL, t, chat(c), prof, CPU, HOST).ttft_s for c in (1, 2, 4, 8, 12)}
    assert list(ttft.values()) == sorted(ttft.values()) and len(set(ttft.values())) == 5
    assert ttft[12] / ttft[1] > 6
    r = predict_workload(SMOL, t, chat(12), prof, CPU, HOST)
    pre = step_cost(SMOL, Pass.prefill(12, 128, 1920, shared=1920), CPU, prof, FP32).total_s
    assert r.ttft_s == pytest.approx(prof.kernel.prefill_fixed_s + pre)
    decode = step_cost(SMOL, Pass.decode(12, 2048 + 16, 1920), CPU, prof, FP32).total_s
    assert r.tpot_s == pytest.approx(decode)
    # staggered clients (one 2K prompt per step) keep the steady state: decodes carry 11/32 of a prefill
    s = predict_workload(SMOL, t, chat(12, 0.0), prof, CPU, HOST)
    plan = workload_plan(t, chat(12, 0.0), CPU, prof, HOST)
    assert plan.group == 1 and plan.mean_pass.segments[1].seqs == pytest.approx(11 / 32)
    assert s.tpot_s > 3 * r.tpot_s


def test_shared_prefix_is_read_once_plus_its_rereads():
    seg_ops = block_ops(SMOL, SMOL.blocks[0], Pass.decode(12, 2048, 1920), FP32)
    core = next(op for op in seg_ops if op.name == "attn.core")
    plain = next(op for op in block_ops(SMOL, SMOL.blocks[0], Pass.decode(12, 2048), FP32) if op.name == "attn.core")
    assert core.bytes == plain.bytes and plain.reread_bytes == 0  # the loads are the same ...
    assert core.reread_bytes == pytest.approx(11 * 2 * 3 * 64 * 4 * 1920)  # ... 11 of them re-reads
    assert charged_bytes(core, cpu_profile(1.0)) == core.bytes
    assert charged_bytes(core, cpu_profile(0.0)) == pytest.approx(core.bytes - core.reread_bytes)
    t = target("cpu", w="fp32", kv="fp32")
    tpot = [predict_workload(SMOL, t, chat(12), cpu_profile(r), CPU, HOST).tpot_s for r in (1.0, 0.5, 0.0)]
    assert tpot[0] > tpot[1] > tpot[2]
    # the floor moves the prefix once
    assert decode_floor(SMOL, t, chat(12), CPU) < decode_floor(SMOL, t, chat(12, 0.0), CPU)


def test_shared_rows_inside_a_sliding_window():
    assert shared_read_tokens(1, 100, 50, None) == 50
    assert shared_read_tokens(1, 100, 50, 64) == 13  # rows 37..99 are read; 37..49 are shared
    assert shared_read_tokens(1, 100, 20, 64) == 0
    assert shared_read_tokens(1, 100, 500, None) == 100


@pytest.mark.parametrize("shared", [0, 40, 90])
def test_decode_sum_stays_exact_with_a_shared_prefix(shared):
    prof = cpu_profile(0.2)
    brute = sum(step_cost(ARCH, Pass.decode(6, L, shared), CPU, prof, FP32).total_s for L in range(91, 131))
    assert decode_sum(ARCH, 6, 91, 130, CPU, prof, FP32, False, shared) == pytest.approx(brute, rel=1e-9)


def test_gpu_targets_schedule_the_same_way(gpu_vllm):
    """vLLM on CUDA: the same groups (its server budget, 16-token blocks), the same shared term."""
    t = target()
    plan = workload_plan(t, workload(c=16, mode="serve", i=2048, o=64, h=0.95), HARDWARE["h100-sxm"], gpu_vllm)
    assert plan.group == 16 and plan.prefill_tokens == 112 and plan.shared == 1936
    lo = replace(gpu_vllm, kernel=replace(gpu_vllm.kernel, shared_kv_reread=0.1))
    w = workload(c=16, mode="serve", i=2048, o=64, h=0.95)
    assert predict_workload(ARCH, t, w, lo).tpot_s < predict_workload(ARCH, t, w, gpu_vllm).tpot_s
