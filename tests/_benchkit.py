"""The scripts under bench/ as modules, for the tests of their plumbing (bench/ is no package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench(name: str):
    """``bench/<name>.py`` loaded afresh, with bench/ on ``sys.path`` for the siblings it imports
    (``_interleaved`` and the like)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
