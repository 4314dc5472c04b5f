"""The accuracy stage on the fixture documents: a killed run resumes where it stopped and gives
the same result; a finished one is cached by content; the summary and retained share."""

import json

import pytest

from _acckit import llama_folder
from autocompress.evaluate.benchmarks.stage import retained, run_accuracy, summary


class Killed(Exception):
    pass


def _loader(calls, die_after=None):
    from transformers import AutoModelForCausalLM

    def load(folder):
        calls.append(folder)
        model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        if die_after is None:
            return model
        seen = [0]
        forward = model.forward

        def counted(*a, **kw):
            seen[0] += 1
            if seen[0] > die_after:
                raise Killed()
            return forward(*a, **kw)
        model.forward = counted
        return model
    return load


@pytest.mark.integration
def test_a_killed_run_resumes_and_a_finished_one_is_cached(tmp_path):
    folder = llama_folder(tmp_path / "m")
    ref = run_accuracy(folder, tmp_path / "w1", _loader([]))
    assert set(ref["tasks"]) == {"arc_easy", "arc_challenge", "hellaswag", "piqa", "winogrande", "boolq",
                                 "openbookqa", "mmlu"}
    assert ref["tasks"]["mmlu"]["n"] == 6 and ref["summary"]["docs"] == 27  # 7 tasks x 3 + 2 subjects x 3

    with pytest.raises(Killed):
        run_accuracy(folder, tmp_path / "w2", _loader([], die_after=10))
    partial = next((tmp_path / "w2").glob("accuracy-*.partial"))
    assert sum(len(p.read_text().splitlines()) for p in partial.glob("*.jsonl")) >= 3
    calls = []
    again = run_accuracy(folder, tmp_path / "w2", _loader(calls))
    strip = lambda r: {t: {k: v for k, v in x.items() if k != "seconds"} for t, x in r["tasks"].items()}  # noqa
    assert strip(again) == strip(ref) and len(calls) == 1
    run_accuracy(folder, tmp_path / "w2", _loader(calls))
    assert len(calls) == 1  # cached: the model is not even loaded
    per_doc = next((tmp_path / "w2").glob("accuracy-*[!l]/per_doc.jsonl")).read_text().splitlines()
    assert len(per_doc) == 27 and {"lls", "gold", "acc", "acc_norm"} <= set(json.loads(per_doc[0]))


def test_summary_and_retained_share():
    tasks = {"a": {"score": 0.5, "stderr": 0.03, "n": 10}, "b": {"score": 0.3, "stderr": 0.04, "n": 20}}
    s = summary(tasks)
    assert s["mean"] == pytest.approx(0.4) and s["stderr"] == pytest.approx(0.025) and s["docs"] == 30
    student = {"tasks": {"a": {"score": 0.25}, "b": {"score": 0.3}}, "summary": {"mean": 0.3}}
    r = retained({"tasks": tasks, "summary": s}, student)
    assert r["mean"] == pytest.approx(0.75) and r["tasks"] == {"a": 0.5, "b": 1.0}
