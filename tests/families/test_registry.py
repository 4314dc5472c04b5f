"""The build-family registry: it covers every family the parsers read, and its honest limits
(``acc check`` warns, ``acc build`` stops with exit 2 at the ``model`` line, before any work)."""

from __future__ import annotations

import importlib
import json

import pytest

from autocompress.cli import main as cli
from autocompress.families.registry import BUILD_FAMILIES, NOT_BUILT, buildable_names, not_buildable
from autocompress.families.readers import CONFIG_READERS, GGUF_READERS
from autocompress.parents.hf_config import architecture_from_config
from test_parent_hf_config import MINIMAL  # tests/parents: on the path (pyproject's pytest pythonpath)

SPEC = """model "config.json"
target {
  hardware  h100-sxm
  engine    vllm
  precision bf16
}
workload chat {
  concurrency 1
  input  512 tokens
  output 64 tokens
  tpot <= 50 ms
}
output "out/x"
"""


def test_every_parsed_family_is_built_or_says_why_not():
    ir_families = {architecture_from_config(cfg).family for cfg in MINIMAL.values()} | set(GGUF_READERS)
    assert set(MINIMAL) == set(CONFIG_READERS)
    assert ir_families <= set(BUILD_FAMILIES) | set(NOT_BUILT)
    assert not set(BUILD_FAMILIES) & set(NOT_BUILT)
    assert set(NOT_BUILT) <= ir_families  # no stale rows


def test_every_build_family_module_names_its_row():
    pytest.importorskip("torch")
    for fam, e in BUILD_FAMILIES.items():
        assert importlib.import_module(f"autocompress.{e.module}").FAMILY.name == e.name, fam


@pytest.fixture
def qwen2_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ACC_DEBUG", raising=False)
    cfg = {**MINIMAL["qwen2"], "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 512, "vocab_size": 4096}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors").write_bytes(b"")  # "has weights": the family check comes first
    spec = tmp_path / "q.acspec"
    spec.write_text(SPEC)
    return spec


def test_check_warns_at_the_model_line(capsys, qwen2_spec):
    code = cli.main(["check", str(qwen2_spec), "--format", "json"])
    err = capsys.readouterr().err
    assert code == 0
    assert err.splitlines()[:3] == [
        f"{qwen2_spec}:1:7: warning: {not_buildable('qwen2')}",
        '   1 | model "config.json"',
        "             ^^^^^^^^^^^^^",
    ]
    assert "it compresses " + buildable_names() in err


def test_build_stops_at_the_model_line_before_any_work(capsys, qwen2_spec):
    pytest.importorskip("torch")
    code = cli.main(["build", str(qwen2_spec)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"{qwen2_spec}:1:7: error: acc build cannot compress qwen2 parents yet")
    assert "mixtral, nemotron-nas, nemotron_h, qwen2_moe, qwen3_moe" in err
    assert sorted(p.name for p in qwen2_spec.parent.iterdir()) == ["config.json", "model.safetensors", "q.acspec"]


BUILD_SIDE = ("autocompress.build.", "autocompress.data.", "autocompress.search.", "autocompress.prune.",
              "autocompress.train.", "autocompress.evaluate.", "autocompress.nn.", "autocompress.families.")


def test_the_check_path_does_not_follow_the_build_side():
    """``acc check`` reads the registry and the families' config readers (torch-free) but runs no
    family's torch side: its cache key (the code it runs) must not change when a build module does."""
    from autocompress.cache import code_modules

    readers = {f.__module__ for table in (CONFIG_READERS, GGUF_READERS) for f in table.values()}
    check_side = ({"autocompress.families.registry", "autocompress.families.readers"} | readers
                  | {m.rpartition(".")[0] for m in readers})  # each reader's package: a docstring only
    mods = code_modules("autocompress.check")
    assert {"autocompress.families.registry", "autocompress.families.readers"} <= set(mods)
    assert not [m for m in mods if m.startswith(BUILD_SIDE) and m not in check_side]
