"""The canonical functional decoder (teacher and supernet in one) equals transformers' Llama and
Mistral on the same weights, read through the Llama family's checkpoint names."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import _tinykit as kit  # noqa: E402

from autocompress.families.llama.load import llama_config, load
from autocompress.nn.hybrid import forward, rope_tables
from autocompress.parents.hf_config import architecture_from_config


@pytest.mark.parametrize(("kind", "tie", "over"), [
    ("llama", False, {}),
    ("llama", True, {}),
    ("llama", False, {"num_key_value_heads": 1, "rope_parameters": {"rope_type": "default", "rope_theta": 1e5}}),
    ("mistral", False, {"sliding_window": 5}),
])
def test_logits_equal_transformers(kind, tie, over):
    model = kit.random_llama(3, tie, kind=kind, **over)
    cfg = kit.config_of(model)
    ids = kit.batches(1, seq=20)[0]
    with torch.no_grad():
        ref = model(ids).logits
        out = forward(kit.canonical_of(model), cfg, ids)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_load_llama_folder_and_architecture(tmp_path):
    model = kit.random_llama(2, tie=True)
    folder = kit.save_parent(model, tmp_path / "parent")
    params, cfg = load(folder)
    assert "lm_head" not in params and cfg.arch.tie_embeddings
    assert cfg.arch == architecture_from_config(model.config.to_dict())
    ids = kit.batches(1, seq=8)[0]
    with torch.no_grad():
        torch.testing.assert_close(forward(params, cfg, ids), model(ids).logits, atol=1e-5, rtol=1e-5)


def test_decilm_parent_config_and_refusals():
    from autocompress.export.decilm import decilm_config_from_architecture

    ek = kit._exportkit()
    cfg = llama_config({**decilm_config_from_architecture(ek.hetero_arch(512), **ek.GLOBALS),
                        "model_type": "nemotron-nas"})
    assert tuple(b.attention.kv_heads if b.attention else None for b in cfg.arch.blocks) == (2, None, 1, 4, None, 2)
    assert tuple(b.ffn.width if b.ffn else None for b in cfg.arch.blocks) == (96, 128, None, 64, None, 160)
    base = kit.hf_config(2).to_dict()
    with pytest.raises(NotImplementedError, match="RoPE type 'llama3'"):
        llama_config({**base, "rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}})
    with pytest.raises(NotImplementedError, match="biases"):
        llama_config({**base, "attention_bias": True})
    with pytest.raises(NotImplementedError, match="model_type"):
        llama_config({**base, "model_type": "qwen3_moe"})


def test_rope_tables_match_transformers():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = kit.hf_config(2)
    rot = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, 12, kit.HIDDEN)
    cos_ref, sin_ref = rot(x, torch.arange(12)[None])
    cos, sin = rope_tables(12, kit.HEAD_DIM, 10000.0)
    torch.testing.assert_close(cos, cos_ref[0], atol=0, rtol=0)
    torch.testing.assert_close(sin, sin_ref[0], atol=0, rtol=0)
