"""Per-op formulas against hand computations (hidden 64, 4 heads of 16, vocab 1000, bf16)."""

import pytest
from _costkit import D, HD, V, attn, mamba, mlp, moe, tiny

from autocompress.cost.roofline import (Numerics, Op, Pass, attended_pairs, attention_ops, block_ops, experts_touched, gemm, mamba_ops, mlp_ops, model_ops, moe_ops, op_time)
from autocompress.cost.op_tables import block_op_table
from autocompress.ir import Block

BF16 = Numerics("bf16", "bf16", 1)


def by_name(ops):
    return {o.name: o for o in ops}


def test_gemm():
    g = gemm("g", 3, 64, 128, BF16)
    assert g.flops == 2 * 3 * 64 * 128 == 49152
    assert g.bytes == 2 * (3 * 64 + 64 * 128 + 3 * 128) == 17536
    assert g.weight_bytes == 2 * 64 * 128 and g.launches == 1
    fp8 = gemm("g", 3, 64, 128, Numerics("fp8", "fp8"))  # fp8 weights, 16-bit activations
    assert fp8.bytes == 2 * (3 * 64 + 3 * 128) + 1 * 64 * 128


def test_attention_prefill_gqa():
    ops = by_name(attention_ops(D, 4, 1, HD, None, Pass.prefill(1, 10), BF16))
    assert ops["attn.qkv"].flops == 2 * 10 * 64 * (4 + 2 * 1) * 16 == 122880
    assert ops["attn.qkv"].bytes == 2 * (10 * 64 + 64 * 96 + 10 * 96)
    assert ops["attn.o"].flops == 2 * 10 * 64 * 64
    core = ops["attn.core"]
    assert core.flops == 4 * 64 * (10 * 11 / 2)  # causal pairs s(s+1)/2, 4*H*hd per pair
    # Q read + O write (2*10*64*2) + K,V read (2*16*2*10) + K,V write (same)
    assert core.bytes == 2560 + 640 + 640
    core4 = by_name(attention_ops(D, 4, 4, HD, None, Pass.prefill(1, 10), BF16))["attn.core"]
    assert core4.flops == core.flops and core4.bytes == 2560 + 2560 + 2560


def test_attention_decode():
    p = Pass.decode(2, 100)
    core = by_name(attention_ops(D, 4, 1, HD, None, p, BF16))["attn.core"]
    assert core.flops == 4 * 2 * 4 * 16 * 100  # 4*b*H*hd*L
    kv_read = 2 * 2 * 1 * 100 * 16 * 2  # b * 2*KVH*L*hd*kv_bytes
    assert core.bytes == kv_read + 2 * 2 * 64 * 2 + 2 * 2 * 16 * 2  # + Q/O + new K,V write
    fp8 = by_name(attention_ops(D, 4, 1, HD, None, p, Numerics("bf16", "fp8")))["attn.core"]
    assert fp8.bytes == kv_read / 2 + 2 * 2 * 64 * 2 + 2 * 2 * 16


def test_sliding_window_caps():
    assert attended_pairs(1, 99, 32) == 32 and attended_pairs(1, 10, 32) == 11
    assert attended_pairs(10, 0, 4) == 1 + 2 + 3 + 4 * 7
    a = by_name(attention_ops(D, 4, 1, HD, 32, Pass.decode(1, 100), BF16))["attn.core"]
    b = by_name(attention_ops(D, 4, 1, HD, None, Pass.decode(1, 32), BF16))["attn.core"]
    assert a == b


def test_mlp_gated_vs_plain():
    T, I = 10, 128
    g = mlp_ops(D, I, True, Pass.prefill(1, T), BF16)
    n = mlp_ops(D, I, False, Pass.prefill(1, T), BF16)
    assert sum(o.flops for o in g if o.cls == "gemm") == 6 * T * D * I
    assert sum(o.flops for o in n if o.cls == "gemm") == 4 * T * D * I
    assert sum(o.weight_bytes for o in g if o.cls == "gemm") == 2 * 3 * D * I


