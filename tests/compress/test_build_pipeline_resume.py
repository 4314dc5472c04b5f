"""A build killed in any stage resumes and ends with the same weights as an uninterrupted build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from _buildkit import make_project, weights_hash  # noqa: E402

pytestmark = pytest.mark.slow


def _acc(spec: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "ACC_CACHE_DIR": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "autocompress.cli", "build", str(spec), "--quiet"], env=env,
                            cwd=str(spec.parent), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run(spec: Path, cache: Path) -> str:
    p = _acc(spec, cache)
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    return out


def _crash_at(spec: Path, cache: Path, point: str) -> None:
    """Run a build that dies like a SIGKILL at ``point`` (``$ACC_CRASH_AT``, see build.stages)."""
    env = {**os.environ, "ACC_CACHE_DIR": str(cache), "ACC_CRASH_AT": point}
    p = subprocess.run([sys.executable, "-m", "autocompress.cli", "build", str(spec), "--quiet"], env=env,
                       cwd=str(spec.parent), capture_output=True, text=True, timeout=900)
    assert p.returncode == 137, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    spec = make_project(root)
    _run(spec, root / "cache")
    return weights_hash(root / "out" / "tiny")


def _work(root: Path) -> Path:
    return root / "out" / ".tiny.acc"


@pytest.mark.parametrize("point", ["importance", "search-autocompress", "shortlist:1", "shortlist-autocompress",
                                   "distill:3", "distill"])
def test_kill_and_resume_gives_identical_weights(tmp_path, reference, point):
    spec = make_project(tmp_path)
    cache = tmp_path / "cache"
    _crash_at(spec, cache, point)
    assert not (tmp_path / "out" / "tiny").exists()  # nothing half-written: the export never started
    out = _run(spec, cache)
    assert weights_hash(tmp_path / "out" / "tiny") == reference
    if point == "distill:3":
        assert "resuming from the last checkpoint" in out
