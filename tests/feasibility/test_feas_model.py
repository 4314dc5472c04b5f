"""The pieces under ``assess``: the relaxation's numeric model, the search-space grids, importance."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from _feaskit import MiB, batch, ms, serve, setup, spec_for, tiny_arch

from autocompress.cost.latency import predict_workload
from autocompress.feasibility import rounding
from autocompress.feasibility.arrays import relaxed_values
from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.objective import prior_importance
from autocompress.feasibility.metrics import Relaxation
from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.plan.space import HIDDEN_POINTS, derive_space


def random_arch(rng, parent: Architecture, space, d: int) -> Architecture:
    """A random legal architecture of the space at hidden size ``d`` (layer 0 keeps attention)."""
    blocks = []
    for l, b in enumerate(parent.blocks):
        mixer = b.mixer
        if l == 0 or rng.random() < 0.7:
            mixer = Attention(parent.num_heads, int(rng.choice(space.kv_choices)), parent.head_dim)
        else:
            mixer = None
        ffn = None
        if rng.random() < 0.7:
            steps = b.ffn.width // space.ffn_step
            ffn = MLP(int(rng.integers(1, steps + 1)) * space.ffn_step)
        blocks.append(Block(mixer, ffn))
    return parent.with_blocks(tuple(blocks), hidden_size=d)


def _relax_vs_exact(s, seed: int, n: int = 4):
    rng = np.random.default_rng(seed)
    for d in s.space.hidden_grid:
        relax = Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits)
        for _ in range(n):
            arch = random_arch(rng, s.arch, s.space, d)
            x = rounding.arch_to_x(relax, arch)
            assert rounding.x_to_arch(relax, x) == arch  # integer points round-trip
            got = relaxed_values(relax, x)
            ev = evaluate(arch, s.spec, s.profile, s.device, s.limits)
            yield arch, got, ev


def _exact_latency_checks(s, seed: int, n: int = 3) -> int:
    """Every bound but memory equals the exact model at ``n`` random integer points per hidden
    size; how many were compared (so a test can say none was skipped)."""
    compared = 0
    for arch, got, ev in _relax_vs_exact(s, seed=seed, n=n):
        for c in ev.checks:
            if c.metric != "memory":
                assert got[c.name] == pytest.approx(c.ratio, rel=1e-6), (c.name, arch)
                compared += 1
    return compared


def _with_kernel(s, **fields):
    """The set-up ``s`` with some of its profile's kernel coefficients replaced."""
    return replace(s, profile=replace(s.profile, kernel=replace(s.profile.kernel, **fields)))


def _predict(s):
    """The exact model's prediction of the set-up's first workload."""
    return predict_workload(s.arch, s.spec.target, s.spec.workloads[0], s.profile, s.device, s.limits)


SERVE = spec_for(serve("chat", 2, inp=1024, out=128, prefix=0.5, ttft=20 * ms, tpot=2 * ms, e2e=0.5,
                       throughput=500.0), hardware="rtx-5080", memory=1024 * MiB)


def test_relaxation_is_exact_at_integer_points_serve():
    s = setup(SERVE, tiny_arch(5))
    n = 0
    for arch, got, ev in _relax_vs_exact(s, seed=1):
        for c in ev.checks:
            if c.metric == "memory":
                continue
            assert got[c.name] == pytest.approx(c.ratio, rel=1e-6), (c.name, arch)
            n += 1
        # memory: the LP freezes the engine's other terms at the parent's values, an upper bound
        mem = next(c for c in ev.checks if c.metric == "memory")
        assert got["memory"] >= mem.ratio * (1 - 1e-9)
    assert n >= 4 * 3 * 4


def test_relaxation_close_at_integer_points_batch():
    """Batch decode sums over KV lengths by a midpoint rule: a few % off, not exact."""
    spec = spec_for(batch("offline", 8, inp=512, out=256, e2e=2.0, throughput=1000.0), hardware="l40s")
    s = setup(spec, tiny_arch(4))
    worst = 0.0
    for arch, got, ev in _relax_vs_exact(s, seed=2, n=3):
        for c in ev.checks:
            if c.metric != "memory":
                worst = max(worst, abs(got[c.name] / c.ratio - 1))
    assert worst < 0.03


# ---- search space ----------------------------------------------------------------------------

def smollm2_like() -> Architecture:
    block = Block(Attention(9, 3, 64), MLP(1536))
    return Architecture("llama", 49152, 576, 9, 64, True, (block,) * 30, 8192, "smollm2-like")


