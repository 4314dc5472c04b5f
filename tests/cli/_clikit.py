"""Helpers for the CLI tests: paths, and a private cache directory per test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = Path(os.environ["ACC_TEST_EXAMPLES"])  # tests/conftest.py: a copy without build outputs
FEASIBLE = EXAMPLES / "cpu-vllm.acspec"  # the fastest feasible example (~1 s)
INFEASIBLE = EXAMPLES / "npc-5070-infeasible.acspec"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "acc-cache"
    monkeypatch.setenv("ACC_CACHE_DIR", str(d))
    monkeypatch.delenv("ACC_DEBUG", raising=False)
    return d


def copy_example(src: Path, dst_dir: Path, name: str | None = None) -> Path:
    """Copy an example next to its configs (relative paths in specs keep working)."""
    dst = dst_dir / (name or src.name)
    shutil.copyfile(src, dst)
    if (src.parent / "configs").is_dir() and not (dst_dir / "configs").exists():
        shutil.copytree(src.parent / "configs", dst_dir / "configs")
    return dst
