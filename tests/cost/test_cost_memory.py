"""Memory terms against hand computations, the vLLM fit check, CPU KV rounding, transformers."""

import math

import pytest

from _costkit import D, attn, mamba, mlp, moe, target, tiny, workload

from autocompress.catalog.engines import SchedulerLimits
from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.profile import load_profile
from autocompress.cost.memory import memory_breakdown
from autocompress.cost.memory import (GiB, gemm_shapes, kv_cache_bytes, kv_page_bytes, mamba_state_bytes, peak_activation_bytes, weight_bytes)
from autocompress.ir import Architecture, Attention, Block

MiB = 1 << 20
ARCH = tiny([Block(attn(kv=2), mlp(256)), Block(attn(kv=1), mlp(128))])


def test_weight_bytes():
    assert weight_bytes(ARCH, "bf16") == 2 * ARCH.params()
    assert weight_bytes(ARCH, "fp32") == 4 * ARCH.params()
    linear = sum(b.mixer.params(D) + b.ffn.params(D) for b in ARCH.blocks)
    assert weight_bytes(ARCH, "fp8") == linear + 2 * (ARCH.params() - linear)  # embeddings, norms stay 16-bit
    assert weight_bytes(ARCH, "bf16", tp=2) == ARCH.params()


def test_kv_pages():
    a = Attention(4, 2, 16)
    assert kv_page_bytes(a, 2) == 16 * 2 * (16 + 16) * 2 == 2048
    # 40 tokens -> 3 pages of 16; layer kv heads 2 and 1
    assert kv_cache_bytes(ARCH, 1, 40, 2, 2) == 3 * 2048 + 3 * 1024
    assert kv_cache_bytes(ARCH, 5, 40, 2, 2) == 5 * (3 * 2048 + 3 * 1024)
    assert kv_cache_bytes(ARCH, 1, 40, 2, 2, block_size=None) == 40 * (2 * 2 * 16 * 2 + 2 * 1 * 16 * 2)


def test_kv_per_layer_heads_as_decilm():
    # facts.md: kv heads 2,1,4,2 on four attention layers (plus two no-op ones) used 4608 B/token, fp32, hd 64
    blocks = [Block(Attention(4, k, 64), mlp()) for k in (2, 1, 4, 2)] + [Block(None, mlp())] * 2
    arch = Architecture("decilm", 1000, 256, 4, 64, False, tuple(blocks))
    assert kv_cache_bytes(arch, 1, 1, 4, 4, block_size=None) == 4608
    assert kv_cache_bytes(arch, 1, 16, 4, 4) == 16 * 4608  # one page per layer


def test_sliding_window_and_mamba_state():
    w = tiny([Block(attn(kv=1, window=32), mlp())])
    assert kv_cache_bytes(w, 1, 1000, 2, 2) == (2 + 1) * kv_page_bytes(attn(kv=1), 2)
    m = mamba()  # K=4, d_in=64, G=1, N=8, H=4, P=16
    assert mamba_state_bytes(m, 2) == 3 * (64 + 2 * 1 * 8) * 2 + 4 * 16 * 8 * 2 == 1504
    hybrid = tiny([Block(m, moe()), Block(attn(kv=1), None)])
    assert kv_cache_bytes(hybrid, 3, 40, 2, 2) == 3 * (1504 + 3 * 1024)


def test_peak_activation():
    # 100 tokens: residual + normed input + gated MLP 3*I (256) = 64*2 + 768; logits: 10 rows of 1000 (bf16 + fp32)
    assert peak_activation_bytes(ARCH, 100, 10, 2) == 2 * 100 * (2 * 64 + 3 * 256)
    assert peak_activation_bytes(ARCH, 100, 100, 2) == 2 * 100 * 64 + 100 * 1000 * (2 + 4)


