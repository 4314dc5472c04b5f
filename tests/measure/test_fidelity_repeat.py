"""bench/fidelity_repeat.py: how far two runs' measured ratios of the same models differ."""

import pytest

from _benchkit import bench


def _run(ratios: dict[str, float], workload: str = "shared") -> dict:
    one = lambda r: {k: r for k in ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")}  # noqa: E731
    return {"interleaved": {"reference": "parent",
                            "ratio": {"parent": {workload: one(1.0)}, **{m: {workload: one(r)} for m, r in ratios.items()}}}}


def test_differences_and_order_of_two_runs():
    rep = bench("fidelity_repeat")
    a = _run({"m1": 0.5, "m2": 0.8, "m3": 1.0, "m4": 1.2})
    b = _run({"m1": 0.55, "m2": 0.8, "m3": 0.9, "m4": 1.2, "only-b": 2.0})
    out = rep.compare(a, b)
    s = out[("shared", "tpot_s")]
    assert s["n"] == 4  # the reference and a model of one run only are left out
    assert s["median"] == pytest.approx(0.05) and s["p95"] == pytest.approx(0.1)
    assert s["spearman"] == pytest.approx(1.0)  # the same order
    assert rep.compare(a, b, {"short"}) == {}
    # p95 interpolates between ranks, as every fidelity figure (calibrate.fit.pct): 0, 0, 0.1, 0.2 -> 0.185
    c = rep.compare(a, _run({"m1": 0.5, "m2": 0.8, "m3": 1.1, "m4": 1.44}))[("shared", "tpot_s")]
    assert c["p95"] == pytest.approx(0.185) and c["median"] == pytest.approx(0.05)
    # the order reversed: the host, not the models
    assert rep.compare(a, _run({"m1": 1.2, "m2": 1.0, "m3": 0.8, "m4": 0.5}))[("shared", "e2e_s")]["spearman"] == \
        pytest.approx(-1.0)
