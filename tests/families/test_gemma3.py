"""Gemma 3 beyond the shared family chain (``test_family_torch`` runs it for the vLLM space):

* the transformers space removes attention, whole layers and hidden channels, and that export
  (per_layer_config + our shipped class) loads in stock transformers with the student's logits;
* a uniform student exports as stock ``Gemma3ForCausalLM`` (no remote code);
* the derived settings say why the KV head stays and why engine vllm keeps every attention;
* the IR of the real 270M config is exact (params) and the cost model weighs its embedding / LM head.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autocompress.ir import MLP, Block
from autocompress.parents.hf_config import architecture_from_config
from autocompress.plan.space import derive_space

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


def _real():
    return architecture_from_config(json.loads((CONFIGS / "gemma-3-270m.json").read_text()))


def test_real_270m_ir_is_exact():
    a = _real()
    assert a.params() == 268_098_176 and a.family == "gemma3_text" and a.post_norms and a.qk_norm
    assert a.embedding_params() == 262_144 * 640  # 62.6% of the parameters
    assert [b.attention.sliding_window for b in a.blocks] == ([512] * 5 + [None]) * 3
    assert {b.attention.kv_heads for b in a.blocks} == {1}


def test_cost_model_weighs_embedding_and_sliding_kv():
    from autocompress.cost.memory import kv_cache_bytes, weight_bytes
    from autocompress.cost.roofline import Numerics, Pass, model_ops

    a = _real()
    # fp32: every parameter 4 bytes, the tied embedding once
    assert weight_bytes(a, "fp32") == 4 * 268_098_176
    # one sequence of 4096 tokens, fp32 KV (1 head x 256 x K and V x 4 bytes = 2 KiB per token per layer):
    # 3 global layers keep 4096 tokens, 15 sliding ones 512 (+ the page a window straddles)
    per_tok = 2 * 256 * 4
    assert kv_cache_bytes(a, 1, 4096, 4, 4, block_size=None) == per_tok * (3 * 4096 + 15 * 512)
    assert kv_cache_bytes(a, 1, 4096, 4, 4) == per_tok * 16 * (3 * 256 + 15 * 33)
    # a decode step reads the whole LM head (the tied embedding): 262,144 x 640 weights
    head = next(o for o in model_ops(a, Pass.decode(1, 1), Numerics("fp32", "fp32")) if o.name == "lm_head")
    assert head.bytes >= 4 * 262_144 * 640


def test_space_says_why_kv_and_attention_stay():
    a = _real()
    vllm, hf = derive_space(a, "vllm", "cpu"), derive_space(a, "transformers", "cpu")
    for s in (vllm, hf):
        assert "kv_heads" not in s.axes and s.kv_choices == (1,)
        assert any("nothing to merge" in why for _, _, why in s.derivation)
    assert vllm.kept_attention == tuple(range(18)) and hf.kept_attention == (0,)
    assert any("Transformers backend" in why and scope == "every layer" for _, scope, why in vllm.derivation)


torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    pytest.importorskip("transformers")
    from _familykit import save_parent

    from autocompress.families.base import family_of

    folder = save_parent("gemma3", tmp_path_factory.mktemp("gemma3") / "parent")
    arch = architecture_from_config(json.loads((folder / "config.json").read_text()))
    family = family_of(arch.family)
    params, cfg = family.load(folder)
    rows = torch.randint(0, 500, (8, 33), generator=torch.Generator().manual_seed(0))
    from autocompress.progress import Progress

    permuted, _ = family.permute(params, cfg, family.importance(params, cfg, rows, 4, 4, Progress()))
    return folder, arch, family, permuted, cfg


def _export_and_run_stock(family, arch, permuted, cfg, folder, out):
    from safetensors.torch import load_file
    from test_family_torch import _STOCK, LONG

    sd, extras = family.extract(permuted, cfg, arch)
    student = family.student(arch, sd, extras)
    with torch.no_grad():
        expected = student(LONG)
    fmt = family.export(out, arch, student.state_dict(), folder, extras)
    run = subprocess.run([sys.executable, "-c", _STOCK, str(out), json.dumps(LONG.tolist()),
                          str(out.parent / "logits.safetensors")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = load_file(str(out.parent / "logits.safetensors"))["logits"]
    assert torch.allclose(got, expected, atol=2e-5, rtol=1e-4), (got - expected).abs().max()
    return fmt, run.stdout.strip().splitlines()[-1]


@pytest.mark.integration
def test_transformers_space_export_removes_attention_layers_and_hidden(parent, tmp_path):
    folder, arch, family, permuted, cfg = parent
    space = derive_space(arch, "transformers", "cpu")
    assert "hidden" in space.axes and 0 in space.kept_attention
    b = arch.blocks
    blocks = (b[0], Block(None, MLP(64, True, b[1].ffn.activation)), Block(b[2].mixer, None), Block(None, None),
              Block(b[4].mixer, MLP(96, True, b[4].ffn.activation)), b[5])
    student = arch.with_blocks(blocks, hidden_size=96)
    fmt, cls = _export_and_run_stock(family, student, permuted, cfg, folder, tmp_path / "out")
    assert (fmt, cls) == ("gemma3_hetero", "AutocompressGemma3ForCausalLM")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["num_hidden_layers"] == 5 and config["layer_types"][-1] == "full_attention"
    exported = architecture_from_config(config)
    assert exported.blocks == tuple(x for x in blocks if x.mixer or x.ffn) and exported.hidden_size == 96
    assert exported.params() == student.params()
    # the in-process loader of every export (the build's accuracy stage, `acc eval`) loads it too:
    # AutoModelForCausalLM would build the stock Gemma 3 and fail on the per-layer widths
    from test_family_torch import LONG

    from autocompress.evaluate.heldout import load_exported

    sd, extras = family.extract(permuted, cfg, student)
    with torch.no_grad():
        got, expected = load_exported(tmp_path / "out")(LONG).logits, family.student(student, sd, extras)(LONG)
    assert torch.allclose(got, expected, atol=2e-5, rtol=1e-4), (got - expected).abs().max()


@pytest.mark.integration
def test_uniform_student_exports_stock_gemma3(parent, tmp_path):
    folder, arch, family, permuted, cfg = parent
    student = arch.with_blocks(tuple(Block(x.mixer, MLP(64, True, x.ffn.activation)) for x in arch.blocks))
    fmt, cls = _export_and_run_stock(family, student, permuted, cfg, folder, tmp_path / "out")
    assert (fmt, cls) == ("gemma3_text", "Gemma3ForCausalLM")
    assert not (tmp_path / "out" / "modeling_gemma3_hetero.py").exists()
