"""The mark autocompress leaves in every folder it writes, and the rule for replacing a folder.

Every exported model folder holds ``autocompress-manifest.json``: who wrote it and from which
spec (a path relative to the folder, never an absolute path of the machine). A folder is
replaced only when it carries this mark; a folder without it is the user's, and nothing of
autocompress ever deletes it (``replaceable``). ``build.output`` decides, before a build
starts, which marked folders a build may replace.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MANIFEST = "autocompress-manifest.json"
SCHEMA = "autocompress/output/v1"


def manifest_dict(folder: Path, spec_path: str | os.PathLike | None, strategy: str | None) -> dict:
    spec = None
    if spec_path is not None:
        spec = os.path.relpath(Path(spec_path).resolve(), Path(folder).resolve().parent)
    return {"schema": SCHEMA, "written_by": "autocompress", "spec": spec, "strategy": strategy}


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest of ``folder``, or None when it has none (or an unreadable one)."""
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def manifest_spec(folder: str | os.PathLike) -> Path | None:
    """The spec a marked folder was built from, resolved (relative to the folder's parent)."""
    m = read_manifest(folder)
    if not m or not m.get("spec"):
        return None
    return (Path(folder).resolve().parent / m["spec"]).resolve()


def other_spec(folder: str | os.PathLike, spec_path: str | os.PathLike) -> Path | None:
    """The spec a marked folder names when it is not ``spec_path`` (both resolved), else None (the
    same spec, or no manifest: a folder autocompress did not write names none)."""
    named = manifest_spec(folder)
    if named is None or named == Path(spec_path).resolve():
        return None
    return named


def replaceable(folder: str | os.PathLike) -> tuple[bool, str]:
    """Whether a folder may be replaced at all, and why not: only a missing or empty folder, or
    one that autocompress wrote."""
    p = Path(folder)
    if p.is_symlink():
        return False, "it is a symbolic link"
    if not p.exists():
        return True, ""
    if not p.is_dir():
        return False, "it is a file, not a folder"
    if not any(p.iterdir()):
        return True, ""
    if read_manifest(p) is None:
        return False, f"it holds files and no {MANIFEST}: autocompress did not write it"
    return True, ""
