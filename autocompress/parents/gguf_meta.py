"""A small pure-Python GGUF header reader: magic, version, metadata key/values, tensor infos.

It stops before the tensor data, so reading the 98 MB SmolLM2 file takes milliseconds: the file
is memory-mapped and only the pages holding the header (about 1.5 MB of tokenizer arrays for
SmolLM2) are touched. No dependency on the ``gguf`` package.

Layout (ggml ``docs/gguf.md``, all little-endian): ``"GGUF"`` magic, ``uint32`` version, tensor
count and KV count (``uint64`` since v2, ``uint32`` in v1), then the KV pairs (``string`` key,
``uint32`` value type, value), then one info per tensor (``string`` name, ``uint32`` n_dims,
``n_dims`` x ``uint64`` dims, ``uint32`` ggml type, ``uint64`` offset into the data section).
Strings are a length (``uint64``, v1 ``uint32``) followed by UTF-8 bytes.

``architecture_from_gguf`` turns llama.cpp's metadata keys (``{arch}.block_count`` ...) into the
IR: the keys every architecture shares give Llama blocks, and the family's reader
(``families.readers.GGUF_READERS``, keyed by ``general.architecture``) adds what is its own.

Errors name the key or the place (an offset) and what was expected, never a value, a name or
bytes read from the file: a spec may name any file, and its errors reach review comments.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from autocompress.families.readers import GGUF_READERS
from autocompress.ir import MLP, Architecture, Attention, Block

GGUF_MAGIC = b"GGUF"

# value type id -> struct code (8 = string and 9 = array are handled apart)
_SCALARS = {
    0: "B",  # uint8
    1: "b",  # int8
    2: "H",  # uint16
    3: "h",  # int16
    4: "I",  # uint32
    5: "i",  # int32
    6: "f",  # float32
    7: "?",  # bool
    10: "Q",  # uint64
    11: "q",  # int64
    12: "d",  # float64
}
T_STRING, T_ARRAY = 8, 9


class GGUFError(ValueError):
    """The file is not a GGUF file, or its header is truncated or inconsistent."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order: fastest-varying dimension first (token_embd is [d, V])
    ggml_type: int
    offset: int  # relative to the start of the (aligned) data section


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Any]  # arrays come back as lists (string arrays as a lazy StringArray)
    tensors: tuple[TensorInfo, ...]
    header_size: int  # bytes up to the end of the tensor infos (data starts after alignment)
    sha256: str  # of those header bytes: a cheap content hash that never touches the weights

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def tensor_names(self) -> set[str]:
        return {t.name for t in self.tensors}

    def tensor(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)


class _Cursor:
    """Sequential little-endian reads over a bytes-like buffer, with truncation checks."""

    def __init__(self, buf, version: int = 3):
        self.buf = buf
        self.pos = 0
        self.len_code = "<Q" if version >= 2 else "<I"
        self.len_size = 8 if version >= 2 else 4
        self.lazy: list[StringArray] = []

    def need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise GGUFError(f"truncated header: a value at offset {self.pos} runs past the end of the file")

    def unpack(self, code: str):
        size = struct.calcsize(code)
        self.need(size)
        value = struct.unpack_from(code, self.buf, self.pos)
        self.pos += size
        return value[0] if len(value) == 1 else value

    def length(self) -> int:
        return self.unpack(self.len_code)

    def string(self) -> str:
        n = self.length()
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(raw).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.unpack("<" + _SCALARS[vtype])
        if vtype == T_STRING:
            return self.string()
        if vtype == T_ARRAY:
            etype = self.unpack("<I")
            count = self.length()
            if etype in _SCALARS:
                # One unpack call for the whole array: fast even for big score tables.
                code = _SCALARS[etype]
                size = struct.calcsize(code) * count
                self.need(size)
                values = list(struct.unpack_from(f"<{count}{code}", self.buf, self.pos)) if count else []
                self.pos += size
                return values
            if etype == T_STRING:
                return self._strings(count)
            if etype == T_ARRAY:
                return [self.value(T_ARRAY) for _ in range(count)]
            raise GGUFError(f"unknown array element type at offset {self.pos}")
        raise GGUFError(f"unknown value type at offset {self.pos}")

    def _strings(self, count: int) -> "StringArray":
        # Tokenizer token and merge lists hold ~100k strings for SmolLM2. Decoding them all would
        # dominate the read time, so only the lengths are walked here; the strings are decoded on
        # first use (``len()`` is free: it is the stored count).
        buf, pos, end = self.buf, self.pos, len(self.buf)
        unpack_len, lsize = struct.Struct(self.len_code).unpack_from, self.len_size
        start = pos
        for _ in range(count):
            if pos + lsize > end:
                raise GGUFError(f"truncated string array at offset {pos}")
            pos += lsize + unpack_len(buf, pos)[0]
        if pos > end:
            raise GGUFError(f"truncated string array at offset {end}")
        self.pos = pos
        arr = StringArray(count, start, lsize)
        self.lazy.append(arr)
        return arr


class StringArray(Sequence):
    """A GGUF array of strings, decoded on first access (see ``_Cursor._strings``)."""

    def __init__(self, count: int, start: int, len_size: int):
        self._count, self._start, self._lsize = count, start, len_size
        self._buf: bytes = b""
        self._items: list[str] | None = None

    def _decode(self) -> list[str]:
        if self._items is None:
            buf, pos, out = self._buf, self._start, []
            code = "<Q" if self._lsize == 8 else "<I"
            unpack_len, lsize = struct.Struct(code).unpack_from, self._lsize
            for _ in range(self._count):
                (n,) = unpack_len(buf, pos)
                pos += lsize
                out.append(buf[pos:pos + n].decode("utf-8", errors="replace"))
                pos += n
            self._items = out
        return self._items

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i):
        return self._decode()[i]

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, tuple, StringArray)) else NotImplemented

    def __repr__(self) -> str:
        return f"StringArray({self._count} strings)"


