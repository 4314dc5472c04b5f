"""config.json -> IR: the readers table, real configs' parameter counts, and each family's rules."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from autocompress.families.llama.config import ffn_mult_to_intermediate_size
from autocompress.families.readers import CONFIG_READERS
from autocompress.ir import MLP, Attention, Mamba2, MoE
from autocompress.parents.hf_config import ConfigError, architecture_from_config

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"


def load(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


def tiny(model_type: str, **extra) -> dict:
    base = {"model_type": model_type, "vocab_size": 100, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 4, "intermediate_size": 128}
    return {**base, **extra}


# One minimal config per family: the registry completeness test walks this table.
MINIMAL = {
    "llama": tiny("llama"),
    "mistral": tiny("mistral", sliding_window=16),
    "qwen2": tiny("qwen2"),
    "qwen3": tiny("qwen3", head_dim=32),
    "mixtral": tiny("mixtral", num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": tiny("qwen2_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=64),
    "qwen3_moe": tiny("qwen3_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16),
    "gemma3_text": tiny("gemma3_text", head_dim=16, sliding_window=8),
    "nemotron_h": tiny("nemotron_h", hybrid_override_pattern="M*-E", mamba_num_heads=4, mamba_head_dim=8,
                       ssm_state_size=16, n_groups=2, conv_kernel=4, n_routed_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=16, n_shared_experts=1, moe_shared_expert_intermediate_size=32),
    "nemotron_h_puzzle": {**tiny("nemotron_h_puzzle", mamba_num_heads=4, mamba_head_dim=8, ssm_state_size=16,
                                 n_groups=2, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                 moe_shared_expert_intermediate_size=32), "block_configs": [
        {"block_type": "mamba"}, {"block_type": "attention", "num_key_value_heads": 1},
        {"block_type": "mlp", "intermediate_size": 64}, {"block_type": "moe", "n_routed_experts": 3}]},
    "nemotron-nas": {**tiny("nemotron-nas"), "block_configs": [
        {"attention": {"n_heads_in_group": 2}, "ffn": {"ffn_mult": 1.0}}] * 4},
}


def test_registry_is_complete():
    assert set(MINIMAL) == set(CONFIG_READERS)
    for model_type, cfg in MINIMAL.items():
        arch = architecture_from_config(cfg)
        assert arch.num_layers == 4 and arch.params() > 0, model_type


def test_every_example_config_is_a_registered_family():
    files = sorted(CONFIGS.glob("*.json"))
    assert len(files) >= 9
    for f in files:
        assert load(f.name)["model_type"] in CONFIG_READERS, f.name
        architecture_from_config(load(f.name))


# (file, published total, IR-invisible terms, published active or None). The IR count plus the
# terms the IR does not model must equal the published count exactly; each term is explained.
PARAMS = [
    ("llama-3.1-70b.json", 70_553_706_496, 0, None),
    ("mixtral-8x7b-v0.1.json", 46_702_792_704, 0, 12_879_925_248),
    # q_norm + k_norm, 2 x 128 per layer x 48 layers
    ("qwen3-30b-a3b.json", 30_532_122_624, 48 * 2 * 128, None),
    # q/k/v biases: 3584 + 2 x 512 per layer x 28 layers
    ("qwen2.5-7b.json", 7_615_616_512, 28 * (3584 + 2 * 512), None),
    # Gemma 3: post-norms and q/k norms are in the IR (post_norms, qk_norm): exact
    ("gemma-3-1b-it.json", 999_885_952, 0, None),
    ("gemma-3-270m.json", 268_098_176, 0, None),
    # router e_score_correction_bias: 128 per MoE layer x 23 layers
    ("nemotron-3-nano-30b-a3b.json", 31_577_940_288, 23 * 128, None),
]


@pytest.mark.parametrize("name, total, unmodelled, active", PARAMS, ids=[p[0] for p in PARAMS])
def test_param_counts_match_published(name, total, unmodelled, active):
    arch = architecture_from_config(load(name))
    assert arch.params() + unmodelled == total
    if active is not None:
        assert arch.active_params() == active


# Published only to a few digits: relative tolerance.
APPROX = [
    ("qwen3-30b-a3b.json", 30.5e9, 3.3e9, 0.02),  # "30.5B total, 3.3B activated"
    ("nemotron-3-nano-30b-a3b.json", 31.6e9, 3.6e9, 0.02),  # 31.6B total, ~3.6B active incl. embeddings
    ("nemotron-h-8b-base-8k.json", 8.1e9, None, 0.01),
    ("nemotron-h-56b-base-8k.json", 56.0e9, None, 0.01),  # paper: "56B"; IR gives 56.32B
    ("llama-3.3-nemotron-super-49b-v1.json", 49.9e9, None, 0.005),
]


@pytest.mark.parametrize("name, total, active, rel", APPROX, ids=[p[0] for p in APPROX])
def test_param_counts_near_model_cards(name, total, active, rel):
    arch = architecture_from_config(load(name))
    assert arch.params() == pytest.approx(total, rel=rel)
    if active is not None:
        assert arch.active_params() == pytest.approx(active, rel=0.03)


def test_smollm2_config_count_and_tied_default():
    cfg = tiny("llama", vocab_size=49152, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
               num_hidden_layers=30, intermediate_size=1536, tie_word_embeddings=True)
    assert architecture_from_config(cfg).params() == 134_515_008
    cfg.pop("tie_word_embeddings")  # LlamaConfig defaults to untied: the LM head adds V x d
    assert architecture_from_config(cfg).params() == 134_515_008 + 49152 * 576


def test_tie_defaults_by_family():
    assert architecture_from_config(MINIMAL["gemma3_text"]).tie_embeddings  # Gemma3TextConfig: True
    for t in ("llama", "qwen2", "mixtral", "nemotron_h", "nemotron-nas"):
        assert not architecture_from_config(MINIMAL[t]).tie_embeddings, t


# ---- head_dim ---------------------------------------------------------------------------------

def test_head_dim_explicit_or_derived():
    assert architecture_from_config(load("qwen3-30b-a3b.json")).head_dim == 128  # 2048 / 32 would be 64
    assert architecture_from_config(load("gemma-3-1b-it.json")).head_dim == 256  # 1152 / 4 would be 288
    nemo = tiny("mistral", hidden_size=5120, num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    assert architecture_from_config(nemo).head_dim == 128  # Mistral-Nemo: 5120 / 32 would be 160
    assert architecture_from_config(load("llama-3.1-70b.json")).head_dim == 128  # 8192 / 64
    assert architecture_from_config(tiny("qwen3")).head_dim == 128  # Qwen3Config default


# ---- Gemma3 -----------------------------------------------------------------------------------

def test_gemma3_sliding_pattern():
    arch = architecture_from_config(load("gemma-3-1b-it.json"))
    windows = [b.attention.sliding_window for b in arch.blocks]
    assert [i for i, w in enumerate(windows) if w is None] == [5, 11, 17, 23]
    assert set(windows) == {512, None}
    assert arch.blocks[0].ffn == MLP(6912, True, "gelu_pytorch_tanh")
    # 270M states layer_types explicitly (and the private _sliding_window_pattern): same rule.
    arch = architecture_from_config(load("gemma-3-270m.json"))
    assert [i for i, b in enumerate(arch.blocks) if b.attention.sliding_window is None] == [5, 11, 17]


def test_gemma3_layer_types_override_pattern():
    cfg = tiny("gemma3_text", head_dim=16, sliding_window=8,
               layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"])
    assert [b.attention.sliding_window for b in architecture_from_config(cfg).blocks] == [None, 8, 8, None]
    cfg["layer_types"] = ["full_attention"] * 3
    with pytest.raises(ConfigError, match=r"'layer_types' must have one entry per layer \(num_hidden_layers\)"):
        architecture_from_config(cfg)


# ---- NemotronH --------------------------------------------------------------------------------

def test_nemotron_h_pattern():
    arch = architecture_from_config(MINIMAL["nemotron_h"])
    m, a, mlp, moe = arch.blocks
    assert m.mixer == Mamba2(4, 8, 16, 2, 4) and m.ffn is None
    assert a.mixer == Attention(4, 2, 16) and a.ffn is None
    assert mlp.mixer is None and mlp.ffn == MLP(128, gated=False, activation="relu2")
    assert moe.mixer is None and moe.ffn == MoE(4, 2, 16, 1, 32, gated=False, activation="relu2")


def test_nemotron_h_real_configs():
    h8 = architecture_from_config(load("nemotron-h-8b-base-8k.json"))
    assert (len(h8.attention_layers()), sum(1 for b in h8.blocks if b.mamba)) == (4, 24)
    assert h8.blocks[0].mamba == Mamba2(128, 64, 128, 8, 4) and h8.head_dim == 128  # attention_head_dim
    nano = architecture_from_config(load("nemotron-3-nano-30b-a3b.json"))
    assert nano.attention_layers() == [5, 12, 19, 26, 33, 42]
    assert nano.blocks[1].ffn == MoE(128, 6, 1856, 1, 3712, gated=False, activation="relu2")
    assert nano.kv_elements_per_token() == 6 * 2 * 2 * 128


def test_nemotron_h_pattern_errors():
    cfg = copy.deepcopy(MINIMAL["nemotron_h"])
    cfg["hybrid_override_pattern"] = "M*-"
    with pytest.raises(ConfigError, match=r"'hybrid_override_pattern' must have one character per layer"):
        architecture_from_config(cfg)
    cfg["hybrid_override_pattern"] = "M*-X"
    with pytest.raises(ConfigError, match=r"may hold only M \(Mamba2\), \* \(attention\), - \(MLP\) and E \(MoE\)$"):
        architecture_from_config(cfg)


def test_nemotron_h_as_transformers_5_writes_it():
    """transformers 5.19 ``save_pretrained`` writes ``layers_block_type`` (new names) and neither
    ``num_hidden_layers`` nor ``hybrid_override_pattern``; the legacy names are accepted too."""
    cfg = copy.deepcopy(MINIMAL["nemotron_h"])
    del cfg["num_hidden_layers"], cfg["hybrid_override_pattern"]
    cfg["layers_block_type"] = ["linear_attention", "full_attention", "mlp", "moe"]
    assert architecture_from_config(cfg) == architecture_from_config(MINIMAL["nemotron_h"])
    cfg["layers_block_type"] = ["mamba", "attention", "mlp", "moe"]
    assert architecture_from_config(cfg).blocks == architecture_from_config(MINIMAL["nemotron_h"]).blocks
    cfg["num_hidden_layers"] = 7  # transformers ignores a disagreeing count: the list wins
    assert architecture_from_config(cfg).num_layers == 4
    cfg["layers_block_type"] = ["linear_attention", "conv"]
    with pytest.raises(ConfigError, match="'layers_block_type' must be a non-empty list of linear_attention .* moe$"):
        architecture_from_config(cfg)


def test_nemotron_h_puzzle_block_configs():
    arch = architecture_from_config(MINIMAL["nemotron_h_puzzle"])
    m, a, mlp, moe = arch.blocks
    assert arch.family == "nemotron_h" and m.mixer == Mamba2(4, 8, 16, 2, 4)
    assert a.mixer == Attention(4, 1, 16) and mlp.ffn == MLP(64, gated=False, activation="relu2")
    assert moe.ffn == MoE(3, 2, 16, 1, 32, gated=False, activation="relu2")
    cfg = copy.deepcopy(MINIMAL["nemotron_h_puzzle"])
    cfg["block_configs"][0]["mamba_num_heads"] = 2
    with pytest.raises(ConfigError, match=r"block_configs\[0\] overrides mamba_num_heads; Mamba2 sizes are global"):
        architecture_from_config(cfg)
    cfg["block_configs"][0] = {"block_type": "ssm"}
    with pytest.raises(ConfigError, match=r"block_configs\[0\]\.block_type may be mamba, attention, mlp or moe$"):
        architecture_from_config(cfg)


# ---- Qwen / Mixtral MoE -----------------------------------------------------------------------

def test_qwen_moe_sparse_step_and_dense_layers():
    cfg = copy.deepcopy(MINIMAL["qwen3_moe"])
    cfg.update(decoder_sparse_step=2, mlp_only_layers=[3])
    ffns = [b.ffn for b in architecture_from_config(cfg).blocks]
    assert [type(f).__name__ for f in ffns] == ["MLP", "MoE", "MLP", "MLP"]  # (i+1) % 2 == 0, minus layer 3
    assert ffns[0] == MLP(128) and ffns[1] == MoE(8, 2, 32)


def test_qwen3_moe_as_transformers_5_writes_it():
    cfg = copy.deepcopy(MINIMAL["qwen3_moe"])
    cfg["num_local_experts"] = cfg.pop("num_experts")  # Qwen3MoeConfig.attribute_map
    assert architecture_from_config(cfg).blocks[0].ffn == MoE(8, 2, 32)


def test_qwen2_moe_shared_expert():
    moe = architecture_from_config(MINIMAL["qwen2_moe"]).blocks[0].ffn
    assert moe == MoE(8, 2, 32, shared_experts=1, shared_width=64)


def test_mixtral_experts():
    arch = architecture_from_config(load("mixtral-8x7b-v0.1.json"))
    assert arch.blocks[0].ffn == MoE(8, 2, 14336) and arch.max_position == 32768


def test_mistral_sliding_window_and_qwen2_window_off():
    windows = lambda cfg: {b.attention.sliding_window for b in architecture_from_config(cfg).blocks}  # noqa: E731
    assert windows(MINIMAL["mistral"]) == {16}
    assert windows(tiny("mistral")) == {4096}  # MistralConfig default
    assert windows(tiny("mistral", sliding_window=None)) == {None}
    # Qwen2.5 lists sliding_window 131072 but use_sliding_window false: no window.
    assert {b.attention.sliding_window for b in architecture_from_config(load("qwen2.5-7b.json")).blocks} == {None}


# ---- DeciLM (nemotron-nas) --------------------------------------------------------------------

def test_ffn_mult_rule():
    # facts.md: int(2 * ffn_mult * hidden / 3) rounded up to a multiple of 256.
    assert ffn_mult_to_intermediate_size(2.625, 8192) == 14336
    assert ffn_mult_to_intermediate_size(5.25, 8192) == 28672
    assert ffn_mult_to_intermediate_size(1.0, 100) == 256
    assert ffn_mult_to_intermediate_size(1.0, 384) == 256  # exactly 256: no rounding up


def test_decilm_blocks():
    cfg = tiny("nemotron-nas", hidden_size=384, num_attention_heads=8, num_hidden_layers=4)
    cfg["block_configs"] = [
        {"attention": {"n_heads_in_group": 2, "no_op": False}, "ffn": {"ffn_mult": 2.625}},
        {"attention": {"no_op": True, "n_heads_in_group": None}, "ffn": {"intermediate_size": 300}},
        {"attention": {"n_heads_in_group": 8}, "ffn": {"no_op": True}},
        {"attention": {"no_op": True}, "ffn": {"no_op": True}},
    ]
    arch = architecture_from_config(cfg)
    assert arch.head_dim == 48 and arch.num_heads == 8
    assert [b.mixer for b in arch.blocks] == [Attention(8, 4, 48), None, Attention(8, 1, 48), None]
    assert [b.ffn for b in arch.blocks] == [MLP(768), MLP(300), None, None]  # int(2*2.625*384/3)=672 -> 768
    assert arch.kv_elements_per_token() == 2 * (4 + 1) * 48
    # identity layer: no parameters at all
    assert arch.blocks[3].params(384) == 0


def test_decilm_super_49b():
    arch = architecture_from_config(load("llama-3.3-nemotron-super-49b-v1.json"))
    assert arch.num_layers == 80 and len(arch.attention_layers()) == 49
    assert not arch.is_homogeneous()
    assert arch.blocks[0].ffn == MLP(14336) and arch.blocks[1].ffn == MLP(28672)


@pytest.mark.parametrize("block, message", [
    ({"attention": {"replace_with_linear": True}, "ffn": {"ffn_mult": 1.0}},
     r"block_configs\[1\]\.attention: replace_with_linear is not supported"),
    ({"attention": {"n_heads_in_group": 3}, "ffn": {"ffn_mult": 1.0}},
     r"block_configs\[1\]\.attention: n_heads_in_group must divide num_attention_heads$"),
    ({"attention": {"no_op": False}, "ffn": {"ffn_mult": 1.0}},
     r"block_configs\[1\]\.attention: missing required key 'n_heads_in_group'"),
    ({"attention": {"n_heads_in_group": 2}, "ffn": {"ffn_mult": "big"}},
     r"block_configs\[1\]\.ffn: 'ffn_mult' must be a positive number$"),
])
def test_decilm_errors_name_the_block(block, message):
    cfg = copy.deepcopy(MINIMAL["nemotron-nas"])
    cfg["block_configs"][1] = block
    with pytest.raises(ConfigError, match=message):
        architecture_from_config(cfg)


# ---- malformed configs ------------------------------------------------------------------------

@pytest.mark.parametrize("change, key, message", [
    ({"hidden_size": None}, "hidden_size", "config.json: missing required key 'hidden_size'"),
    ({"num_attention_heads": "32"}, "num_attention_heads",
     "config.json: 'num_attention_heads' must be an integer >= 1"),
    ({"num_key_value_heads": 3}, "num_key_value_heads",
     "config.json: num_key_value_heads must divide num_attention_heads"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings",
     "config.json: 'tie_word_embeddings' must be true or false"),
    ({"model_type": "gpt2"}, "model_type",
     "config.json: unsupported model_type; supported: gemma3_text, llama, mistral, mixtral, "
     "nemotron-nas, nemotron_h, nemotron_h_puzzle, qwen2, qwen2_moe, qwen3, qwen3_moe"),
    ({"model_type": None}, "model_type", "config.json: missing 'model_type' (supported: gemma3_text, llama"),
])
def test_malformed_config_names_the_key(change, key, message):
    cfg = {**MINIMAL["llama"], **change}
    with pytest.raises(ConfigError) as e:
        architecture_from_config(cfg)
    assert e.value.key == key
    assert str(e.value).startswith(message)
