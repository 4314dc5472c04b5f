"""Tokenization once, cached by content; packing into next-token rows; splits and kinds."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import _distillkit as kit  # noqa: E402

from autocompress.data import tokens as data
from autocompress.data.corpus import Corpus, Document
from autocompress.data.tokens import token_dataset, token_stream


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return kit.build_tokenizer(tmp_path_factory.mktemp("tok"))


def _corpus(n=200):
    docs = [Document(f"def f{i}(x):\n    return x * {i}\n", "code", f"c{i}") for i in range(n)]
    docs += [Document(f"The topic number {i} explains the for statement.", "prose", f"p{i}") for i in range(n)]
    return Corpus(tuple(docs), "synthetic")


def test_stream_matches_tokenizer_and_is_cached(tmp_path, tok_dir, monkeypatch):
    from transformers import AutoTokenizer

    corpus = _corpus(20)
    s = token_stream(corpus, tok_dir, cache_dir=tmp_path)
    assert s.path.is_file() and s.path.parent.parent == tmp_path
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    docs = {d.digest: d for d in corpus.docs}
    for i in (0, 7, 39):
        want = tok(docs[s.digests[i]].text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert s.tokens[s.offsets[i] : s.offsets[i + 1]].tolist() == want
    assert list(s.digests) == sorted(s.digests)

    # a hit never loads the tokenizer
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: pytest.fail("re-tokenized"))
    again = token_stream(Corpus(tuple(reversed(corpus.docs)), "reordered"), tok_dir, cache_dir=tmp_path)
    assert torch.equal(again.tokens, s.tokens) and again.path == s.path


def test_cache_key_follows_text_and_tokenizer(tmp_path, tok_dir):
    a = token_stream(_corpus(5), tok_dir, cache_dir=tmp_path).path
    b = token_stream(Corpus(_corpus(5).docs[:-1], "x"), tok_dir, cache_dir=tmp_path).path
    cfg = tok_dir / "tokenizer_config.json"
    original = cfg.read_text()
    try:
        cfg.write_text(original + " ")  # any byte of a tokenizer file changes the key
        c = token_stream(_corpus(5), tok_dir, cache_dir=tmp_path).path
    finally:
        cfg.write_text(original)
    assert len({a, b, c}) == 3


def test_pack_rows_are_contiguous_windows():
    stream = torch.arange(23, dtype=torch.int32)
    rows = data.pack(stream, seq_len=4)
    assert rows.dtype == torch.int64 and rows.shape == (4, 5)
    assert rows[1].tolist() == [5, 6, 7, 8, 9]
    assert data.pack(stream, 4, max_tokens=9).shape == (2, 5)


def test_pack_puts_bos_first_in_every_row_when_given():
    stream = torch.arange(10, 23, dtype=torch.int32)
    rows = data.pack(stream, seq_len=4, bos=1)
    assert rows.shape == (3, 5) and rows[:, 0].tolist() == [1, 1, 1]
    assert rows[1].tolist() == [1, 14, 15, 16, 17]  # contiguous windows of seq_len after the BOS
    assert data.pack(stream, 4, max_tokens=8, bos=1).shape == (2, 5)


def test_rows_start_with_bos_only_for_a_tokenizer_that_adds_one(tmp_path_factory, tmp_path, tok_dir):
    """Gemma's tokenizer starts every text with BOS and the model needs it at position 0; SmolLM2's adds
    none. The choice is stored with the cached stream, so a cache hit packs the same rows."""
    bos_dir = kit.build_tokenizer(tmp_path_factory.mktemp("tok-bos"), bos=True)
    corpus = _corpus()
    plain = token_dataset(corpus, tok_dir, seq_len=8, cache_dir=tmp_path / "a")
    first = token_dataset(corpus, bos_dir, seq_len=8, cache_dir=tmp_path / "b")
    again = token_dataset(corpus, bos_dir, seq_len=8, cache_dir=tmp_path / "b")  # from the cache file
    assert token_stream(corpus, bos_dir, cache_dir=tmp_path / "b").bos == 0
    assert token_stream(corpus, tok_dir, cache_dir=tmp_path / "a").bos is None
    assert (first[:, 0] == 0).all() and torch.equal(first, again)
    assert (plain[:, 0] != 0).any() and first.shape[1] == plain.shape[1] == 9


def test_splits_and_kinds_partition_the_corpus(tmp_path, tok_dir):
    corpus = _corpus()
    s = token_stream(corpus, tok_dir, cache_dir=tmp_path)
    parts = {(sp, k): s.select(sp, k).numel() for sp in data.SPLITS for k in data.KINDS}
    assert sum(parts.values()) == s.tokens.numel()
    assert all(parts.values())  # 400 docs: every split x kind cell is populated
    held = token_dataset(corpus, tok_dir, 16, split="heldout", kind="code", cache_dir=tmp_path)
    train = token_dataset(corpus, tok_dir, 16, split="train", cache_dir=tmp_path, max_tokens=160)
    assert held.shape[1] == 17 and train.shape == (10, 17)
    want = s.select("heldout", "code")
    assert held.flatten().tolist() == want[: held.numel()].long().tolist()
    with pytest.raises(data.DataError, match="split, allowed train | heldout, got 'test'"):
        token_dataset(corpus, tok_dir, 16, split="test", cache_dir=tmp_path)


def test_mixed_dataset_weights(tmp_path, tok_dir):
    corpus = _corpus()
    code = token_dataset(corpus, tok_dir, 8, kind="code", cache_dir=tmp_path)
    prose = token_dataset(corpus, tok_dir, 8, kind="prose", cache_dir=tmp_path)
    mixed = data.mixed_dataset(corpus, tok_dir, 8, {"code": 0.25, "prose": 0.75}, max_tokens=8 * 40, cache_dir=tmp_path)
    assert mixed.shape == (40, 9)
    code_rows = {tuple(r) for r in code.tolist()}
    assert sum(tuple(r) in code_rows for r in mixed.tolist()) == 10
    natural = data.mixed_dataset(corpus, tok_dir, 8, {"code": 1, "prose": 1}, cache_dir=tmp_path)
    assert natural.shape[0] == 2 * min(code.shape[0], prose.shape[0])
    with pytest.raises(data.DataError, match="kind, allowed code | prose, got 'poetry'"):
        data.mixed_dataset(corpus, tok_dir, 8, {"poetry": 1.0})


def test_mixed_dataset_one_kind_corpus(tmp_path, tok_dir):
    prose_only = Corpus(tuple(d for d in _corpus().docs if d.kind == "prose"), "prose only")
    with pytest.raises(data.DataError, match="no train rows of kind code at seq_len 8"):
        data.mixed_dataset(prose_only, tok_dir, 8, {"code": 0.5, "prose": 0.5}, cache_dir=tmp_path)
    rows = data.mixed_dataset(prose_only, tok_dir, 8, {"code": 0.5, "prose": 0.5}, cache_dir=tmp_path, skip_missing=True)
    assert rows.shape[0] == token_dataset(prose_only, tok_dir, 8, kind="prose", cache_dir=tmp_path).shape[0]