def parse_gguf(buf) -> GGUFHeader:
    """Parse a GGUF header from a bytes-like object (the whole file, or at least its header)."""
    if len(buf) < 8 or bytes(buf[:4]) != GGUF_MAGIC:
        raise GGUFError(f"not a GGUF file: it does not start with the magic {GGUF_MAGIC!r}")
    version = struct.unpack_from("<I", buf, 4)[0]
    if version not in (1, 2, 3):
        raise GGUFError("unsupported GGUF version (supported: 1, 2, 3)")
    cur = _Cursor(buf, version)
    cur.pos = 8
    n_tensors = cur.length()
    n_kv = cur.length()
    if n_tensors > 1 << 24 or n_kv > 1 << 24:
        raise GGUFError(f"implausible tensor or metadata key count (at most {1 << 24} each)")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.unpack("<I")
        metadata[key] = cur.value(vtype)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("<I")
        if n_dims > 8:
            raise GGUFError(f"tensor {len(tensors)}: implausible rank (at most 8 dimensions)")
        dims = tuple(cur.length() for _ in range(n_dims))
        ggml_type = cur.unpack("<I")
        offset = cur.unpack("<Q")
        tensors.append(TensorInfo(name, dims, ggml_type, offset))
    head = bytes(buf[:cur.pos])  # a private copy: string arrays decode from it after the file closes
    for arr in cur.lazy:
        arr._buf = head
    return GGUFHeader(version, metadata, tuple(tensors), cur.pos, hashlib.sha256(head).hexdigest())


def read_gguf(path: str | Path) -> GGUFHeader:
    """Read the header of a GGUF file without reading its tensor data."""
    path = Path(path)
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < 8:
            raise GGUFError("not a GGUF file: shorter than a GGUF header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return parse_gguf(mm)


# ---- GGUF metadata -> IR ---------------------------------------------------------------------

def _key(meta: dict[str, Any], key: str, default: Any = None, required: bool = True) -> Any:
    if key in meta:
        return meta[key]
    if required and default is None:
        raise GGUFError(f"GGUF metadata lacks required key '{key}'")
    return default


def _count(meta: dict[str, Any], key: str, default: int | None = None, minimum: int = 1) -> int:
    """A size from the metadata, checked: the error names the key and the rule, never the value."""
    value = _key(meta, key, default, required=default is None)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GGUFError(f"GGUF metadata '{key}' must be an integer >= {minimum}")
    return value


def architecture_from_gguf(header: GGUFHeader, name: str = "") -> Architecture:
    """The IR of a GGUF file: the shared keys read here as Llama blocks, then the architecture's
    family reader (``GGUF_READERS``) with the sliding window, if any."""
    arch = header.architecture
    reader = GGUF_READERS.get(arch)
    if reader is None:
        raise GGUFError(f"unsupported GGUF architecture (general.architecture): supported are {', '.join(GGUF_READERS)}")
    m = header.metadata
    layers = _count(m, f"{arch}.block_count")
    hidden = _count(m, f"{arch}.embedding_length")
    ffn = _count(m, f"{arch}.feed_forward_length")
    heads = _count(m, f"{arch}.attention.head_count")
    kv = _key(m, f"{arch}.attention.head_count_kv", heads, required=False)
    head_dim = _count(m, f"{arch}.attention.key_length", max(1, hidden // heads))
    tokens = m.get("tokenizer.ggml.tokens")
    emb = header.tensor("token_embd.weight")
    if f"{arch}.vocab_size" in m:
        vocab = _count(m, f"{arch}.vocab_size")
    elif isinstance(tokens, (list, StringArray)):
        vocab = len(tokens)
    elif emb is not None and len(emb.shape) == 2:
        vocab = int(emb.shape[1])
    else:
        raise GGUFError("cannot tell the vocabulary size: no tokenizer.ggml.tokens and no token_embd.weight")
    # Per-layer KV heads may be an array in llama.cpp (e.g. DeciLM conversions).
    kv_list = kv if isinstance(kv, list) else [kv] * layers
    if len(kv_list) != layers or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 or heads % k
                                     for k in kv_list):
        raise GGUFError(f"GGUF metadata '{arch}.attention.head_count_kv' must be an integer >= 1 dividing the head "
                        "count, or one per layer")
    window = m.get(f"{arch}.attention.sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise GGUFError(f"GGUF metadata '{arch}.attention.sliding_window' must be an integer >= 0")
    blocks = tuple(Block(Attention(heads, kv_list[i], head_dim), MLP(ffn, True, "silu")) for i in range(layers))
    notes = [f"from GGUF v{header.version} metadata ({len(header.tensors)} tensors)"]
    if isinstance(m.get("general.file_type"), int):
        notes.append(f"GGUF file type {m['general.file_type']}")
    if isinstance(m.get(f"{arch}.rope.freq_base"), (int, float)):
        notes.append(f"rope theta {m[f'{arch}.rope.freq_base']:g}")
    plain = Architecture(
        family=arch,  # llama.cpp's name; a family reader that converts to another model_type says so
        vocab_size=vocab,
        hidden_size=hidden,
        num_heads=heads,
        head_dim=head_dim,
        tie_embeddings="output.weight" not in header.tensor_names(),
        blocks=blocks,
        max_position=_count(m, f"{arch}.context_length", 8192),
        name=name or str(m.get("general.name", "")),
        notes=tuple(notes),
    )
    return reader(plain, window)