def test_vllm_gpu_breakdown_terms(h100, gpu_vllm):
    ws = [workload(c=4, i=100, o=28, name="a"), workload(c=2, i=1000, o=24, name="b")]
    m = memory_breakdown(ARCH, target(), ws, gpu_vllm)
    mt = gpu_vllm.memory
    assert m.weights_bytes == 2 * ARCH.params()
    act = math.ceil(peak_activation_bytes(ARCH, 16384, 1024, 2) * mt.activation_multiplier)
    assert m.peak_activation_bytes == act
    assert m.non_kv_bytes == m.weights_bytes + act + mt.non_torch_bytes
    assert m.cuda_graph_bytes == mt.cudagraph_first_bytes + 50 * mt.cudagraph_per_graph_bytes  # 51 sizes
    assert m.margin_bytes == math.ceil(mt.margin_fraction * (m.non_kv_bytes + m.cuda_graph_bytes)) + mt.margin_bytes
    assert m.requested_bytes == math.ceil(80 * GiB * 0.92)
    assert m.kv_per_workload == (("a", 4 * 8 * 3072), ("b", 2 * 64 * 3072))  # 128 tok = 8 pages, 1024 = 64
    assert m.kv_needed_bytes == 2 * 64 * 3072
    assert m.kv_available_bytes == m.requested_bytes - m.non_kv_bytes - m.cuda_graph_bytes - m.margin_bytes
    assert m.total_bytes == m.non_kv_bytes + m.cuda_graph_bytes + m.margin_bytes + m.kv_needed_bytes
    assert m.context_overhead_bytes == mt.cuda_context_bytes
    assert m.fits and m.message == "" and m.kv_bytes_per_token == 3072 / 16


