"""Two measurement passes of one model merge into one row: metrics averaged, samples pooled."""

from __future__ import annotations

import pytest

from autocompress.calibrate.fit import noise
from autocompress.measure.runner import merge_passes


def _row(scale: float, rss: int) -> dict:
    samples = [{"ttft_s": 0.2 * scale * f, "e2e_s": 3.0 * scale * f, "output_tokens": 32} for f in (0.95, 1.0, 1.05)]
    m = {"workload": "short", "ttft_s": 0.2 * scale, "tpot_s": 2.8 / 31 * scale, "e2e_s": 3.0 * scale,
         "throughput_tok_s": 32 / (3.0 * scale), "samples": samples}
    return {"arch": "a", "limits": None, "result": {"measurements": [m], "peak_rss_bytes": rss, "load_before": [1.0]}}


def test_merge_passes_averages_and_pools():
    a, b = _row(1.0, 100), _row(1.2, 300)
    m = merge_passes(a, b)
    got = m["result"]["measurements"][0]
    assert got["e2e_s"] == pytest.approx(3.3) and got["ttft_s"] == pytest.approx(0.22)
    assert got["throughput_tok_s"] == pytest.approx((32 / 3.0 + 32 / 3.6) / 2)
    assert len(got["samples"]) == 6 and m["result"]["peak_rss_bytes"] == 200
    assert m["passes"] == (a["result"], b["result"])
    # the pooled samples carry the pass-to-pass spread into the measurement's standard error
    assert noise([m])["e2e"][0] > noise([a])["e2e"][0]
