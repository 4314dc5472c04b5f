"""``acc profile`` and ``acc verify`` for the MoE and hybrid families: synthetic variants from each
family's own search space, written by its exporter; engines that cannot run a family on this
device say so instead of crashing; vLLM on CPU measures a MoE variant."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _familykit import save_parent  # noqa: E402

from autocompress.calibrate.synth import arch_key, synthetic_folder, variants  # noqa: E402
from autocompress.parents.hf_config import architecture_from_config  # noqa: E402
from autocompress.plan.space import derive_space  # noqa: E402

pytestmark = pytest.mark.integration


def _parent(tmp_path, family, **over):
    folder = save_parent(family, tmp_path / "parent", **over)
    return folder, architecture_from_config(json.loads((folder / "config.json").read_text()))


@pytest.mark.parametrize("family,over", [("mixtral", {}), ("qwen3_moe", {}), ("nemotron_h", {"pattern": "M*-M*-E"})])
def test_synthetic_variants_follow_the_family_space_and_load(tmp_path, family, over):
    from transformers import AutoModelForCausalLM

    from autocompress.modeling.register import register

    register()
    folder, parent = _parent(tmp_path, family, **over)
    space = derive_space(parent, "vllm", "cpu")
    vs = variants(parent, 4)
    assert vs[0].name == "parent" and len({arch_key(v) for v in vs}) == 4
    for v in vs[1:]:
        kept = tuple(b for b in v.blocks if b.mixer is not None or b.ffn is not None)
        if space.uniform:  # one size per axis in the native formats
            assert len({b for b in kept}) == 1
        out = synthetic_folder(v, folder, tmp_path / "models")
        back = architecture_from_config(json.loads((out / "config.json").read_text()))
        assert back.blocks == kept and back.hidden_size == v.hidden_size
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        with torch.no_grad():
            assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 512)


def test_profile_and_verify_say_what_vllm_cpu_cannot_run(tmp_path):
    pytest.importorskip("vllm")
    from autocompress.calibrate.profile import ProfileRunError, run_profile
    from autocompress.measure.verify import run_verify

    folder, parent = _parent(tmp_path, "nemotron_h")  # M*-E: a MoE layer
    with pytest.raises(ProfileRunError, match="no kernel for NemotronH's non-gated MoE experts"):
        run_profile("cpu", "vllm", tmp_path / "p.json", model=str(folder), root=tmp_path / "work")
    (tmp_path / "v.acspec").write_text('model "parent"\ntarget {\n  hardware cpu\n  engine vllm\n  precision fp32\n}\n'
                                       "workload w {\n  concurrency 1\n  input 32 tokens\n  output 8 tokens\n"
                                       "  tpot <= 1 s\n}\n")
    res = run_verify(str(folder), str(tmp_path / "v.acspec"), log=lambda m: None)
    text = (folder / "verify-report.md").read_text()
    assert "not measured: vLLM 0.32's CPU backend has no kernel" in text and res.exit_code == 0


@pytest.mark.slow
def test_vllm_cpu_measures_a_mixtral_variant(tmp_path):
    """What ``acc profile`` does for each variant, trimmed to one short workload and no re-runs on a
    busy host (the real profile's repeats are ``calibration.WORKLOADS``)."""
    pytest.importorskip("vllm")
    from autocompress.lang.model import Target, Workload
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.runner import measure, workload_dict

    folder, parent = _parent(tmp_path, "mixtral")
    arch = variants(parent, 2)[1]
    target, wl = Target("cpu", "vllm", "fp32", "fp32"), Workload("short", 1, "serve", 64, 8)
    res = measure(arch, target, [workload_dict(wl, requests=2, warmup=1)], folder, tmp_path / "work",
                  derive_limits(arch, target, [wl], threads=2), threads=2, log=lambda m: None, retries=0)
    (m,) = res["measurements"]
    assert m["workload"] == "short" and m["tpot_s"] > 0 and m["ttft_s"] > 0 and res["peak_rss_bytes"] > 0
