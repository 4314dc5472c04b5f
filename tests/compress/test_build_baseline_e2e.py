"""``acc build --baseline uniform`` on the tiny parent: the uniform arm chooses among its grid's
frontier by measured KL and lists its candidates under ``baseline`` in the report JSON; both arms
carry the eight-benchmark accuracy (fixture documents) beside the held-out quality."""

import json

import pytest

from _buildkit import count_parses, make_project, shortlist_choice

pytestmark = pytest.mark.integration


def test_uniform_baseline_is_a_measured_choice_listed_in_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    spec = make_project(tmp_path)
    from autocompress.build.pipeline import run_build

    logs: list[str] = []
    parses, resolves = count_parses(monkeypatch)
    result = run_build(str(spec), progress=logs.append, baseline="uniform")
    # both arms and every stage read one parse of the spec and one resolution of its parent
    assert (len(parses), len(resolves)) == (1, 1), (parses, resolves)
    report = json.loads((result.output / "autocompress-report.json").read_text())
    b = report["baseline"]
    cands = b["refine"]["candidates"]
    assert len(cands) >= 2 and b["refine"]["forwards"] == len(cands)
    assert b["refine"]["tokens"] <= b["refine"]["budget_tokens"]
    # the same selection procedure as autocompress: its least-KL candidates, distilled briefly with the
    # same number of finalists, steps and validation rows; the least KL after is built
    sl, own = b["shortlist"], report["shortlist"]
    ranked = sorted(cands, key=lambda c: c["kl"])
    assert [f["name"] for f in sl["finalists"]] == [c["name"] for c in ranked[:len(sl["finalists"])]]
    assert len(sl["finalists"]) == min(len(cands), 4) >= 2  # the default number of finalists
    assert (sl["steps"], sl["validation_tokens"]) == (own["steps"], own["validation_tokens"])
    pick = sl["finalists"][sl["chosen"]]
    assert sl["chosen"] == shortlist_choice(sl) and own["chosen"] == shortlist_choice(own)
    assert b["architecture"]["params"] == pick["params"] and b["how"].startswith("short-distillation choice")
    assert all(c["ok"] for c in b["predicted"]["checks"])  # the chosen uniform point meets the contract
    assert b["quality"]["accuracy"]["student"]["summary"]["docs"] == 27
    assert any(m.startswith("[baseline] measured choice") for m in logs)
    md = (result.output / "autocompress-report.md").read_text()
    assert "eight-benchmark mean" in md and "### Benchmark accuracy" in md
    assert "### Finalists of the uniform baseline" in md
