"""ARCHITECTURE.md's module map matches the tree: every module listed exists, every module is listed."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAP = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8").split("## Module map", 1)[1].split("\n## ", 1)[0]
LISTED = re.findall(r"^\| `([^`]+)` \|", MAP, re.M)


def test_every_listed_module_exists():
    missing = [p for p in LISTED if not (REPO / p).exists()]
    assert LISTED and not missing, missing


def test_every_module_is_listed():
    modules = sorted(str(p.relative_to(REPO)) for p in (REPO / "autocompress").rglob("*.py")
                     if p.name != "__init__.py" or p.parent.name == "autocompress")
    modules += sorted(str(p.relative_to(REPO)) for p in (REPO / "bench").glob("*.py"))
    unlisted = [m for m in modules if m not in LISTED]
    assert not unlisted, unlisted


def test_package_inits_hold_a_docstring_only():
    """No entry point hidden in an ``__init__.py`` (the top one also holds ``__version__``)."""
    import ast

    for p in (REPO / "autocompress").rglob("__init__.py"):
        body = ast.parse(p.read_text()).body
        kinds = [type(n).__name__ for n in body]
        allowed = ["Expr", "Assign"] if p.parent.name == "autocompress" else ["Expr"]
        assert kinds and kinds[0] == "Expr" and set(kinds) <= set(allowed), (p, kinds)

