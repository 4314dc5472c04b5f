"""Isolation of the whole suite from the user's state: caches and build outputs.

Before any test runs, ``ACC_CACHE_DIR`` points at a fresh temporary folder (subprocesses inherit
it), and ``ACC_TEST_EXAMPLES`` at a copy of ``examples/`` without build outputs (``out/``, the
hidden ``.<name>.acc`` stage folders). So a user who ran the README's main command first (which
fills ``~/.cache/autocompress`` and ``examples/out/``) gets the same test results as CI on a
clean clone; ``tests/report/test_report_isolation.py`` checks it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_SESSION = Path(tempfile.mkdtemp(prefix="acc-tests-"))


def _no_outputs(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "out" or (n.startswith(".") and n.endswith(".acc"))}


def pytest_configure(config):
    # the benchmark data installed in the user's cache (install-full.sh), for the slow tests that
    # need every document; every other test (builds included) reads the few-document fixture
    from autocompress.evaluate.benchmarks.data import default_root

    real = default_root()
    if (real / "COMPLETE").exists():
        os.environ.setdefault("ACC_TEST_REAL_EVAL_DATA", str(real))
    os.environ["ACC_EVAL_DATA"] = str(REPO / "tests" / "fixtures" / "eval-data")
    os.environ["ACC_CACHE_DIR"] = str(_SESSION / "cache")
    # OpenMP threads that spin at every barrier lose ~10x on a shared 2-core host; torch is
    # imported after this (no test module is collected yet), so it waits passively
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    examples = _SESSION / "examples"
    if not examples.exists():
        shutil.copytree(REPO / "examples", examples, ignore=_no_outputs)
    os.environ["ACC_TEST_EXAMPLES"] = str(examples)


def pytest_unconfigure(config):
    shutil.rmtree(_SESSION, ignore_errors=True)


def examples_dir() -> Path:
    """The suite's copy of ``examples/`` (``pytest_configure``)."""
    return Path(os.environ["ACC_TEST_EXAMPLES"])
