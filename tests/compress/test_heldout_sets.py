"""The held-out sets the build scores: the corpus's own split (in the distillation's domain) and
the out-of-domain sets from installed packages it never reads, each described for the report."""

from __future__ import annotations

import importlib.metadata

import pytest

from autocompress.data import corpus
from autocompress.data.corpus import (OOD_MAX_CHARS, OUT_OF_DOMAIN, Corpus, Document, in_domain_sources, missing_ood,
                                      ood_documents, sections)


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_sections_cut_at_blank_lines():
    text = "\n\n".join(["a" * 10] * 7)
    assert sections(text, 25) == ["\n\n".join(["a" * 10] * 3)] * 2 + ["a" * 10]
    assert sections("\n\n\n\n", 5) == [] and sections("short", 100) == ["short"]


@pytest.mark.parametrize("ood", OUT_OF_DOMAIN, ids=lambda o: o.name)
def test_out_of_domain_set_is_described_capped_and_deterministic(ood):
    if not _installed(ood.dist):
        pytest.skip(f"{ood.dist} is not installed (scripts/install-full.sh installs it)")
    source, docs = ood_documents(ood)
    assert source.name == ood.name and source.kind == ood.kind and source.in_domain is False
    assert source.license == ood.license and f"{ood.dist} {importlib.metadata.version(ood.dist)}" in source.sources
    assert docs.docs and all(d.kind == ood.kind and d.source.startswith(f"{ood.dist}:{ood.prefix}") for d in docs.docs)
    digests = [d.digest for d in docs.docs]
    assert digests == sorted(digests)  # digest order: a row prefix samples many files
    chars = sum(len(d.text) for d in docs.docs)
    assert chars - len(docs.docs[-1].text) < OOD_MAX_CHARS and f"({chars:,} characters)" in source.sources
    assert ood_documents(ood) == (source, docs)
    dropped = ood_documents(ood, frozenset(digests[:3]))[1]
    assert not set(digests[:3]) & {d.digest for d in dropped.docs}


def test_the_default_mixture_never_reads_an_out_of_domain_document():
    mixture = {d.digest for d in corpus.default_mixture().docs}
    for ood in OUT_OF_DOMAIN:
        found = ood_documents(ood)
        if found is not None:
            assert not mixture & {d.digest for d in found[1].docs}, ood.name


def test_a_missing_package_is_said_not_guessed(monkeypatch):
    real = importlib.metadata.distribution

    def distribution(name):
        if name == "spdx":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(corpus.importlib.metadata, "distribution", distribution)
    prose = next(o for o in OUT_OF_DOMAIN if o.dist == "spdx")
    assert ood_documents(prose) is None
    assert "prose-ood: the spdx package is not installed (scripts/install-full.sh installs it)" in missing_ood()


def test_in_domain_sets_name_their_sources():
    code, prose = in_domain_sources(None, corpus.Corpus((), "default"))
    assert (code.name, code.in_domain, prose.name) == ("code", True, "prose")
    assert "standard-library" in code.sources and "5% hash split" in code.sources and "pydoc" in prose.sources
    user = Corpus((Document("x", "prose", "a.jsonl:1"),), "my/*.jsonl")
    assert all("the spec's distill data (my/*.jsonl)" in s.sources for s in in_domain_sources(["my/*.jsonl"], user))


def test_the_specs_evaluate_data_is_a_set_per_kind_of_what_the_distillation_does_not_read(tmp_path):
    (tmp_path / "a.md").write_text("deployment prose one")
    (tmp_path / "b.md").write_text("deployment prose two, also distilled on")
    (tmp_path / "c.py").write_text("def deployment_code():\n    return 1\n")
    evaluate = corpus.load_corpus(["*.md", "*.py"], tmp_path)
    distilled = corpus.load_corpus(["b.md"], tmp_path)
    sets = corpus.evaluate_documents(evaluate, frozenset(d.digest for d in distilled.docs))
    assert [(s.name, s.kind, s.in_domain) for s, _ in sets] == [("code-eval", "code", False),
                                                                ("prose-eval", "prose", False)]
    (code, code_docs), (prose, prose_docs) = sets
    assert [d.text for d in prose_docs.docs] == ["deployment prose one"]  # the distilled document is left out
    assert "1 of 2 (those the distillation does not read)" in prose.sources and "evaluate data" in prose.sources
    assert len(code_docs.docs) == 1 and "1 of 1" in code.sources
