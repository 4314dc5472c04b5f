"""Content-hash caching and atomic writes.

Every stage result is stored under a key derived from the content of its inputs (spec bytes,
parent config / metadata, profile, code version), never from paths or times. Files are written
to a temporary name in the same folder and renamed into place, so an interrupted run leaves
either the old result or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from autocompress import __version__


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def key(*parts: str | bytes) -> str:
    """A stable key from ordered parts; the code version is always mixed in."""
    h = hashlib.sha256(f"autocompress {__version__}\0".encode())
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_root() -> Path:
    """``$ACC_CACHE_DIR``, else ``$XDG_CACHE_HOME/autocompress``, else ``~/.cache/autocompress``."""
    env = os.environ.get("ACC_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "autocompress" if xdg else Path.home() / ".cache" / "autocompress"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def fingerprint(path: str | os.PathLike) -> str:
    """Content hash for small files; size + mtime for large ones (a 100 MB GGUF would cost 0.2 s
    per check to hash; its header's content hash is part of the key anyway)."""
    st = os.stat(path)
    if st.st_size > (1 << 20):
        return f"stat:{st.st_size}:{st.st_mtime_ns}"
    return sha256_file(path)


class JsonCache:
    """A folder of ``<key>.json`` entries. Entries record the files they depend on with their
    hashes, so a hit is only served while those files are unchanged."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def _path(self, k: str) -> Path:
        return self.folder / f"{k}.json"

    def get(self, k: str) -> Any | None:
        p = self._path(k)
        try:
            entry = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        for dep, digest in entry.get("deps", {}).items():
            try:
                if fingerprint(dep) != digest:
                    return None
            except OSError:
                return None
        return entry.get("value")

    def put(self, k: str, value: Any, deps: Iterable[str] = ()) -> None:
        entry = {"deps": {str(d): fingerprint(d) for d in deps}, "value": value}
        try:
            atomic_write_json(self._path(k), entry)
        except OSError:
            pass  # a read-only cache folder must never fail a check
