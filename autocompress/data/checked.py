"""Tensor files that carry their own checksum: a cached ``.safetensors`` is verified before it is used.

``dumps`` stores, in the file's metadata, the sha256 of its tensors (names, dtypes, shapes and
bytes); ``load`` recomputes it. A truncated file, a damaged header or flipped data bytes raise
``Corrupt`` (with what is wrong, for the warning), never a half-read tensor. One file, no sidecar: a
cache folder holds exactly the files it held before.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load, save

DIGEST = "tensors_sha256"


class Corrupt(ValueError):
    """A cached tensor file failed its check: ``str()`` says which file and why."""


def tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def dumps(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors bytes of ``tensors``, with their digest in the metadata, the same bytes in
    every process: safetensors writes the metadata in its hash map's order, which varies from one
    process to the next, so the header is rewritten with its keys sorted (same length, same offsets)."""
    data = save(tensors, metadata={**(metadata or {}), DIGEST: tensor_digest(tensors)})
    n = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":")).encode()
    if len(header) > n:  # never for safetensors' compact JSON; keep its own bytes rather than guess
        return data
    return data[:8] + header.ljust(n, b" ") + data[8 + n:]


def loads(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of a file ``dumps`` wrote, or ``Corrupt``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise Corrupt(f"{path.name}: missing") from None
    except OSError as e:
        raise Corrupt(f"{path.name}: unreadable ({e.strerror or e})") from None
    try:
        tensors = load(data)
        n = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8:8 + n]).get("__metadata__") or {}
    except Exception:  # safetensors raises its own error types (and others) on a damaged header
        raise Corrupt(f"{path.name}: unreadable (truncated or damaged)") from None
    if meta.get(DIGEST) != tensor_digest(tensors):
        raise Corrupt(f"{path.name}: checksum mismatch")
    return tensors, meta


__all__ = ["Corrupt", "dumps", "loads", "tensor_digest"]
