"""``acc verify`` where nothing can be measured: the report says "predicted" and never shows a
prediction as a measurement (issue 4: a GPU target on a machine without that GPU)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autocompress.cli.main import main
from autocompress.export.decilm import decilm_config_from_architecture
from autocompress.parents.resolve import resolve_parent
from autocompress.lang.model import ParentRef

SPEC = """model "smollm2-135m"
target {{
  hardware  {hw}
  engine    vllm
  precision {prec}
  memory    <= {mem}
}}
workload chat {{
  concurrency 1
  input       256 tokens
  output      64 tokens
  tpot <= {tpot}
}}
"""


def _exported(tmp_path):
    """A pruned SmolLM2 as acc build exports it (config only: the predicted path reads no weights)."""
    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    blocks = tuple(replace(b, ffn=None) if i in (10, 20) else b for i, b in enumerate(parent.blocks))
    arch = replace(parent, blocks=blocks)
    out = tmp_path / "model"
    out.mkdir()
    cfg = decilm_config_from_architecture(arch)
    cfg.update(model_type="nemotron-nas", architectures=["DeciLMForCausalLM"])
    (out / "config.json").write_text(json.dumps(cfg))
    (out / "autocompress-report.json").write_text(json.dumps({"quality": {
        "parent": {"code": {"ppl": 6.0}}, "student": {"code": {"ppl": 7.5, "kl": 0.2, "top1": 0.8}}}}))
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))


def test_gpu_target_absent_reports_predicted_only(tmp_path, cache, capsys):
    out = _exported(tmp_path)
    spec = tmp_path / "h100.acspec"
    spec.write_text(SPEC.format(hw="h100-sxm", prec="bf16", mem="4 GiB", tpot="2 ms"))
    code = main(["verify", str(out), str(spec)])
    md = capsys.readouterr().out
    rep = json.loads((out / "verify-report.json").read_text())
    assert rep["status"] == "predicted" and rep["measurements"] is None
    assert all(b["measured"] is None and b["pass"] is None for b in rep["bounds"])
    assert "not measured" in rep["environment"]
    assert "PREDICTED ONLY" in md and "| measured |" not in md and "Nothing was measured" in md
    assert "gpu-vllm-default" in md and "never measured against this engine" in md
    tpot = next(b for b in rep["bounds"] if b["metric"] == "tpot")
    assert code == (0 if tpot["predicted_ok"] else 1)


def test_cpu_target_without_engine_is_predicted_and_says_why(tmp_path, cache, capsys, monkeypatch):
    import autocompress.measure.presence as prof

    monkeypatch.setattr(prof, "engine_available", lambda e: (False, "vllm is not installed"))
    out = _exported(tmp_path)
    spec = tmp_path / "cpu.acspec"
    spec.write_text(SPEC.format(hw="cpu", prec="fp32", mem="3 GiB", tpot="1 ms"))
    code = main(["verify", str(out), str(spec)])
    md = capsys.readouterr().out
    rep = json.loads((out / "verify-report.json").read_text())
    assert rep["status"] == "predicted" and rep["environment"] == "not measured: vllm is not installed"
    assert code == 1  # a 1 ms TPOT on this CPU is predicted to fail, and the exit code says so
    assert "**no**" in md


def test_verify_without_a_model_is_a_clear_error(tmp_path, cache, capsys):
    spec = tmp_path / "cpu.acspec"
    spec.write_text(SPEC.format(hw="cpu", prec="fp32", mem="3 GiB", tpot="100 ms"))
    assert main(["verify", str(tmp_path / "nothing"), str(spec)]) == 2
    assert "no exported model here" in capsys.readouterr().err


def test_relative_model_path_is_taken_from_the_working_directory(tmp_path, cache, capsys, monkeypatch):
    _exported(tmp_path)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "h100.acspec").write_text(SPEC.format(hw="h100-sxm", prec="bf16", mem="4 GiB", tpot="2 ms"))
    monkeypatch.chdir(tmp_path)  # the model folder is relative to here, not to the spec's folder
    assert main(["verify", "model", "specs/h100.acspec"]) in (0, 1)
    assert (tmp_path / "model" / "verify-report.md").is_file()
