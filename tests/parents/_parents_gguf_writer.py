"""A minimal GGUF v3 writer for tests: just enough to produce valid headers (no tensor data)."""

from __future__ import annotations

import struct

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_CODES = {UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i", FLOAT32: "f", BOOL: "?",
          UINT64: "Q", INT64: "q", FLOAT64: "d"}


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(vtype: int, value) -> bytes:
    if vtype == STRING:
        return _str(value)
    if vtype == ARRAY:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, v) for v in items)
    return struct.pack("<" + _CODES[vtype], value)


def gguf_bytes(kvs: list[tuple[str, int, object]], tensors: list[tuple[str, tuple[int, ...], int, int]] = (),
               version: int = 3) -> bytes:
    """kvs: (key, type, value); array values are (element type, list). tensors: (name, dims, type, offset)."""
    out = [b"GGUF", struct.pack("<IQQ", version, len(tensors), len(kvs))]
    for key, vtype, value in kvs:
        out += [_str(key), struct.pack("<I", vtype), _value(vtype, value)]
    for name, dims, ggml_type, offset in tensors:
        out += [_str(name), struct.pack("<I", len(dims)), b"".join(struct.pack("<Q", d) for d in dims),
                struct.pack("<IQ", ggml_type, offset)]
    return b"".join(out)


def llama_gguf(layers=2, hidden=64, ffn=128, heads=4, kv=2, vocab=10, tied=True, arch="llama",
               extra=()) -> bytes:
    tokens = [f"t{i}" for i in range(vocab)]
    kvs = [("general.architecture", STRING, arch), ("general.name", STRING, "tiny"),
           (f"{arch}.block_count", UINT32, layers), (f"{arch}.context_length", UINT32, 2048),
           (f"{arch}.embedding_length", UINT32, hidden), (f"{arch}.feed_forward_length", UINT32, ffn),
           (f"{arch}.attention.head_count", UINT32, heads), (f"{arch}.attention.head_count_kv", UINT32, kv),
           (f"{arch}.rope.freq_base", FLOAT32, 10000.0), ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
           *extra]
    tensors = [("token_embd.weight", (hidden, vocab), 0, 0)]
    if not tied:
        tensors.append(("output.weight", (hidden, vocab), 0, hidden * vocab * 4))
    return gguf_bytes(kvs, tensors)