def test_moe_distinct_experts_and_topk():
    assert experts_touched(8, 2, 1) == 2
    assert experts_touched(8, 2, 3) == pytest.approx(8 * (1 - 0.75 ** 3))
    assert experts_touched(8, 2, 10_000) == pytest.approx(8)
    ops = by_name(moe_ops(D, 8, 2, 32, 0, 0, True, Pass.decode(3, 50), BF16))
    e = ops["moe.experts"]
    assert e.flops == 6 * 3 * D * 32 * 2  # gated 6*T*d*I_e * top_k
    assert e.weight_bytes == pytest.approx(2 * 3 * D * 32 * 8 * (1 - 0.75 ** 3))
    assert ops["moe.router"].flops == 2 * 3 * D * 8
    shared = by_name(moe_ops(D, 8, 2, 32, 1, 48, True, Pass.decode(3, 50), BF16))
    assert shared["moe.shared.gate_up"].flops == 2 * 3 * D * 96 and shared["moe.shared.down"].flops == 2 * 3 * 48 * D


def test_mamba_flops_and_state():
    T = 5
    ops = mamba_ops(D, 4, 16, 8, 1, 4, Pass.prefill(1, T), BF16)
    d_in, GN, Hm = 64, 8, 4
    megatron = 2 * T * D * (2 * d_in + 2 * GN + Hm) + 7 * T * d_in * 8 + 2 * T * d_in * D
    assert sum(o.flops for o in ops if o.name != "mamba.norm") == megatron == 153600
    dec = by_name(mamba_ops(D, 4, 16, 8, 1, 4, Pass.decode(2, 1000), BF16))
    dec2 = by_name(mamba_ops(D, 4, 16, 8, 1, 4, Pass.decode(2, 10), BF16))
    assert dec == dec2  # no dependence on the context length
    ssm_state_rw = 2 * 2 * (4 * 16 * 8) * 2  # read + write, 2 sequences, bf16
    assert dec["mamba.ssm"].bytes == 2 * 2 * (2 * d_in + 2 * GN + 2 * Hm) + ssm_state_rw
    conv_state_rw = 2 * 2 * 3 * (d_in + 2 * GN) * 2
    assert dec["mamba.conv"].bytes == 2 * (2 * 2 * 80 + 80 * 4) + conv_state_rw


def test_lm_head_only_logit_rows():
    arch = tiny([Block(attn(), mlp())])
    pre = by_name(model_ops(arch, Pass.prefill(2, 10), BF16))
    assert pre["lm_head"].flops == 2 * 2 * D * V  # 2 sequences' last tokens, not 20 tokens
    no = by_name(model_ops(arch, Pass.prefill(2, 10, logits=False), BF16))
    assert "lm_head" not in no and no["embed"].bytes == 2 * 2 * 20 * D


def test_removed_sub_blocks_contribute_nothing():
    p = Pass.prefill(1, 8)
    full = tiny([Block(attn(), mlp())])
    assert block_ops(full, Block(None, None), p, BF16) == []
    assert block_ops(full, Block(None, mlp()), p, BF16) == mlp_ops(D, 128, True, p, BF16)
    assert block_ops(full, Block(attn(), None), p, BF16) == attention_ops(D, 4, 1, HD, None, p, BF16)


def test_tensor_parallel_splits_and_allreduce():
    p = Pass.prefill(1, 10)
    one = by_name(mlp_ops(D, 128, True, p, BF16))
    two = by_name(mlp_ops(D, 128, True, p, Numerics("bf16", "bf16", 2)))
    assert two["mlp.gate_up"].flops == one["mlp.gate_up"].flops / 2
    assert two["mlp.allreduce"].bytes == 2 * (2 - 1) / 2 * 10 * D * 2 and "mlp.allreduce" not in one


def test_op_time_roofline(h100, gpu_vllm):
    op = Op("x", flops=1e12, bytes=1e9, launches=2)
    e = gpu_vllm.eff("gemm")
    expect = max(1e12 / (989e12 * e.compute), 1e9 / (3350e9 * e.memory)) + 2 * gpu_vllm.kernel.launch_s
    assert op_time(op, h100, gpu_vllm, "bf16") == pytest.approx(expect)
    graph = op_time(op, h100, gpu_vllm, "bf16", graph=True)
    assert graph == pytest.approx(expect - 2 * (gpu_vllm.kernel.launch_s - gpu_vllm.kernel.graph_launch_s))
    fp8 = op_time(op, h100, gpu_vllm, "fp8")  # GEMMs at the fp8 peak
    launch = 2 * gpu_vllm.kernel.launch_s
    assert fp8 == pytest.approx(max(1e12 / (1979e12 * e.compute), 1e9 / (3350e9 * e.memory)) + launch)


