"""The DeciLM ("nemotron-nas") and Llama configs of an architecture, and the tensors they expect.

* **DeciLM** (``"model_type": "nemotron-nas"``, ``DeciLMForCausalLM``): per-layer KV heads and FFN widths,
  removable attention/FFN halves. vLLM serves it natively; transformers loads it through the two
  self-contained files in ``autocompress/modeling`` that the writer copies into the folder (``auto_map``,
  ``trust_remote_code=True``).
* **Llama** (``LlamaForCausalLM``): for a homogeneous result; needs no remote code at all.

``writer`` writes the folders.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autocompress.families.llama.config import ffn_mult_to_intermediate_size
from autocompress.ir import MLP, Architecture, Attention

if TYPE_CHECKING:
    import torch

_DEFAULT_GLOBALS: dict[str, Any] = {
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}


# ---- configs from the IR ------------------------------------------------------------------------
def _globals(arch: Architecture, overrides: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(overrides) - set(_DEFAULT_GLOBALS) - {"rope_parameters", "max_position_embeddings"}
    if unknown:
        raise TypeError(f"unknown Llama globals {sorted(unknown)}; allowed: {sorted(_DEFAULT_GLOBALS)}")
    g = {**_DEFAULT_GLOBALS, **overrides}
    rope = dict(g.pop("rope_parameters", None) or {"rope_type": "default"})
    rope.setdefault("rope_theta", g.pop("rope_theta"))
    return {
        "vocab_size": arch.vocab_size,
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "head_dim": arch.head_dim,
        "max_position_embeddings": g.pop("max_position_embeddings", arch.max_position),
        "tie_word_embeddings": arch.tie_embeddings,
        "rope_parameters": rope,
        **g,
    }


def _check_llama_like(arch: Architecture) -> str:
    """Both formats are Llama blocks: attention without sliding window, gated MLP, one activation."""
    acts = set()
    for i, b in enumerate(arch.blocks):
        if b.mixer is not None and not isinstance(b.mixer, Attention):
            raise ValueError(f"block {i}: {type(b.mixer).__name__} mixer cannot be exported as DeciLM/Llama")
        if b.attention is not None and b.attention.sliding_window is not None:
            raise ValueError(f"block {i}: sliding-window attention cannot be exported as DeciLM/Llama")
        if b.ffn is not None:
            if not isinstance(b.ffn, MLP) or not b.ffn.gated:
                raise ValueError(f"block {i}: only gated dense MLPs export as DeciLM/Llama, got {b.ffn}")
            acts.add(b.ffn.activation)
    if len(acts) > 1:
        raise ValueError(f"one activation for all MLPs is required, got {sorted(acts)}")
    return acts.pop() if acts else "silu"


def decilm_config_from_architecture(arch: Architecture, **llama_globals: Any) -> dict[str, Any]:
    """The DeciLM ``config.json`` content (without auto_map/architectures) for ``arch``.

    ``llama_globals``: rms_norm_eps, rope_theta or rope_parameters, hidden_act, attention_bias, mlp_bias,
    bos/eos/pad_token_id, max_position_embeddings (the IR does not carry them).
    """
    act = _check_llama_like(arch)
    llama_globals.setdefault("hidden_act", act)
    blocks = []
    for b in arch.blocks:
        att = b.attention
        blocks.append({
            "attention": {"no_op": att is None, "replace_with_linear": False,
                          "n_heads_in_group": None if att is None else arch.num_heads // att.kv_heads},
            "ffn": {"no_op": b.ffn is None, "replace_with_linear": False,
                    "intermediate_size": None if b.ffn is None else b.ffn.width},
        })
    cfg = _globals(arch, llama_globals)
    cfg.update(intermediate_size=None, num_key_value_heads=None, block_configs=blocks)
    check_decilm_servable(cfg)
    return cfg


def llama_config_from_architecture(arch: Architecture, **llama_globals: Any) -> dict[str, Any]:
    """The LlamaForCausalLM ``config.json`` content for a homogeneous, all-full ``arch``."""
    act = _check_llama_like(arch)
    b0 = arch.blocks[0]
    if not arch.is_homogeneous() or b0.attention is None or b0.ffn is None:
        raise ValueError("a Llama export needs identical blocks with attention and MLP; use the DeciLM format")
    llama_globals.setdefault("hidden_act", act)
    cfg = _globals(arch, llama_globals)
    cfg.update(intermediate_size=b0.ffn.width, num_key_value_heads=b0.attention.kv_heads)
    return cfg


def check_decilm_servable(cfg: Mapping[str, Any]) -> None:
    """Reject what stock vLLM 0.32 cannot serve (seen on CPU; facts.md).

    * the first sub-block that runs must be an attention: vLLM's DeciLM layer starts the residual stream in
      the attention half, and a real FFN before any attention dies with "too many values to unpack";
    * ``replace_with_linear`` crashes; at least one attention layer is needed for the KV-cache spec.
    """
    blocks = cfg["block_configs"]
    if len(blocks) != cfg["num_hidden_layers"]:
        raise ValueError(f"{len(blocks)} block configs for {cfg['num_hidden_layers']} layers")
    for i, b in enumerate(blocks):
        if b["attention"].get("replace_with_linear") or b["ffn"].get("replace_with_linear"):
            raise ValueError(f"block {i}: replace_with_linear is not served by vLLM")
        if not b["attention"]["no_op"]:
            break
        if not b["ffn"]["no_op"]:
            raise ValueError(
                f"block {i}: an FFN runs before any attention; vLLM 0.32 crashes on this "
                "(keep the first executed sub-block an attention)"
            )
    else:
        raise ValueError("no attention layer: vLLM cannot size a KV cache for this model")


# ---- tensors ------------------------------------------------------------------------------------
def expected_shapes(cfg: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a Llama or DeciLM checkpoint with this config (what vLLM loads)."""
    d, heads, v = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or d // heads
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, d)
    blocks = cfg.get("block_configs")
    for i in range(cfg["num_hidden_layers"]):
        if blocks is None:
            kv, width = cfg.get("num_key_value_heads") or heads, cfg["intermediate_size"]
        else:
            a, f = blocks[i]["attention"], blocks[i]["ffn"]
            kv = None if a["no_op"] else heads // a["n_heads_in_group"]
            width = None if f["no_op"] else f.get("intermediate_size")
            if width is None and not f["no_op"]:
                width = ffn_mult_to_intermediate_size(f["ffn_mult"], d)
        p = f"model.layers.{i}."
        if kv is not None:
            shapes[p + "input_layernorm.weight"] = (d,)
            for name, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                shapes[f"{p}self_attn.{name}_proj.weight"] = (rows, d)
                if cfg.get("attention_bias"):
                    shapes[f"{p}self_attn.{name}_proj.bias"] = (rows,)
            shapes[p + "self_attn.o_proj.weight"] = (d, heads * hd)
            if cfg.get("attention_bias"):
                shapes[p + "self_attn.o_proj.bias"] = (d,)
        if width is not None:
            shapes[p + "post_attention_layernorm.weight"] = (d,)
            for name, shape in (("gate", (width, d)), ("up", (width, d)), ("down", (d, width))):
                shapes[f"{p}mlp.{name}_proj.weight"] = shape
                if cfg.get("mlp_bias"):
                    shapes[f"{p}mlp.{name}_proj.bias"] = shape[:1]
    return shapes


def checked_tensors(cfg: Mapping[str, Any], state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    want = expected_shapes(cfg)
    given = dict(state_dict)
    if cfg.get("tie_word_embeddings"):
        given.pop("lm_head.weight", None)  # tied: the loader re-ties it to the embedding
    missing = sorted(set(want) - set(given))
    extra = sorted(set(given) - set(want))
    wrong = sorted(f"{k}: expected {want[k]}, got {tuple(given[k].shape)}"
                   for k in set(want) & set(given) if tuple(given[k].shape) != want[k])
    if missing or extra or wrong:
        lines = [f"missing {missing}"] * bool(missing) + [f"unexpected {extra}"] * bool(extra) + wrong
        raise ValueError("state_dict does not match the config:\n  " + "\n  ".join(lines))
    out, seen = {}, set()
    for k in sorted(given):
        t = given[k].detach().to("cpu").contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        out[k] = t.clone() if key in seen else t  # safetensors refuses shared storage
        seen.add(key)
    return out
