"""Helpers for the report tests: every example's report, computed once per pytest run."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = Path(os.environ["ACC_TEST_EXAMPLES"])  # tests/conftest.py: a copy without build outputs
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.acspec"))
GOLDEN = Path(__file__).resolve().parent / "golden"
SCHEMA = REPO / "specs" / "feasibility-report.schema.json"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
INFEASIBLE = {"npc-5070-infeasible", "npc-5070-full-card"}  # proved
NOT_FOUND = {"batch-h100-not-found"}
SMOLLM2_BUILDS = ("code-5070", "serve-h100", "npc-5080", "cpu-vllm")
GEMMA3_BUILDS = ("gemma3-cpu-vllm", "gemma3-npc-5070")  # the gemma3-270m alias (install-full.sh installs it)
SLOW: set[str] = set()  # examples too slow for the default run (llama70b takes ~2 s)


def example_params():
    """``examples/*.acspec`` stems, the slow ones marked."""
    return [pytest.param(p.stem, marks=pytest.mark.slow) if p.stem in SLOW else p.stem for p in EXAMPLES]


@functools.lru_cache(maxsize=None)
def example_result(name: str) -> tuple[dict, tuple[str, ...]]:
    """(report, rendered warnings) of ``examples/<name>.acspec``: computed fresh (no cache)."""
    from autocompress.checker import compute

    report, warnings, _deps = compute(str(EXAMPLES_DIR / f"{name}.acspec"), None)
    return report, tuple(warnings)


@functools.lru_cache(maxsize=None)
def validator():
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def schema_errors(report: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(report)]


def check_golden(path: Path, text: str) -> None:
    """Compare with a pinned file; UPDATE_GOLDEN=1 rewrites it instead."""
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"golden file missing: {path} (run with UPDATE_GOLDEN=1 to create it)")
    assert text == path.read_text(encoding="utf-8"), f"output differs from {path.name} (UPDATE_GOLDEN=1 to accept)"