def test_vllm_fit_message(h100, gpu_vllm):
    big = tiny([Block(attn(kv=4), mlp(256))] * 2, max_position=2_000_000)
    base = memory_breakdown(big, target(), [workload(c=1, i=10, o=10)], gpu_vllm)
    limit = base.total_bytes - base.kv_needed_bytes + 8 * GiB  # room for 8 GiB of KV
    w = workload(c=1, i=1_000_000, o=48_576)  # 2^20 tokens
    m = memory_breakdown(big, target(mem=limit), [w], gpu_vllm)
    per_token = 2 * (2 * 4 * 16 * 2)  # 2 layers, K and V, 4 kv heads x 16, bf16 = 512 B
    need = 1_048_576 * per_token
    assert m.kv_needed_bytes == need == 0.5 * GiB
    assert m.fits and m.kv_available_bytes == 8 * GiB
    small = limit - 8 * GiB + need // 2  # half the KV needed
    m = memory_breakdown(big, target(mem=small), [w], gpu_vllm)
    assert not m.fits
    avail = m.kv_available_bytes
    est = (avail // (16 * per_token)) * 16  # whole pages
    assert m.max_model_len == est
    assert m.message == (
        "To serve at least one request with the model's max seq len (1048576), (0.50 GiB KV cache is needed, "
        f"which is larger than the available KV cache memory ({avail / GiB:.2f} GiB). Based on the available "
        f"memory, the estimated maximum model length is {est}. Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.")
    # concurrency is what does not fit: say how many sequences would
    many = memory_breakdown(big, target(mem=limit), [workload(c=64, i=1_000_000, o=48_576, name="long")], gpu_vllm)
    assert not many.fits and many.message.startswith("Workload long: 64 sequences x 1048576 tokens need 32.00 GiB")
    assert "at most 16 such sequences fit" in many.message
    none = memory_breakdown(big, target(mem=100 * MiB), [w], gpu_vllm)
    assert not none.fits and none.message.startswith("No available memory for the cache blocks")


def test_vllm_cpu_rounds_kv_to_whole_gib():
    cpu = HARDWARE["cpu"]
    prof = load_profile(None, cpu, "vllm")
    t = target("cpu", w="fp32", kv="fp32")
    per_tok = 2 * (2 * 2 * 16 * 4 + 2 * 1 * 16 * 4)  # fp32, kv heads 2 and 1 ... two layers
    m = memory_breakdown(ARCH, t, [workload(c=1, i=1000, o=24)], prof)
    assert m.kv_needed_bytes == 1024 * per_tok // 2 and m.cpu_kv_space_gib == 1 and m.kv_reserved_bytes == GiB
    assert m.cuda_graph_bytes == 0 and m.context_overhead_bytes == 0
    assert m.total_bytes == m.non_kv_bytes + m.margin_bytes + GiB
    assert m.weights_bytes == 4 * ARCH.params() and m.limit_bytes == 24 * GiB and m.fits
    m2 = memory_breakdown(ARCH, t, [workload(c=4000, i=1000, o=24)], prof)
    assert m2.cpu_kv_space_gib == math.ceil(4000 * 1024 * per_tok / 2 / GiB) == 2


def test_transformers_memory(h100):
    prof = load_profile(None, h100, "transformers")
    t = target(engine="transformers", mem=4 * GiB)
    w = workload(c=3, i=100, o=50)
    m = memory_breakdown(ARCH, t, [w], prof)
    kv = 3 * 150 * (2 * 2 * 16 * 2 + 2 * 1 * 16 * 2)  # dynamic cache: no pages
    assert m.kv_needed_bytes == kv
    act = math.ceil(peak_activation_bytes(ARCH, 300, 3, 2) * prof.memory.activation_multiplier)
    assert m.peak_activation_bytes == act
    mt = prof.memory
    assert m.total_bytes == 2 * ARCH.params() + act + mt.non_torch_bytes + m.margin_bytes + kv + mt.cuda_context_bytes
    assert m.cuda_graph_bytes == 0 and m.fits and m.requested_bytes == 4 * GiB
    tight = memory_breakdown(ARCH, target(engine="transformers", mem=m.total_bytes - 1), [w], prof)
    assert not tight.fits and "exceeds the limit" in tight.message


def test_smollm2_memory_is_plausible():
    blk = Block(Attention(9, 3, 64), mlp(1536))
    arch = Architecture("llama", 49152, 576, 9, 64, True, (blk,) * 30)
    t, w = target("rtx-5080", mem=512 * MiB), workload(c=1, mode="serve", i=512, o=64)
    m = memory_breakdown(arch, t, [w])
    assert m.weights_bytes == 269_030_016
    assert m.kv_needed_bytes == 30 * 36 * kv_page_bytes(Attention(9, 3, 64), 2)  # 576 tokens = 36 pages
    # vLLM's defaults (256 seqs: 51 CUDA graphs, 2048-token profile run) leave no room in 512 MiB ...
    assert not m.fits and m.message.startswith("No available memory for the cache blocks")
    # ... engine arguments sized to the workload do
    lean = memory_breakdown(arch, t, [w], limits=SchedulerLimits(512, 1))
    assert lean.cuda_graph_bytes < m.cuda_graph_bytes and lean.peak_activation_bytes < m.peak_activation_bytes
    assert lean.kv_available_bytes > m.kv_available_bytes


def test_gemm_shapes_counts_distinct_linear_shapes():
    """LM head, fused QKV, output, fused gate/up and down: identical layers share their shapes."""
    uniform = tiny([Block(attn(kv=2), mlp(256))] * 3)
    assert gemm_shapes(uniform) == 5
    assert gemm_shapes(tiny([Block(attn(kv=2), mlp(256)), Block(attn(kv=2), mlp(128))])) == 7
    assert gemm_shapes(ARCH) == 8  # two widths and two KV head counts
    # removed sub-blocks and empty layers add nothing
    assert gemm_shapes(tiny([Block(attn(kv=2), mlp(256)), Block(None, mlp(256)), Block(None, None)])) == 5


def test_cpu_breakdown_charges_the_profile_cost_per_gemm_shape():
    from dataclasses import replace

    cpu = HARDWARE["cpu"]
    prof = load_profile(None, cpu, "vllm")
    assert prof.memory.gemm_shape_bytes == 0  # shipped profiles without the field charge nothing
    planted = replace(prof, memory=replace(prof.memory, gemm_shape_bytes=10 * MiB))
    t = target("cpu", "vllm", "fp32", "fp32")
    wl = [workload(1, "serve", 128, 32)]
    for arch in (ARCH, tiny([Block(attn(kv=2), mlp(256))] * 2)):
        a, b = memory_breakdown(arch, t, wl, prof, cpu), memory_breakdown(arch, t, wl, planted, cpu)
        assert b.gemm_shape_bytes == 10 * MiB * gemm_shapes(arch)
        assert b.non_kv_bytes - a.non_kv_bytes == b.gemm_shape_bytes
        extra = b.gemm_shape_bytes * (1 + prof.memory.margin_fraction)
        assert b.total_bytes - a.total_bytes == pytest.approx(extra, abs=2)
