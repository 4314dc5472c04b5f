"""The DeciLM config class, the IR -> config translation and the writer's guards (no model runs).

Only the tests that build a ``DeciLMConfig`` or tensors need transformers/torch; the rest run in the
light environment too."""

from __future__ import annotations

import json

import pytest
from _exportkit import GLOBALS, HEADS, full_arch, hetero_arch

from autocompress.export.decilm import (check_decilm_servable, decilm_config_from_architecture, expected_shapes, llama_config_from_architecture)
from autocompress.export.writer import export_decilm
from autocompress.ir import MLP, Architecture, Attention, Block, Mamba2, MoE


def _config_class():
    pytest.importorskip("transformers")
    from autocompress.modeling import configuration_decilm

    return configuration_decilm


def test_blocks_are_attributes_and_serialise_back_to_plain_dicts():
    DeciLMConfig = _config_class().DeciLMConfig
    cfg = decilm_config_from_architecture(hetero_arch(512), **GLOBALS)
    c = DeciLMConfig(**cfg)
    assert [c.num_kv_heads(i) for i in range(6)] == [2, None, 1, 4, None, 2]
    assert [c.ffn_width(i) for i in range(6)] == [96, 128, None, 64, None, 160]
    assert c.block_configs[1].attention.no_op and not c.block_configs[0].attention.no_op
    assert c.block_configs[2].attention.n_heads_in_group == HEADS // 1
    # vLLM picks the width key with hasattr(ffn, "ffn_mult"): it must be absent, not None.
    assert not hasattr(c.block_configs[0].ffn, "ffn_mult")
    d = json.loads(c.to_json_string())
    assert d["block_configs"] == cfg["block_configs"]
    assert d["model_type"] == "nemotron-nas"
    assert d["intermediate_size"] is None and d["num_key_value_heads"] is None
    again = DeciLMConfig(**{k: v for k, v in d.items() if k not in ("model_type", "transformers_version")})
    assert again.to_dict()["block_configs"] == cfg["block_configs"] and again.block_configs == c.block_configs


def test_ffn_mult_follows_vllm_rule():
    m = _config_class()
    DeciLMConfig, ffn_mult_to_intermediate_size = m.DeciLMConfig, m.ffn_mult_to_intermediate_size
    assert ffn_mult_to_intermediate_size(1.0, 64) == 256  # int(42.67) = 42 -> 256
    assert ffn_mult_to_intermediate_size(5.25, 4096) == 14336  # Llama-3-8B-like
    c = DeciLMConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                     block_configs=[{"attention": {"n_heads_in_group": 2}, "ffn": {"ffn_mult": 1.0}}])
    assert c.ffn_width(0) == 256 and c.block_configs[0].ffn.ffn_mult == 1.0


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ([{"attention": {"no_op": True}, "ffn": {"intermediate_size": 8}}], "FFN runs before any attention"),
        ([{"attention": {"no_op": True}, "ffn": {"no_op": True}}], "no attention layer"),
        ([{"attention": {"no_op": False, "replace_with_linear": True, "n_heads_in_group": 1},
           "ffn": {"no_op": True}}], "replace_with_linear"),
    ],
)
def test_what_vllm_cannot_serve_is_rejected(blocks, message):
    for b in blocks:
        b["attention"].setdefault("replace_with_linear", False)
        b["attention"].setdefault("no_op", False)
        b["ffn"].setdefault("no_op", False)
        b["ffn"].setdefault("replace_with_linear", False)
    with pytest.raises(ValueError, match=message):
        check_decilm_servable({"num_hidden_layers": len(blocks), "block_configs": blocks})


def test_identity_layers_before_the_first_attention_are_servable():
    arch = full_arch(512, layers=2)
    arch = arch.with_blocks((Block(None, None), *arch.blocks))
    cfg = decilm_config_from_architecture(arch, **GLOBALS)
    assert cfg["block_configs"][0]["attention"]["no_op"] and cfg["num_hidden_layers"] == 3


def test_non_llama_blocks_are_rejected():
    mamba = Mamba2(heads=4, head_dim=16, state_size=16, groups=1, conv_kernel=4)
    for block in (Block(mamba, MLP(64)), Block(Attention(4, 2, 16), MoE(4, 2, 32)),
                  Block(Attention(4, 2, 16), MLP(64, gated=False, activation="relu2"))):
        arch = Architecture("x", 512, 64, 4, 16, False, (Block(Attention(4, 2, 16), MLP(64)), block))
        with pytest.raises(ValueError, match="block 1"):
            decilm_config_from_architecture(arch)


def test_llama_config_needs_a_homogeneous_model():
    cfg = llama_config_from_architecture(full_arch(512, kv=2, width=128), **GLOBALS)
    assert (cfg["num_key_value_heads"], cfg["intermediate_size"]) == (2, 128)
    with pytest.raises(ValueError, match="identical blocks"):
        llama_config_from_architecture(hetero_arch(512))


def test_expected_shapes_follow_the_block_configs():
    shapes = expected_shapes(decilm_config_from_architecture(hetero_arch(512), **GLOBALS))
    assert shapes["model.layers.2.self_attn.k_proj.weight"] == (32, 64)  # 1 KV head x 32
    assert shapes["model.layers.3.self_attn.v_proj.weight"] == (128, 64)
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (128, 64)  # head_dim 32 != 64 / 4
    assert shapes["model.layers.0.self_attn.o_proj.weight"] == (64, 128)
    assert shapes["model.layers.5.mlp.down_proj.weight"] == (64, 160)
    assert not any(k.startswith("model.layers.4.") for k in shapes)
    assert "model.layers.1.input_layernorm.weight" not in shapes
    assert "model.layers.2.post_attention_layernorm.weight" not in shapes


def test_a_failed_export_leaves_nothing_behind(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")

    cfg = decilm_config_from_architecture(hetero_arch(512), **GLOBALS)
    sd = {k: torch.zeros(s) for k, s in expected_shapes(cfg).items()}
    sd["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(32, 64)  # wrong KV width
    del sd["model.norm.weight"]
    with pytest.raises(ValueError) as err:
        export_decilm(tmp_path / "m", cfg, sd)
    assert "missing ['model.norm.weight']" in str(err.value)
    assert "model.layers.0.self_attn.k_proj.weight: expected (64, 64), got (32, 64)" in str(err.value)
    assert list(tmp_path.iterdir()) == []

    # A failure while writing (here: a tokenizer folder without tokenizer files) also cleans up,
    # and an existing export is left untouched.
    sd = {k: torch.zeros(s) for k, s in expected_shapes(cfg).items()}
    first = export_decilm(tmp_path / "m", cfg, sd)
    with pytest.raises(FileExistsError):
        export_decilm(tmp_path / "m", cfg, sd)
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        export_decilm(tmp_path / "m", cfg, sd, tokenizer_dir=tmp_path / "nowhere", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert (first / "model.safetensors").is_file()
    export_decilm(tmp_path / "m", cfg, sd, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
