"""Slice a discrete architecture out of the parent's permuted weights (never the supernet's temporaries).

The result is a state dict with Llama / DeciLM names and shapes (``export.decilm.expected_shapes``) plus
the Llama globals for ``export_decilm`` / ``decilm_config_from_architecture``. Its function is, by
construction, the masked supernet's at the one-hot choice of the same architecture (tested):

* hidden d': the first d' channels of the embedding, every norm, every linear's hidden side, lm_head;
* FFN width w: gate / up rows [0, w) and down columns [0, w) of the importance-sorted channels;
* k KV heads: K / V projections pooled with ``supernet.pool_matrix`` (mean over merged groups);
  query and o_proj weights stay whole (query heads and head_dim are global in the format; ``head_dim``
  is written explicitly because d' / heads no longer gives it);
* removed sub-blocks: their weights and norm are left out (DeciLM ``no_op``).

``student_model`` loads the extracted weights into the DeciLM class the export ships (fp32).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from autocompress.export.decilm import decilm_config_from_architecture
from autocompress.ir import MLP, Architecture
from autocompress.modeling.configuration_decilm import DeciLMConfig
from autocompress.modeling.modeling_decilm import DeciLMForCausalLM
from autocompress.nn.llama import LlamaConfig, param_name
from autocompress.prune.permute import pool_matrix


def _check(parent: LlamaConfig, arch: Architecture) -> None:
    if arch.num_layers != parent.num_layers:
        raise ValueError(f"architecture has {arch.num_layers} blocks, the parent {parent.num_layers}")
    if (arch.num_heads, arch.head_dim, arch.vocab_size) != (parent.num_heads, parent.head_dim, parent.vocab_size):
        raise ValueError("query heads, head_dim and vocabulary must be the parent's")
    if not 0 < arch.hidden_size <= parent.hidden_size:
        raise ValueError(f"hidden size {arch.hidden_size} not in 1..{parent.hidden_size}")
    for l, b in enumerate(arch.blocks):
        if b.mixer is not None:
            if b.attention is None or parent.kv_heads[l] is None:
                raise ValueError(f"block {l}: only attention kept from an attention layer can be extracted")
            if b.attention.kv_heads > parent.kv_heads[l]:
                raise ValueError(f"block {l}: {b.attention.kv_heads} KV heads > the parent's {parent.kv_heads[l]}")
        if b.ffn is not None:
            if not isinstance(b.ffn, MLP) or parent.ffn_widths[l] is None:
                raise ValueError(f"block {l}: only a dense MLP of an MLP layer can be extracted")
            if b.ffn.width > parent.ffn_widths[l]:
                raise ValueError(f"block {l}: width {b.ffn.width} > the parent's {parent.ffn_widths[l]}")


def extract(permuted_params: Mapping[str, torch.Tensor], parent_cfg: LlamaConfig, arch: Architecture
            ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state_dict, llama_globals) of ``arch`` sliced from the parent's importance-permuted weights."""
    _check(parent_cfg, arch)
    P = permuted_params
    d, H, hd = arch.hidden_size, parent_cfg.num_heads, parent_cfg.head_dim
    sd: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": P["model.embed_tokens.weight"][:, :d],
        "model.norm.weight": P["model.norm.weight"][:d],
    }
    if not arch.tie_embeddings:
        head = P["model.embed_tokens.weight"] if parent_cfg.tie_embeddings else P["lm_head.weight"]
        sd["lm_head.weight"] = head[:, :d]
    for l, b in enumerate(arch.blocks):
        if b.attention is not None:
            K, k = parent_cfg.kv_heads[l], b.attention.kv_heads
            pool = pool_matrix(H, K, k)
            sd[param_name(l, "input_layernorm")] = P[param_name(l, "input_layernorm")][:d]
            sd[param_name(l, "self_attn.q_proj")] = P[param_name(l, "self_attn.q_proj")][:, :d]
            for n in ("k_proj", "v_proj"):
                w = P[param_name(l, f"self_attn.{n}")].view(K, hd, -1)
                sd[param_name(l, f"self_attn.{n}")] = torch.einsum("jk,khd->jhd", pool, w).reshape(k * hd, -1)[:, :d]
            sd[param_name(l, "self_attn.o_proj")] = P[param_name(l, "self_attn.o_proj")][:d]
        if b.ffn is not None:
            w = b.ffn.width
            sd[param_name(l, "post_attention_layernorm")] = P[param_name(l, "post_attention_layernorm")][:d]
            sd[param_name(l, "mlp.gate_proj")] = P[param_name(l, "mlp.gate_proj")][:w, :d]
            sd[param_name(l, "mlp.up_proj")] = P[param_name(l, "mlp.up_proj")][:w, :d]
            sd[param_name(l, "mlp.down_proj")] = P[param_name(l, "mlp.down_proj")][:d, :w]
    sd = {k: v.detach().clone().contiguous() for k, v in sd.items()}
    return sd, parent_cfg.llama_globals()


__all__ = ["extract"]


def student_model(arch: Architecture, state_dict: dict, llama_globals: dict) -> torch.nn.Module:
    """The extracted student as our DeciLM model (the class the export ships), fp32, in memory."""
    cfg = decilm_config_from_architecture(arch, **llama_globals)
    model = DeciLMForCausalLM(DeciLMConfig(**cfg)).float()
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg.get("tie_word_embeddings"))]
    if missing or unexpected:
        raise RuntimeError(f"student weights do not match the architecture: missing {missing}, unexpected {unexpected}")
    if cfg.get("tie_word_embeddings"):
        model.tie_weights()
    return model
