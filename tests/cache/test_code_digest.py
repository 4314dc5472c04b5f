"""Code-true cache keys: a stage's key changes when the code it runs changes, and only then.

The subprocess tests run a temporary copy of the package (``PYTHONPATH``), edit one module in it,
and show which cached results are served again and which are recomputed: ``acc check``'s report
and a build stage (``stages.run_stage`` keyed by ``stage_key``, as ``build.pipeline`` keys
every stage).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autocompress import cache

REPO = Path(__file__).resolve().parents[2]


def test_closure_follows_imports_strings_and_packages():
    mods = cache.code_modules("autocompress.train.distill")
    assert {"autocompress.train.distill", "autocompress.data.teacher", "autocompress.cache",
            "autocompress.progress", "autocompress.train", "autocompress"} <= set(mods)
    assert "autocompress.report.build" not in mods and "autocompress.lang.parser" not in mods
    # adapters are named in a string table; the worker runs them in a subprocess
    worker = cache.code_modules("autocompress.measure.worker")
    assert "autocompress.measure.engines.vllm_engine" in worker and "autocompress.measure.engines.hf_engine" in worker
    # `from autocompress.lang import ast`: a submodule import
    assert "autocompress.lang.ast" in cache.code_modules("autocompress.lang.parser")


def test_the_check_digest_covers_the_grammar_and_schemas(tmp_path):
    pkg = _copy(tmp_path)
    before = cache.code_digest("autocompress.check", root=str(pkg / "autocompress"))
    grammar = pkg / "grammar" / "acspec.lark"
    grammar.write_text(grammar.read_text() + "\n// edited\n")
    cache.code_digest.cache_clear()
    assert cache.code_digest("autocompress.check", root=str(pkg / "autocompress")) != before


def test_an_unchanged_tree_gives_the_same_digest():
    """(Its cost, paid by every `acc check`, is measured by bench/check_latency.py, not here.)"""
    cache.code_digest.cache_clear()
    cache._closure.cache_clear()
    a = cache.code_digest("autocompress.check")
    cache.code_digest.cache_clear()
    cache._closure.cache_clear()
    assert cache.code_digest("autocompress.check") == a and len(a) == 64


def _copy(tmp_path: Path) -> Path:
    """A copy of the package with its resources (grammar/, specs/), as an importable root."""
    root = tmp_path / "tree"
    shutil.copytree(REPO / "autocompress", root / "autocompress", ignore=shutil.ignore_patterns("__pycache__"))
    for extra in ("grammar", "specs"):
        shutil.copytree(REPO / extra, root / extra)
    return root


def _run(root: Path, code: str, env_extra: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root), **env_extra}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(root),
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


CHECK = """
import json, sys, autocompress
from autocompress.check import run_check
assert autocompress.__file__.startswith({root!r}), autocompress.__file__
r = run_check({spec!r})
print(json.dumps({{"cached": r.cached, "verdict": r.report["verdict"]}}))
"""

STAGE = """
import json, autocompress
from pathlib import Path
from autocompress.build.stages import run_stage, stage_key
assert autocompress.__file__.startswith({root!r})
ran = []
def fn(tmp, partial):
    ran.append(1)
    (tmp / "out.txt").write_text("x")
    return {{}}
key = stage_key("distill", ("autocompress.train.distill",), "upstream")
run_stage(Path({work!r}), "distill", key, fn, log=lambda m: None)
print(json.dumps({{"ran": bool(ran), "key": key}}))
"""


def _edit(root: Path, module: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + "\n# an edit\n")


def test_acc_check_reruns_when_a_module_it_runs_changes(tmp_path):
    root = _copy(tmp_path)
    spec = shutil.copy(os.environ["ACC_TEST_EXAMPLES"] + "/cpu-vllm.acspec", tmp_path / "cpu-vllm.acspec")
    env = {"ACC_CACHE_DIR": str(tmp_path / "cache")}
    code = CHECK.format(root=str(root), spec=str(spec))
    assert _run(root, code, env) == {"cached": False, "verdict": "feasible"}
    assert _run(root, code, env)["cached"] is True  # unchanged tree: a hit
    _edit(root, "autocompress.train.distill")  # not on the check path
    assert _run(root, code, env)["cached"] is True
    _edit(root, "autocompress.feasibility.uniform")  # on the check path
    assert _run(root, code, env)["cached"] is False
    assert _run(root, code, env)["cached"] is True


def test_a_build_stage_reruns_when_its_code_changes(tmp_path):
    root = _copy(tmp_path)
    work = tmp_path / "work"
    code = STAGE.format(root=str(root), work=str(work))
    first = _run(root, code, {})
    assert first["ran"] is True
    assert _run(root, code, {}) == {"ran": False, "key": first["key"]}  # unchanged tree: cached
    _edit(root, "autocompress.report.build")  # the distill stage does not run it
    assert _run(root, code, {}) == {"ran": False, "key": first["key"]}
    _edit(root, "autocompress.data.teacher")  # imported by distill
    edited = _run(root, code, {})
    assert edited["ran"] is True and edited["key"] != first["key"]
    assert sorted(p.name for p in work.iterdir() if not p.name.endswith(".partial")) == sorted(
        [f"distill-{first['key']}", f"distill-{edited['key']}"])


@pytest.mark.parametrize("which", ["refine", "router_v2"])
def test_search_configs_are_part_of_the_search_key(which, monkeypatch):
    """A changed default of any search config changes the search stage's key."""
    import dataclasses

    from autocompress.search import config as search
    from autocompress.build.settings import derive_build
    from autocompress.lang.api import load_spec

    settings = derive_build(load_spec(os.environ["ACC_TEST_EXAMPLES"] + "/cpu-vllm.acspec"))
    before = search.search_key_parts(settings)
    real = search.search_configs

    def changed(s):
        refine, v2 = real(s)
        if which == "refine":
            return dataclasses.replace(refine, share=refine.share / 2), v2
        return refine, dataclasses.replace(v2, prior=v2.prior / 2)
    monkeypatch.setattr(search, "search_configs", changed)
    assert search.search_key_parts(settings) != before
    monkeypatch.setattr(search, "search_configs", real)
    assert search.search_key_parts(settings) == before
