"""The data stage's held-out sets on a real tokenizer: the corpus's own split, the out-of-domain
sets, and the spec's ``evaluate { data }`` (the deployment's text), each with rows and a description."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from _exportkit import build_tokenizer  # noqa: E402

from autocompress.data.stage import prepare_data  # noqa: E402


@pytest.mark.integration
def test_evaluate_data_becomes_scored_sets_and_is_never_trained_on(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    tok = build_tokenizer(tmp_path / "tok")
    data = tmp_path / "data"
    data.mkdir()
    for i in range(40):  # distillation text: enough documents that some fall in the 5% held-out split
        (data / f"d{i}.md").write_text(f"document {i} of the distillation text. " * 20)
    (data / "use.md").write_text("text the deployment will see, which the distillation never reads. " * 30)
    spec = SimpleNamespace(distill=SimpleNamespace(data=("data/d*.md",)),
                           evaluate=SimpleNamespace(data=("data/use.md",)))
    settings = SimpleNamespace(seq_len=32, eval_rows=4, seed=0, calib_rows=4, teacher_rows=4)
    with_eval = prepare_data(spec, tok, settings, str(tmp_path))
    assert "prose-eval" in with_eval.heldout and len(with_eval.heldout["prose-eval"]) == 4
    source = next(s for s in with_eval.heldout_sets if s.name == "prose-eval")
    assert not source.in_domain and "evaluate data (data/use.md)" in source.sources
    without = prepare_data(SimpleNamespace(distill=spec.distill, evaluate=None), tok, settings, str(tmp_path))
    assert "prose-eval" not in without.heldout
    assert without.key != with_eval.key  # the sets are part of what the data stage's key names
    assert (without.train == with_eval.train).all()  # the deployment text is scored, never trained on
