"""The code part of the build stages' keys covers what a stage runs, and nothing of the other stages.

Each test edits one module of a temporary copy of the package and recomputes the digests of the
families' code maps there (``cache.code_digest(..., root=copy)``): an edit of the search, the
refinement, the uniform arm or the feasibility solver must leave the importance and teacher keys
alone (else a one-line fix of the search re-runs an hour of Gemma 3 importance, teacher outputs
and distillation), and an edit of a module the stage runs must change its key.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autocompress import cache
from autocompress.families.base import family_of

REPO = Path(__file__).resolve().parents[2]
FAMILIES = {"llama": "llama", "gemma3": "gemma3_text"}  # build family -> the IR family that selects it
UNRELATED = ["search/strategy.py", "search/refine.py", "search/baseline.py", "search/joint.py",
             "search/router_v2.py", "families/gemma3/family.py", "families/llama/family.py", "families/hybrid.py",
             "report/build.py",
             "feasibility/[a-np-z]*.py"]  # all of feasibility/ but objective (below) and __init__


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("keys") / "tree"
    shutil.copytree(REPO / "autocompress", root / "autocompress", ignore=shutil.ignore_patterns("__pycache__"))
    for extra in ("grammar", "specs"):
        shutil.copytree(REPO / extra, root / extra)
    return root / "autocompress"


def _digests(pkg: Path) -> dict[tuple[str, str], str]:
    cache.code_digest.cache_clear()
    cache._closure.cache_clear()
    return {(f, stage): cache.code_digest(*family_of(arch).code[stage], root=str(pkg))
            for f, arch in FAMILIES.items() for stage in ("importance", "teacher")}


def _edit(pkg: Path, pattern: str) -> list[Path]:
    files = sorted(pkg.glob(pattern))
    assert files, pattern
    for f in files:
        f.write_text(f.read_text() + "\n# an edit\n")
    return files


def _restore(files: list[Path]) -> None:
    for f in files:
        f.write_text(f.read_text().removesuffix("\n# an edit\n"))


def test_the_copy_digests_as_the_package(tree):
    assert _digests(tree) == _digests(cache.PACKAGE)


@pytest.mark.parametrize("pattern", UNRELATED)
def test_importance_and_teacher_keys_ignore_other_stages(tree, pattern):
    before = _digests(tree)
    files = _edit(tree, pattern)
    try:
        assert _digests(tree) == before
    finally:
        _restore(files)


@pytest.mark.parametrize("pattern,changed", [
    ("families/gemma3/forward.py", {("gemma3", "importance"), ("gemma3", "teacher")}),
    ("nn/hybrid.py", {(f, s) for f in FAMILIES for s in ("importance", "teacher")}),  # every family's forward
    ("families/gemma3/load.py", {("gemma3", "importance"), ("gemma3", "teacher")}),  # the parent loader
    ("families/llama/load.py", {("llama", "importance"), ("llama", "teacher")}),  # the parent loader
    ("families/checkpoint.py", {(f, s) for f in FAMILIES for s in ("importance", "teacher")}),
    ("parents/config_access.py", {(f, s) for f in FAMILIES for s in ("importance", "teacher")}),  # every config reader
    ("prune/importance.py", {("llama", "importance"), ("gemma3", "importance")}),
    ("prune/permute.py", {("llama", "importance"), ("gemma3", "importance")}),
    ("data/teacher.py", {("llama", "teacher"), ("gemma3", "teacher")}),
    # the importance file's layout (``SEGMENTS``), which the stage writes and the search reads
    ("feasibility/objective.py", {("llama", "importance"), ("gemma3", "importance")}),
])
def test_keys_change_with_the_code_the_stage_runs(tree, pattern, changed):
    before = _digests(tree)
    files = _edit(tree, pattern)
    try:
        after = _digests(tree)
    finally:
        _restore(files)
    assert {k for k in before if before[k] != after[k]} == changed


@pytest.mark.parametrize("arch", ["llama", "gemma3_text", "mixtral", "qwen3_moe", "nemotron_h"])
def test_every_family_keys_its_parent_loader_and_not_its_family_module(arch):
    family = family_of(arch)
    loader = family.load.__module__
    for stage in ("importance", "teacher"):
        mods = cache.code_modules(*family.code[stage])
        assert loader in mods
        assert not {"autocompress.search.strategy", "autocompress.search.refine", "autocompress.search.baseline",
                    "autocompress.feasibility.assess", "autocompress.export.writer",
                    f"autocompress.families.{family.name.replace('-', '_')}.family"} & set(mods), stage
