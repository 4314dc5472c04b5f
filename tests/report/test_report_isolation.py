"""Reproducible answers: a check reads build state only when asked, and the suite reads no user state.

The README's main command (``acc build examples/cpu-vllm.acspec``) leaves a build output, its
hidden stage folder with a measured ``importance.json``, and entries in the user's cache. None of
it may change what ``acc check`` says of the spec, nor what the tests see.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from _reportkit import EXAMPLES_DIR, GOLDEN, example_result

from autocompress.cache import cache_root, sha256_file
from autocompress.check import run_check
from autocompress.checker import compute
from autocompress.report.feasibility import render_json, render_markdown


def _leftovers(examples: Path) -> Path:
    """What a finished `acc build examples/cpu-vllm.acspec --baseline uniform` leaves beside the spec."""
    out = examples / "out"
    for name in ("cpu-vllm", "cpu-vllm-uniform"):
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "autocompress-report.json").write_text("{}")
    stage = out / ".cpu-vllm.acc"
    stage.mkdir(exist_ok=True)
    layers = [{"attention": 0.001 if l % 2 else 0.5, "ffn": 1.0} for l in range(30)]  # a skewed measurement
    imp = stage / "importance.json"
    imp.write_text(json.dumps({"version": 2, "layers": layers}))
    return imp


def test_build_leftovers_do_not_change_the_check(tmp_path):
    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES_DIR, examples)
    imp = _leftovers(examples)
    report, _, deps = compute(str(examples / "cpu-vllm.acspec"), None)
    assert str(imp) not in deps and report["importance"] == "prior"
    assert render_markdown(report) == (GOLDEN / "cpu-vllm.md").read_text()
    assert render_json(report) == (GOLDEN / "cpu-vllm.json").read_text()


def test_importance_is_read_only_when_asked_and_the_report_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES_DIR, examples)
    imp = _leftovers(examples)
    spec = str(examples / "cpu-vllm.acspec")
    plain = run_check(spec)
    asked = run_check(spec, importance=str(imp))
    assert plain.report["importance"] == "prior"
    assert asked.report["importance"] == {"source": "file", "file": "importance.json", "sha256": sha256_file(imp)}
    assert "measured importance from `importance.json` (sha256 " in render_markdown(asked.report)
    # the skewed weights change the starting point: the file was really used
    assert asked.report["start"]["architecture"] != plain.report["start"]["architecture"]
    assert run_check(spec).report == plain.report and run_check(spec).cached  # separate cache entries


def test_the_suite_uses_its_own_cache_and_examples():
    """tests/conftest.py: the session's ACC_CACHE_DIR and examples copy, never the user's."""
    home_cache = Path.home() / ".cache" / "autocompress"
    assert cache_root() != home_cache and "acc-tests-" in str(cache_root())
    assert "acc-tests-" in str(EXAMPLES_DIR) and not (EXAMPLES_DIR / "out").exists()
    assert os.environ["ACC_CACHE_DIR"] == str(cache_root())
    report, _ = example_result("cpu-vllm")
    assert render_json(report) == (GOLDEN / "cpu-vllm.json").read_text()
