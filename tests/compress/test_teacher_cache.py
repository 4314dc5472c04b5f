"""Teacher outputs are computed once, stored as top-k per chunk, and resumed after a crash."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import _distillkit as kit  # noqa: E402

from autocompress.data.teacher import cache_teacher, topk_of


class Counting:
    """ids -> logits of a tiny Llama, counting rows; raises once ``fail_after`` rows are done."""

    def __init__(self, model, fail_after=None):
        self.model, self.rows, self.fail_after = model, 0, fail_after

    def __call__(self, ids):
        if self.fail_after is not None and self.rows >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.rows += ids.shape[0]
        return self.model(input_ids=ids, use_cache=False).logits


def test_cached_topk_matches_the_teacher(tmp_path):
    model = kit.tiny_llama(0)
    tokens = kit.random_tokens(5, 12)
    cache = cache_teacher(Counting(model), tokens, "tiny-0", k=8, batch=2, chunk_rows=2, dtype=torch.float32, cache_dir=tmp_path)
    with torch.no_grad():
        want = topk_of(model(tokens[[4, 1], :-1]).logits, k=8)
    got = cache.get([4, 1])
    assert torch.equal(got.indices, want.indices)
    assert torch.allclose(got.values, want.values, atol=1e-6) and torch.allclose(got.lse, want.lse, atol=1e-6)
    assert cache.vocab == kit.VOCAB and cache.k == 8
    meta = json.loads((cache.folder / "meta.json").read_text())
    assert meta["rows"] == 5 and sorted(p.name for p in cache.folder.glob("chunk-*")) == [
        "chunk-00000.safetensors", "chunk-00001.safetensors", "chunk-00002.safetensors"]


def test_fp16_values_are_close(tmp_path):
    model = kit.tiny_llama(0)
    tokens = kit.random_tokens(2, 12)
    cache = cache_teacher(Counting(model), tokens, "tiny-0", k=8, cache_dir=tmp_path)
    with torch.no_grad():
        want = topk_of(model(tokens[:, :-1]).logits, k=8)
    assert torch.allclose(cache.get([0, 1]).values, want.values, atol=2e-3)


def test_resume_keeps_finished_chunks(tmp_path):
    model = kit.tiny_llama(0)
    tokens = kit.random_tokens(6, 12)
    crashing = Counting(model, fail_after=4)
    with pytest.raises(KeyboardInterrupt):
        cache_teacher(crashing, tokens, "tiny-0", k=8, batch=2, chunk_rows=2, cache_dir=tmp_path)
    (folder,) = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-00000.safetensors", "chunk-00001.safetensors"]
    resumed = Counting(model)
    cache = cache_teacher(resumed, tokens, "tiny-0", k=8, batch=2, chunk_rows=2, cache_dir=tmp_path)
    assert resumed.rows == 2  # only the last chunk ran
    again = Counting(model)
    cache_teacher(again, tokens, "tiny-0", k=8, batch=2, chunk_rows=2, cache_dir=tmp_path)
    assert again.rows == 0
    fresh = cache_teacher(Counting(model), tokens, "tiny-0", k=8, batch=2, chunk_rows=2, cache_dir=tmp_path / "fresh")
    rows = list(range(6))
    assert torch.equal(cache.get(rows).values, fresh.get(rows).values)


def test_key_follows_teacher_id_and_tokens(tmp_path):
    model = kit.tiny_llama(0)
    tokens = kit.random_tokens(2, 8)
    a = cache_teacher(Counting(model), tokens, "a", cache_dir=tmp_path).folder
    b = cache_teacher(Counting(model), tokens, "b", cache_dir=tmp_path).folder
    c = cache_teacher(Counting(model), kit.random_tokens(2, 8, seed=1), "a", cache_dir=tmp_path).folder
    assert len({a, b, c}) == 3
