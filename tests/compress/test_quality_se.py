"""Standard errors of the held-out metrics (over rows) and the quality block's sets and domain gaps."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from autocompress.data.corpus import HeldoutSource
from autocompress.evaluate.heldout import GAP_RATIO, compared, domain_gaps
from autocompress.evaluate.quality import evaluate_tokens, row_se


def fixed(row):
    row = torch.tensor(row, dtype=torch.float32)
    return lambda ids: row.expand(ids.shape[0], ids.shape[1], row.numel()).clone()


def test_row_se_is_sample_sd_over_sqrt_n():
    assert row_se([1.0]) is None and row_se([]) is None
    assert row_se([1.0, 3.0]) == pytest.approx(1.0)  # sd sqrt(2), / sqrt(2)
    assert row_se([2.0] * 5) == 0.0


def test_hand_computed_standard_errors():
    # q = softmax([0, ln 3]) = (1/4, 3/4): row 0 predicts 1, 1 (nll -ln 3/4), row 1 predicts 0, 0 (-ln 1/4)
    model, uniform = fixed([0.0, math.log(3.0)]), fixed([0.0, 0.0])
    tokens = torch.tensor([[1, 1, 1], [0, 0, 0]])
    s = evaluate_tokens(model, tokens, batch=1)
    a, b = -math.log(0.75), -math.log(0.25)
    assert (s.rows, s.tokens) == (2, 4) and s.nll == pytest.approx((a + b) / 2)
    assert s.nll_se == pytest.approx(abs(a - b) / 2) and s.ppl_se == pytest.approx(s.ppl * abs(a - b) / 2)
    # against a parent: every position has the same KL and disagreement, so their SEs are 0
    k = evaluate_tokens(uniform, tokens, model, batch=2)
    assert k.kl_se == pytest.approx(0.0, abs=1e-7) and k.top1 == 0.0 and k.top1_se == 0.0
    one = evaluate_tokens(model, tokens[:1])
    assert one.rows == 1 and one.nll_se is None and one.ppl_se is None


def _q(kl):
    return {"tokens": 10, "ppl": 2.0, "kl": kl, "top1": 0.5}


SETS = (HeldoutSource("code", "code", "stdlib", True), HeldoutSource("prose", "prose", "pydoc", True),
        HeldoutSource("code-ood", "code", "lark", False, "MIT"),
        HeldoutSource("prose-ood", "prose", "spdx", False, "CC0-1.0"))


def test_domain_gaps_flag_only_past_the_threshold():
    student = {"code": _q(0.4), "prose": _q(0.2), "code-ood": _q(0.55), "prose-ood": _q(0.7)}
    gaps = {g["kind"]: g for g in domain_gaps(student, SETS)}
    assert gaps["code"]["ratio"] == pytest.approx(1.375) and not gaps["code"]["flagged"] and GAP_RATIO == 1.5
    assert gaps["prose"]["ratio"] == pytest.approx(3.5) and gaps["prose"]["flagged"]
    assert domain_gaps({"code": _q(0.4), "prose": _q(None)}, SETS) == []  # nothing out of domain, no KL


def test_compared_carries_the_sets_that_were_measured():
    parent = {"heldout": {"code": _q(None), "code-ood": _q(None)}, "humaneval": None}
    student = {"heldout": {"code": _q(0.4), "code-ood": _q(0.5)}, "humaneval": None}
    q = compared(parent, student, SETS, ("prose-ood: the spdx package is not installed",))
    assert [s["name"] for s in q["sets"]] == ["code", "code-ood"] and q["sets"][1]["license"] == "MIT"
    assert q["sets_missing"] == ["prose-ood: the spdx package is not installed"]
    assert [g["out_of_domain"] for g in q["domain_gaps"]] == ["code-ood"]
    assert compared(parent, student)["sets"] == []  # callers without sets (benchmarks) still work
