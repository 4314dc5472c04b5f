"""Rounding and repair pay for distinct GEMM shapes (``feasibility.rounding``; vllm-cpu profiles
price each, ``cost.memory.gemm_shapes``).

The relaxation charges the parent's count. Narrowing one FFN to a new width adds two shapes, so a
repair scored without the point's own count walks away from the bound: on the README's contract
with a freshly calibrated profile (3.4 MiB per shape) it found nothing. So the repair counts the
point's shapes and may merge an FFN into a width another layer has.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _feaskit import MiB, ms, serve, setup, spec_for, tiny_arch
from test_feas_model import random_arch

import autocompress
from autocompress.cost.memory import gemm_shapes
from autocompress.cost.profile import load_profile
from autocompress.feasibility import rounding
from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.metrics import Relaxation

SHIPPED = Path(autocompress.__file__).parent / "cost" / "profiles" / "cpu-vllm-measured.json"


def readme_like(memory_mib: int, shape_mib: float = 3.5):
    """SmolLM2-135M's shape under the README's host contract, with the shipped host profile (not this
    machine's: the test must not depend on what was calibrated here) pricing each GEMM shape."""
    arch = tiny_arch(30, hidden=576, heads=9, head_dim=64, kv=3, ffn=1536, vocab=49152)
    spec = spec_for(serve("ask", 1, inp=256, out=64, tpot=250 * ms),
                    serve("chat", 12, inp=2048, out=32, prefix=0.5, e2e=60.0),
                    hardware="cpu", precision="fp32", memory=memory_mib * MiB)
    s = setup(spec, arch)
    prof = load_profile(SHIPPED, s.device, "vllm")
    return replace(s, profile=replace(prof, memory=replace(prof.memory, gemm_shape_bytes=int(shape_mib * MiB))))


def test_the_points_shape_count_moves_as_the_exact_models():
    s = readme_like(2816)
    d = s.space.hidden_grid[0]
    relax = Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits)
    rng = np.random.default_rng(3)
    base = rounding._shape_count(relax, relax.at)
    counts = set()
    for _ in range(10):
        a = random_arch(rng, s.arch, s.space, d)
        got = rounding._shape_count(relax, rounding.arch_to_x(relax, a)) - base
        assert got == gemm_shapes(a) - gemm_shapes(relax.arch)
        counts.add(got)
    assert len(counts) >= 3


def test_the_repair_reaches_the_bound_that_shape_blind_moves_miss(monkeypatch):
    s = readme_like(2816)
    feas = s.assess()
    assert feas.verdict == "feasible" and feas.start is not None
    ev = evaluate(feas.start.evaluation.arch, s.spec, s.profile, s.device, s.limits)
    assert ev.ok  # the exact model, which counts every shape, accepts it
    monkeypatch.setattr(rounding, "_shape_price", lambda relax: 0.0)  # the repair as it was
    assert s.assess().start is None


@pytest.mark.parametrize("memory_mib", [3000, 3300])
def test_where_the_old_repair_found_a_point_the_new_one_does_too(memory_mib):
    s = readme_like(memory_mib)
    feas = s.assess()
    assert feas.start is not None and feas.start.evaluation.ok
