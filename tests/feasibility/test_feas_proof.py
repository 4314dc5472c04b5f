"""The proof relaxation is below the exact cost model at every legal point, so its infeasibility
proves a contract infeasible (``assess``: verdict *infeasible*); the steering relaxation is not
(its memory row freezes the parent's engine terms: an upper bound)."""

from __future__ import annotations

import numpy as np
import pytest
from _feaskit import MiB, batch, ms, serve, setup, spec_for, tiny_arch
from test_feas_model import random_arch

from autocompress.feasibility import rounding
from autocompress.feasibility.arrays import relaxed_values
from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.metrics import Relaxation
from autocompress.ir import Attention, Block

GPU_SERVE = spec_for(serve("chat", 2, inp=1024, out=128, prefix=0.5, ttft=20 * ms, tpot=2 * ms, e2e=0.5,
                           throughput=500.0), hardware="rtx-5080", memory=1024 * MiB)
GPU_BATCH = spec_for(batch("offline", 8, inp=512, out=256, e2e=2.0, throughput=1000.0), hardware="l40s",
                     memory=2048 * MiB)
CPU = spec_for(serve("ask", 1, inp=128, out=32, tpot=70 * ms), batch("bulk", 4, inp=256, out=64, e2e=20.0),
               hardware="cpu", precision="fp32", memory=3072 * MiB)


def windowed(layers: int = 4):
    """Sliding-window layers (every other one): the decode cost is not convex in the KV length."""
    arch = tiny_arch(layers)
    blocks = tuple(Block(Attention(b.mixer.q_heads, b.mixer.kv_heads, b.mixer.head_dim, 256 if l % 2 else None),
                         b.ffn) for l, b in enumerate(arch.blocks))
    return arch.with_blocks(blocks)


@pytest.mark.parametrize("spec, arch", [(GPU_SERVE, None), (GPU_BATCH, None), (GPU_BATCH, "windowed"), (CPU, None)],
                         ids=["gpu-serve", "gpu-batch", "gpu-batch-windowed", "cpu-vllm"])
def test_the_proof_relaxation_is_a_lower_bound_at_legal_points(spec, arch):
    s = setup(spec, windowed() if arch else tiny_arch(5))
    rng = np.random.default_rng(7)
    checked = 0
    for d in s.space.hidden_grid:
        proof = Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits, proof=True)
        for _ in range(6):
            a = random_arch(rng, s.arch, s.space, d)
            if arch:  # keep the parent's windows
                a = a.with_blocks(tuple(Block(None if b.mixer is None else Attention(
                    b.mixer.q_heads, b.mixer.kv_heads, b.mixer.head_dim, p.mixer.sliding_window), b.ffn)
                    for b, p in zip(a.blocks, s.arch.blocks)))
            got = relaxed_values(proof, rounding.arch_to_x(proof, a))
            for c in evaluate(a, s.spec, s.profile, s.device, s.limits).checks:
                assert got[c.name] <= c.ratio * (1 + 1e-9), (c.name, got[c.name], c.ratio, d)
                checked += 1
    assert checked >= len(s.space.hidden_grid) * 6 * 2


def test_the_steering_memory_row_is_above_the_exact_model_somewhere():
    """Why a separate proof relaxation is needed: the steering LP's memory row is an upper bound."""
    s = setup(CPU, tiny_arch(5))
    rng = np.random.default_rng(3)
    d = s.space.hidden_grid[-1]
    relax = Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits)
    above = 0
    for _ in range(10):
        a = random_arch(rng, s.arch, s.space, d)
        mem = next(c for c in evaluate(a, s.spec, s.profile, s.device, s.limits).checks if c.metric == "memory")
        above += relaxed_values(relax, rounding.arch_to_x(relax, a))["memory"] > mem.ratio * (1 + 1e-6)
    assert above > 0


def test_both_relaxations_charge_the_cost_per_gemm_shape_as_the_exact_model():
    """A profile charging 64 MiB per distinct GEMM shape (``cost.memory.gemm_shapes``): the proof
    relaxation stays below the exact model at random legal (heterogeneous) points, where the
    count only grows from the smallest architecture's; the steering one equals the exact model's
    memory at uniform points, whose count is the parent's."""
    from dataclasses import replace

    from autocompress.ir import MLP

    s = setup(CPU, tiny_arch(5))
    s = replace(s, profile=replace(s.profile, memory=replace(s.profile.memory, gemm_shape_bytes=64 * MiB)))
    rng = np.random.default_rng(11)
    d = s.space.hidden_grid[-1]
    proof = Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits, proof=True)
    steer = Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits)
    for _ in range(8):
        a = random_arch(rng, s.arch, s.space, d)
        mem = next(c for c in evaluate(a, s.spec, s.profile, s.device, s.limits).checks if c.metric == "memory")
        assert relaxed_values(proof, rounding.arch_to_x(proof, a))["memory"] <= mem.ratio * (1 + 1e-9)
    for kv in s.space.kv_choices:
        for w in (s.arch.blocks[0].ffn.width, s.arch.blocks[0].ffn.width // 2, s.space.ffn_step):
            b = s.arch.blocks[0]
            a = s.arch.with_blocks((Block(Attention(b.mixer.q_heads, kv, b.mixer.head_dim), MLP(w)),) * 5,
                                   hidden_size=d)
            mem = next(c for c in evaluate(a, s.spec, s.profile, s.device, s.limits).checks if c.metric == "memory")
            assert relaxed_values(proof, rounding.arch_to_x(proof, a))["memory"] <= mem.ratio * (1 + 1e-9)
            got = relaxed_values(steer, rounding.arch_to_x(steer, a))["memory"]
            # the LP freezes the activation at the parent's (an upper bound); the shapes term agrees
            assert mem.ratio * (1 - 1e-9) <= got <= mem.ratio + 64 * MiB / CPU.target.memory_limit_bytes
