"""Paired differences between two models on the same documents (accuracy.paired)."""

import json
import statistics

import pytest

from autocompress.evaluate.benchmarks.paired import paired_difference, per_doc_path


def _rows(task, scores, metric="acc"):
    return [{"task": task, "doc": i, metric: float(s), ("acc_norm" if metric == "acc" else "acc"): 0.0}
            for i, s in enumerate(scores)]


def test_the_difference_is_taken_document_by_document_on_the_primary_metric():
    a = _rows("arc_easy", [1, 1, 0, 1]) + _rows("hellaswag", [1, 0, 0, 0], metric="acc_norm")
    b = _rows("arc_easy", [1, 0, 0, 0]) + _rows("hellaswag", [0, 0, 0, 1], metric="acc_norm")
    d = paired_difference(a, b)
    assert d["tasks"]["arc_easy"]["diff"] == pytest.approx(0.5)
    assert d["tasks"]["arc_easy"]["stderr"] == pytest.approx(statistics.stdev([0, 1, 0, 1]) / 2)
    assert d["tasks"]["hellaswag"]["diff"] == pytest.approx(0.0)  # acc_norm, not the zero acc column
    assert d["diff"] == pytest.approx(0.25)
    se = (d["tasks"]["arc_easy"]["stderr"] ** 2 + d["tasks"]["hellaswag"]["stderr"] ** 2) ** 0.5 / 2
    assert d["stderr"] == pytest.approx(se)


def test_identical_models_differ_by_zero_with_zero_error_and_only_shared_documents_count():
    a = _rows("arc_easy", [1, 0, 1, 1, 0])
    d = paired_difference(a, a[:3])
    assert d["diff"] == 0.0 and d["stderr"] == 0.0 and d["tasks"]["arc_easy"]["n"] == 3
    with pytest.raises(ValueError, match="arc_easy"):
        paired_difference(a, _rows("piqa", [1]))


def test_the_documents_are_found_by_the_stage_result_they_belong_to(tmp_path):
    for name, mean in (("accuracy-aaa", 0.4), ("accuracy-bbb", 0.5), ("accuracy-ccc", 0.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "accuracy.json").write_text(json.dumps({"summary": {"mean": mean}}))
        (tmp_path / name / "per_doc.jsonl").write_text("")
    (tmp_path / "accuracy-bbb" / "DONE").write_text("{}")  # ccc is unfinished: never used
    (tmp_path / "accuracy-aaa" / "DONE").write_text("{}")
    assert per_doc_path({"summary": {"mean": 0.5}}, tmp_path) == tmp_path / "accuracy-bbb" / "per_doc.jsonl"
    assert per_doc_path({"summary": {"mean": 0.3}}, tmp_path) is None


def test_repeats_are_pooled_document_by_document_before_the_error_is_taken():
    from autocompress.evaluate.benchmarks.paired import pooled_difference

    a1, b1 = _rows("arc_easy", [1, 1, 0, 0]), _rows("arc_easy", [0, 1, 0, 1])  # diffs 1, 0, 0, -1
    a2, b2 = _rows("arc_easy", [1, 0, 1, 0]), _rows("arc_easy", [0, 0, 0, 0])  # diffs 1, 0, 1, 0
    p = pooled_difference([(a1, b1), (a2, b2)])
    per_doc = [1.0, 0.0, 0.5, -0.5]  # each document's mean over the two seeds
    assert p["diff"] == pytest.approx(statistics.fmean(per_doc)) and p["repeats"] == 2
    assert p["stderr"] == pytest.approx(statistics.stdev(per_doc) / 2)
    # one repeat is the plain paired difference
    one = pooled_difference([(a1, b1)])
    assert (one["diff"], one["stderr"]) == pytest.approx((paired_difference(a1, b1)["diff"],
                                                          paired_difference(a1, b1)["stderr"]))
    # the same comparison twice is no more certain than once: the documents are shared
    twice = pooled_difference([(a1, b1), (a1, b1)])
    assert twice["stderr"] == pytest.approx(one["stderr"])
    with pytest.raises(ValueError):
        pooled_difference([])
