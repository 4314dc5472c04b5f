"""A damaged teacher top-k chunk or token cache is a warning and a recompute (same result as a clean
compute), never a load; processes sharing these caches compute them once."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import _distillkit as kit  # noqa: E402
from test_teacher_cache import Counting  # noqa: E402

from autocompress.data.corpus import Corpus, Document
from autocompress.data.teacher import cache_teacher
from autocompress.data.tokens import token_stream


def truncate(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def flip(p):
    data = bytearray(p.read_bytes())
    data[-3] ^= 0x10  # tensor data: the file still parses
    p.write_bytes(bytes(data))


def garble_header(p):
    data = bytearray(p.read_bytes())
    data[10] ^= 0x20
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [truncate, flip, garble_header])
def test_a_damaged_teacher_chunk_is_recomputed(tmp_path, damage):
    model = kit.tiny_llama(0)
    tokens = kit.random_tokens(6, 12)
    first = Counting(model)
    clean = cache_teacher(first, tokens, "tiny-0", k=8, batch=2, chunk_rows=2, dtype=torch.float32,
                          cache_dir=tmp_path, log=lambda m: None)
    want = clean.get(list(range(6)))
    damage(clean.folder / "chunk-00001.safetensors")
    logs, again = [], Counting(model)
    cache = cache_teacher(again, tokens, "tiny-0", k=8, batch=2, chunk_rows=2, dtype=torch.float32,
                          cache_dir=tmp_path, log=logs.append)
    assert again.rows == 2  # that chunk's rows only
    (line,) = logs
    assert line.startswith(f"warning: cached teacher outputs at {clean.folder} are corrupt (chunk-00001.safetensors: ")
    assert line.endswith("); recomputing")
    got = cache.get(list(range(6)))
    assert torch.equal(got.indices, want.indices) and torch.equal(got.values, want.values)
    assert torch.equal(got.lse, want.lse)
    third = Counting(model)
    cache_teacher(third, tokens, "tiny-0", k=8, batch=2, chunk_rows=2, dtype=torch.float32, cache_dir=tmp_path,
                  log=logs.append)
    assert third.rows == 0 and len(logs) == 1


def test_a_damaged_chunk_of_an_interrupted_run_is_recomputed(tmp_path):
    model = kit.tiny_llama(0)
    tokens = kit.random_tokens(6, 12)
    with pytest.raises(KeyboardInterrupt):
        cache_teacher(Counting(model, fail_after=4), tokens, "tiny-0", k=8, batch=2, chunk_rows=2, cache_dir=tmp_path,
                      log=lambda m: None)
    (folder,) = tmp_path.iterdir()
    truncate(folder / "chunk-00000.safetensors")
    logs, again = [], Counting(model)
    cache_teacher(again, tokens, "tiny-0", k=8, batch=2, chunk_rows=2, cache_dir=tmp_path, log=logs.append)
    assert again.rows == 4 and len(logs) == 1 and "chunk-00000.safetensors" in logs[0]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return kit.build_tokenizer(tmp_path_factory.mktemp("tok"))


def _corpus(n=30):
    return Corpus(tuple(Document(f"def f{i}(x):\n    return x * {i}\n", "code", f"c{i}") for i in range(n)), "synthetic")


@pytest.mark.parametrize("damage", [truncate, flip, garble_header])
def test_a_damaged_token_cache_is_retokenized(tmp_path, tok_dir, damage):
    clean = token_stream(_corpus(), tok_dir, cache_dir=tmp_path, log=lambda m: None)
    want = clean.tokens.clone(), clean.offsets.clone()
    damage(clean.path)
    logs = []
    again = token_stream(_corpus(), tok_dir, cache_dir=tmp_path, log=logs.append)
    (line,) = logs
    assert line.startswith(f"warning: cached tokens at {clean.path.parent} are corrupt (tokens.safetensors: ")
    assert torch.equal(again.tokens, want[0]) and torch.equal(again.offsets, want[1]) and again.bos == clean.bos
    logs.clear()
    token_stream(_corpus(), tok_dir, cache_dir=tmp_path, log=logs.append)
    assert logs == []