# ---- affinity: what the feasibility stage relies on ------------------------------------------

PASSES = [Pass.prefill(2, 37, 5), Pass.decode(7, 300), Pass.decode(3, 40) + Pass.prefill(0.5, 64, 10)]


def _affine(f, a, b):
    oa, ob, om = f(a), f(b), f((a + b) / 2)
    for x, y, m in zip(oa, ob, om):
        assert x.flops + y.flops == pytest.approx(2 * m.flops, rel=1e-12), x.name
        assert x.bytes + y.bytes == pytest.approx(2 * m.bytes, rel=1e-12), x.name


@pytest.mark.parametrize("p", PASSES)
@pytest.mark.parametrize("nb", [BF16, Numerics("fp8", "fp8", 2)])
def test_ops_affine_in_per_layer_sizes(p, nb):
    _affine(lambda I: mlp_ops(D, I, True, p, nb), 128, 512)
    _affine(lambda I: mlp_ops(D, I, False, p, nb), 64, 1000)
    _affine(lambda kv: attention_ops(D, 4, kv, HD, None, p, nb), 1, 4)
    _affine(lambda kv: attention_ops(D, 4, kv, HD, 16, p, nb), 1, 4)
    _affine(lambda h: mamba_ops(D, h, 16, 8, 1, 4, p, nb), 2, 8)
    _affine(lambda w: moe_ops(D, 8, 2, w, 1, 32, True, p, nb), 16, 64)


def test_experts_term_is_concave_and_tangent_bounds_it():
    f = lambda E: experts_touched(E, 2, 5)  # noqa: E731
    for a, b in [(4, 16), (8, 64), (2, 6)]:
        assert f(a) + f(b) <= 2 * f((a + b) / 2)


@pytest.mark.parametrize("p", PASSES)
def test_block_op_table_slopes_predict_other_sizes(p, h100, gpu_vllm):
    arch = tiny([Block(attn(kv=2), mlp(256)), Block(mamba(), moe())])
    t0 = block_op_table(arch, 0, p, h100, gpu_vllm, BF16)
    assert dict(t0.sizes) == {"kv_heads": 2, "ffn_width": 256} and len(t0.times) == len(t0.rows)
    moved = tiny([Block(attn(kv=4), mlp(100)), Block(mamba(), moe())])
    new = block_op_table(moved, 0, p, h100, gpu_vllm, BF16)
    delta = {"kv_heads": 2, "ffn_width": -156}
    for r, n in zip(t0.rows, new.rows):
        assert r.exact
        pf = r.op.flops + sum(s * delta[v] for v, s in r.dflops)
        pb = r.op.bytes + sum(s * delta[v] for v, s in r.dbytes)
        assert pf == pytest.approx(n.op.flops) and pb == pytest.approx(n.op.bytes)
    # removing a sub-block removes exactly its rows
    only_attn = block_op_table(tiny([Block(attn(kv=2), None)]), 0, p, h100, gpu_vllm, BF16)
    assert only_attn.ops == tuple(r.op for r in t0.rows if r.part == "mixer")
    # MoE: experts slope is a tangent (upper bound: concave), expert width exact
    t1 = block_op_table(arch, 1, p, h100, gpu_vllm, BF16)
    assert dict(t1.sizes) == {"mamba_heads": 4, "experts": 8, "expert_width": 32}
    ex = next(r for r in t1.rows if r.op.name == "moe.experts")
    assert not ex.exact
    slope = dict(ex.dbytes)["experts"]
    fewer = by_name(moe_ops(D, 4, 2, 32, 0, 0, True, p, BF16))["moe.experts"]
    assert ex.op.bytes + slope * (4 - 8) >= fewer.bytes - 1e-6


def test_block_op_table_is_cheap(h100, gpu_vllm):
    import time
    arch = tiny([Block(attn(kv=2), mlp(256))] * 4)
    t = time.perf_counter()
    for i in range(4):
        block_op_table(arch, i, Pass.decode(8, 1000), h100, gpu_vllm, BF16)
    assert time.perf_counter() - t < 0.2
