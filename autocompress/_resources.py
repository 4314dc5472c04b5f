"""Locate the files that ship with the package: the grammar and the JSON Schemas.

In a wheel they sit under ``autocompress/_data``; in a source checkout (editable install, tests)
they are the repository's top-level ``grammar/`` and ``specs/`` folders, which are the originals.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource(relpath: str) -> Path:
    """Path of ``grammar/...`` or ``specs/...``, installed or in the checkout."""
    for base in (_PKG / "_data", _PKG.parent):
        p = base / relpath
        if p.exists():
            return p
    raise FileNotFoundError(f"autocompress resource missing: {relpath} (broken installation?)")


@functools.lru_cache(maxsize=None)
def schema(name: str) -> dict:
    """A JSON Schema from ``specs/`` by file name, parsed once."""
    return json.loads(resource(f"specs/{name}").read_text())
