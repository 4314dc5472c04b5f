"""``acc eval``: the table for a model and its parent (fixture documents), exit codes, and the
rendered report pinned by a golden file."""

import json
from pathlib import Path

import pytest

from _acckit import llama_folder
from autocompress.cli.main import main
from autocompress.report.accuracy import render_accuracy_markdown

GOLDEN = Path(__file__).parent / "golden" / "accuracy.md"


def _result(score, se):
    return {"n": 150, "total": 2376, "metric": "acc", "score": score, "stderr": se}


REPORT = {
    "student": {"tasks": {"arc_easy": _result(0.5, 0.04), "mmlu": {**_result(0.25, 0.03), "n": 200, "total": 14042}},
                "summary": {"mean": 0.375, "stderr": 0.025, "tasks": 2, "docs": 350},
                "settings": {"seed": 1234, "full": False}, "humaneval": {"mean_logprob": -2.5}},
    "parent": {"tasks": {"arc_easy": _result(0.6, 0.04), "mmlu": {**_result(0.3, 0.03), "n": 200, "total": 14042}},
               "summary": {"mean": 0.45, "stderr": 0.025, "tasks": 2, "docs": 350}, "humaneval": {"mean_logprob": -1.1}},
    "retained": {"mean": 0.375 / 0.45, "tasks": {"arc_easy": 0.5 / 0.6, "mmlu": 0.25 / 0.3}},
    "heldout": {"code": {"parent_ppl": 6.08, "student_ppl": 14.16}},
}


def test_render_matches_the_golden_file():
    assert render_accuracy_markdown(REPORT) == GOLDEN.read_text()


@pytest.mark.integration
def test_acc_eval_prints_parent_student_and_retained(tmp_path, capsys):
    student, parent = llama_folder(tmp_path / "s", seed=1), llama_folder(tmp_path / "p", seed=0)
    out = tmp_path / "r.json"
    assert main(["eval", str(student), "--parent", str(parent), "--tasks", "piqa,boolq", "--json", str(out),
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "| PIQA | acc_norm | 3/3 |" in text and "retained" in text
    r = json.loads(out.read_text())
    assert set(r["student"]["tasks"]) == {"piqa", "boolq"} and r["retained"]["mean"] > 0
    assert r["parent_source"] == f"--parent {parent}"


def test_acc_eval_errors_name_the_fix(tmp_path, capsys, monkeypatch):
    assert main(["eval", str(tmp_path)]) == 2
    assert "not a model folder (no config.json)" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    assert main(["eval", str(tmp_path), "--tasks", "arc"]) == 2
    assert "unknown arc; allowed: arc_easy," in capsys.readouterr().err
    monkeypatch.setenv("ACC_EVAL_DATA", str(tmp_path / "none"))
    assert main(["eval", str(tmp_path)]) == 2
    assert "install it once with:" in capsys.readouterr().err