def test_space_grids_smollm2_like():
    parent = smollm2_like()
    sp = derive_space(parent, "vllm", "gpu")
    assert sp.hidden_grid[0] == 576
    assert sp.hidden_grid == (576, 512, 448, 384, 320)
    assert len(sp.hidden_grid) <= HIDDEN_POINTS
    assert all(d % 64 == 0 and d >= 576 // 2 for d in sp.hidden_grid)
    assert list(sp.hidden_grid) == sorted(sp.hidden_grid, reverse=True)
    assert sp.kv_choices == (1, 3)  # divisors of 9 query heads, at most the parent's 3
    assert sp.ffn_step == 64  # largest power of two <= 1536/16 = 96, clamped to 32..256
    assert sp.first_attention_fixed and sp.min_keep == 0.25
    assert {r[0] for r in sp.derivation} >= {"hidden grid", "FFN width step", "KV-head choices", "minimum kept"}


@pytest.mark.parametrize("hidden,heads,kv,ffn,step,kvs", [
    (256, 4, 2, 1024, 64, (1, 2)),
    (2048, 32, 8, 8192, 256, (1, 2, 4, 8)),  # 8192/16 = 512, clamped to 256
    (256, 4, 4, 256, 32, (1, 2, 4)),  # 256/16 = 16, clamped to 32
    (8192, 64, 8, 28672, 256, (1, 2, 4, 8)),
])
def test_space_step_rules(hidden, heads, kv, ffn, step, kvs):
    parent = tiny_arch(2, hidden=hidden, heads=heads, head_dim=hidden // heads, kv=kv, ffn=ffn)
    sp = derive_space(parent, "transformers", "cpu")
    assert sp.ffn_step == step and sp.kv_choices == kvs
    h_step = 64 if hidden <= 4096 else 128
    assert sp.hidden_grid[0] == hidden and len(sp.hidden_grid) <= HIDDEN_POINTS
    assert all(d % h_step == 0 and hidden // 2 <= d <= hidden for d in sp.hidden_grid)
    assert len(set(sp.hidden_grid)) == len(sp.hidden_grid)
    assert not sp.first_attention_fixed  # only vLLM's DeciLM loader needs layer 0's attention


def test_space_axes_restrict_grids():
    sp = derive_space(smollm2_like(), "vllm", "gpu", axes=("ffn", "depth"))
    assert sp.hidden_grid == (576,) and sp.kv_choices == (3,)
    assert sp.allows("ffn") and not sp.allows("hidden")


# ---- importance ------------------------------------------------------------------------------

def test_prior_importance_sums_to_one():
    parent = tiny_arch(6)
    imp = prior_importance(parent)
    assert sum(imp.alpha) + sum(imp.beta) == pytest.approx(1.0)
    assert imp.score(parent, parent) == pytest.approx(1.0)
    # first and last layers count double
    assert imp.alpha[0] == pytest.approx(2 * imp.alpha[1]) and imp.beta[5] == pytest.approx(2 * imp.beta[2])
    assert imp.hidden_factor(256, 256) == pytest.approx(1.0)


def test_importance_is_monotone():
    parent = tiny_arch(6)
    imp = prior_importance(parent)
    full = imp.score(parent, parent)
    blocks = list(parent.blocks)
    prev = full
    # shrinking step by step: every removal or narrowing strictly lowers the score
    for l in range(1, 6):
        for new in (Block(Attention(4, 1, 64), MLP(1024)), Block(Attention(4, 1, 64), MLP(512)),
                    Block(None, MLP(512)), Block(None, None)):
            blocks[l] = new
            sc = imp.score(parent.with_blocks(tuple(blocks)), parent)
            assert sc < prev
            prev = sc
    assert imp.score(parent.with_blocks(parent.blocks, hidden_size=192), parent) < full
    assert prev > 0


def test_scorer_matches_score():
    parent = tiny_arch(6)
    imp = prior_importance(parent)
    sp = derive_space(parent, "vllm", "gpu")
    s = setup(spec_for(serve(tpot=1 * ms)), parent)
    rng = np.random.default_rng(7)
    score_x = imp.scorer(parent)
    archs = [random_arch(rng, parent, sp, d) for d in sp.hidden_grid for _ in range(5)]
    for d in sp.hidden_grid:
        relax = Relaxation(parent, d, s.spec, s.profile, s.device, sp, imp, s.limits)
        group = [a for a in archs if a.hidden_size == d]
        X = np.array([rounding.arch_to_x(relax, a) for a in group])
        factor = imp.hidden_factor(d, parent.hidden_size)
        vec = score_x(X, factor)
        for a, x, v in zip(group, X, vec):
            assert v == pytest.approx(imp.score(a, parent), rel=1e-9, abs=1e-12)
            assert score_x(x, factor) == pytest.approx(v)


def test_relaxation_is_exact_with_a_serial_fraction():
    """A profile whose ops do not overlap compute and memory (``serial_fraction``, fitted on CPUs):
    the LP's epigraph rows carry it, so integer points still equal the exact model."""
    s = _with_kernel(setup(SERVE, tiny_arch(5)), serial_fraction=0.5)
    assert _exact_latency_checks(s, seed=3) >= 4 * 3 * 3


def test_relaxation_is_exact_with_a_sub_block_overhead():
    """A per-sub-block cost (``sub_block_overhead_s``) sits on the keep variables: integer points
    still equal the exact model, and removing a sub-block saves exactly that much per step."""
    s = _with_kernel(setup(SERVE, tiny_arch(5)), sub_block_overhead_s=4e-4)
    assert _exact_latency_checks(s, seed=4) >= 4 * 3 * 3
    cpu = setup(spec_for(serve("ask", 1, inp=128, out=32, tpot=0.1), hardware="cpu", precision="fp32"), tiny_arch(5))
    full, plain = _predict(_with_kernel(cpu, sub_block_overhead_s=4e-4)), _predict(cpu)
    assert full.tpot_s - plain.tpot_s == pytest.approx(4e-4 * 2 * cpu.arch.num_layers, rel=1e-6)  # eager decode
    gpu_oh = _with_kernel(s, sub_block_overhead_s=0.0)
    assert _predict(s).tpot_s == _predict(gpu_oh).tpot_s  # a full CUDA graph has no per-module cost


def test_relaxation_is_exact_with_attention_constants():
    """The attention backend's per-layer constants (``attention_overhead_s`` and its per-sequence
    part) sit on the attention keep variables: integer points still equal the exact model, and an
    eager decode step of c sequences pays (fixed + c x per-sequence) per attention layer."""
    s = _with_kernel(setup(SERVE, tiny_arch(5)), attention_overhead_s=3e-4, attention_seq_overhead_s=5e-5)
    assert _exact_latency_checks(s, seed=6) >= 4 * 3 * 3
    cpu = setup(spec_for(batch("b", 4, inp=128, out=32, e2e=2.0), hardware="cpu", precision="fp32"), tiny_arch(5))
    full = _predict(_with_kernel(cpu, attention_overhead_s=3e-4, attention_seq_overhead_s=5e-5))
    plain = _predict(cpu)
    n_attn = sum(b.attention is not None for b in cpu.arch.blocks)
    assert n_attn and full.tpot_s - plain.tpot_s == pytest.approx((3e-4 + 4 * 5e-5) * n_attn, rel=1e-6)


def test_relaxation_is_exact_with_a_gqa_reread():
    """KV bytes a query group's other heads load again (``gqa_kv_reread``): charged bytes, so the LP
    rows equal the exact model at integer points; a re-read raises the parent's TPOT, and a model
    whose query heads each have their own KV head (no groups) pays nothing for it."""
    full = setup(SERVE, tiny_arch(5))
    s = _with_kernel(full, gqa_kv_reread=0.3)
    assert _exact_latency_checks(s, seed=7) >= 4 * 3 * 3
    assert _predict(s).tpot_s > _predict(full).tpot_s
    mha = replace(full.arch, blocks=tuple(replace(b, mixer=replace(b.attention, kv_heads=b.attention.q_heads))
                                          for b in full.arch.blocks))
    assert predict_workload(mha, s.spec.target, s.spec.workloads[0], s.profile, s.device, s.limits).tpot_s == \
        predict_workload(mha, full.spec.target, full.spec.workloads[0], full.profile, full.device, full.limits).tpot_s


def test_relaxation_is_exact_with_a_shared_prefix():
    """Four chats in lockstep over a 90% cached prefix whose re-reads cost a fifth of a memory byte
    (``shared_kv_reread``): the LP rows (op tables of charged bytes, the schedule's passes) equal
    the exact model at integer points, and cheaper re-reads lower the parent's TPOT."""
    spec = spec_for(serve("chat", 4, inp=1024, out=64, prefix=0.9, ttft=20 * ms, tpot=2 * ms, e2e=0.5),
                    hardware="rtx-5080", memory=1024 * MiB)
    full = setup(spec, tiny_arch(5))
    s = _with_kernel(full, shared_kv_reread=0.2)
    assert _exact_latency_checks(s, seed=5) >= 3 * 3 * 3  # 3 latency bounds x 3 architectures x the hidden sizes
    assert _predict(s).tpot_s < _predict(full).tpot_s
