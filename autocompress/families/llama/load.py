"""Reading a Llama / Mistral / DeciLM checkpoint: its tensor names, the forward's globals, ``load``.

The parent loader the importance, teacher and parent-quality stages run. It is a module apart
from the family's (``families.llama.family``: export, ``FAMILY``) because those stages' cache keys
hash the code they run (``families.hybrid.hybrid_family``): an edit of the export or the search
must not re-run an hour of importance and teacher outputs.

Names: transformers' ``LlamaForCausalLM`` ones, which the DeciLM export and vLLM's loader use too::

    model.embed_tokens.weight, model.norm.weight, lm_head.weight (absent when tied)
    model.layers.{i}.input_layernorm.weight, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight
    model.layers.{i}.post_attention_layernorm.weight, model.layers.{i}.mlp.{gate,up,down}_proj.weight

A DeciLM layer keeps its index when a sub-block is removed (``no_op``): its weights and norm are
simply absent. Covered: Llama / SmolLM2 (default RoPE), Mistral (optional sliding window) and
DeciLM-shaped parents (per-layer KV heads and FFN widths, removed halves). Refused: RoPE scaling,
attention / MLP biases, ``replace_with_linear`` blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autocompress.families import checkpoint as ck
from autocompress.families.llama.config import ffn_mult_to_intermediate_size
from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.nn.hybrid import HybridConfig, pn

# canonical sub-name -> Llama name (``model.layers.{i}.<name>.weight``), by the sub-block holding it
_ATTN = {"mixer_norm": "input_layernorm", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
         "v": "self_attn.v_proj", "o": "self_attn.o_proj"}
_FFN = {"ffn_norm": "post_attention_layernorm", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
        "down": "mlp.down_proj"}
MODEL_TYPES = ("llama", "mistral", "nemotron-nas")


def llama_architecture(native: Mapping[str, Any]) -> Architecture:
    """The IR the forward runs, from a ``config.json`` dict: llama, mistral (SmolLM2 is llama) and
    nemotron-nas (DeciLM); per-layer KV heads and FFN widths, None where a sub-block is removed."""
    c = dict(native)
    mt = c.get("model_type")
    if mt not in MODEL_TYPES:
        raise NotImplementedError(f"model_type {mt!r}: the Llama family covers {', '.join(MODEL_TYPES)}")
    if c.get("attention_bias") or c.get("mlp_bias"):
        raise NotImplementedError("attention / MLP biases are not supported by the functional forward")
    d, heads, layers = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    if mt == "nemotron-nas":
        kv, widths = [], []
        for b in c["block_configs"]:
            a, f = b["attention"], b["ffn"]
            if a.get("replace_with_linear") or f.get("replace_with_linear"):
                raise NotImplementedError("replace_with_linear blocks")
            kv.append(None if a.get("no_op") else heads // a["n_heads_in_group"])
            if f.get("no_op"):
                widths.append(None)
            elif f.get("intermediate_size") is not None:
                widths.append(int(f["intermediate_size"]))
            else:
                widths.append(ffn_mult_to_intermediate_size(f["ffn_mult"], d))
    else:
        kv = [c.get("num_key_value_heads") or heads] * layers
        widths = [c["intermediate_size"]] * layers
    for k in kv:
        if k is not None and heads % k:
            raise ValueError(f"kv heads {k} must divide {heads} query heads")
    window = c.get("sliding_window") if mt == "mistral" else None
    hd, act = c.get("head_dim") or d // heads, c.get("hidden_act", "silu")
    blocks = tuple(Block(None if k is None else Attention(heads, k, hd, window),
                         None if w is None else MLP(w, True, act)) for k, w in zip(kv, widths))
    return Architecture(mt, c["vocab_size"], d, heads, hd, bool(c.get("tie_word_embeddings", False)), blocks,
                        c.get("max_position_embeddings", 2048), "")


def llama_config(native: Mapping[str, Any], arch: Architecture | None = None) -> HybridConfig:
    """The forward's globals (RMSNorm eps, RoPE base) from ``config.json``; the IR is always the one
    ``llama_architecture`` reads from it (``arch`` is accepted for ``families.hybrid.config_of``)."""
    c = dict(native)
    rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
    rtype = rope.get("rope_type", rope.get("type", "default"))
    if rtype != "default":
        raise NotImplementedError(f"RoPE type {rtype!r} (only the default, unscaled RoPE)")
    theta = float(rope.get("rope_theta", c.get("rope_theta", 10000.0)))
    return HybridConfig(llama_architecture(c), float(c.get("rms_norm_eps", 1e-5)), theta, native=dict(native))


def llama_globals(cfg: HybridConfig) -> dict[str, Any]:
    """The keyword globals ``export.decilm`` takes besides the Architecture."""
    c = cfg.native
    return {"rms_norm_eps": cfg.eps, "rope_theta": cfg.rope_theta, "hidden_act": c.get("hidden_act", "silu"),
            "bos_token_id": c.get("bos_token_id"), "eos_token_id": c.get("eos_token_id"),
            "pad_token_id": c.get("pad_token_id"), "max_position_embeddings": cfg.arch.max_position}


def names(arch: Architecture) -> dict[str, str]:
    """Canonical name -> Llama name of every tensor ``arch`` has (layer indices kept)."""
    plain = {"embed": "model.embed_tokens.weight", "norm_f": "model.norm.weight"}
    if not arch.tie_embeddings:
        plain["lm_head"] = "lm_head.weight"
    for l, b in enumerate(arch.blocks):
        for present, table in ((b.mixer is not None, _ATTN), (b.ffn is not None, _FFN)):
            if present:
                plain.update({pn(l, c): f"model.layers.{l}.{n}.weight" for c, n in table.items()})
    return plain


def load(folder):
    """(canonical fp32 params, HybridConfig) of a Llama / Mistral / DeciLM safetensors folder."""
    native, tensors = ck.read_folder(folder)
    cfg = llama_config(native)
    if cfg.arch.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    extra = sorted(set(tensors) - set(names(cfg.arch).values()))
    if extra:
        raise ValueError(f"unexpected parameters (biases?) the Llama forward has no place for: {extra[:5]}")
    return ck.to_canonical(tensors, names(cfg.arch), {}, {}), cfg


__all__ = ["MODEL_TYPES", "llama_architecture", "llama_config", "llama_globals", "load", "names"]
