"""Heterogeneous Gemma 3 text model, shipped inside checkpoints (``auto_map``) by ``families.gemma3``.

Self-contained: it imports only stock transformers (>= 5.19), so ``trust_remote_code=True`` loads
it without autocompress installed. Every layer is built from ``config.per_layer_config[i]``
(transformers' own heterogeneous config: per-layer ``intermediate_size`` and ``skip``), so the
stock ``Gemma3MLP`` / ``Gemma3Attention`` take their per-layer sizes by themselves; a layer whose
``skip`` lists ``"mlp"`` (or ``"self_attn"``) has no such sub-block and no norms around it.

vLLM 0.32 serves it through its Transformers modeling backend (the architecture name is not in
its registry, so ``model_impl="auto"`` falls back there): it builds ``AutoModel`` (the text model
below), finds one stock ``Gemma3Attention`` per layer (calling ``ALL_ATTENTION_FUNCTIONS`` with
``scaling=self.scaling`` and an integer ``layer_idx``) and swaps in its own linears and norms. A
layer without attention cannot be served that way (vLLM: "does not dispatch through the
Transformers attention interface"), so ``acc build`` never removes attention for ``engine vllm``.
"""

from __future__ import annotations

from torch import nn
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3DecoderLayer,
    Gemma3ForCausalLM,
    Gemma3PreTrainedModel,
    Gemma3RMSNorm,
    Gemma3RotaryEmbedding,
    Gemma3TextModel,
    Gemma3TextScaledWordEmbedding,
)


def layer_config(config, i: int):
    return config.per_layer_config[i] if getattr(config, "is_heterogeneous", False) else config


class AutocompressGemma3DecoderLayer(Gemma3DecoderLayer):
    def __init__(self, config, layer_idx: int):
        super().__init__(config, layer_idx)
        skip = getattr(config, "skip", None) or []
        self.has_attn, self.has_mlp = "self_attn" not in skip, "mlp" not in skip
        if not self.has_attn:
            del self.self_attn, self.input_layernorm, self.post_attention_layernorm
        if not self.has_mlp:
            del self.mlp, self.pre_feedforward_layernorm, self.post_feedforward_layernorm

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, position_ids=None,
                past_key_values=None, **kwargs):
        if self.has_attn:
            residual = hidden_states
            hidden_states, _ = self.self_attn(
                hidden_states=self.input_layernorm(hidden_states), position_embeddings=position_embeddings,
                attention_mask=attention_mask, position_ids=position_ids, past_key_values=past_key_values, **kwargs)
            hidden_states = residual + self.post_attention_layernorm(hidden_states)
        if self.has_mlp:
            residual = hidden_states
            hidden_states = self.mlp(self.pre_feedforward_layernorm(hidden_states))
            hidden_states = residual + self.post_feedforward_layernorm(hidden_states)
        return hidden_states


class AutocompressGemma3TextModel(Gemma3TextModel):
    _no_split_modules = ["AutocompressGemma3DecoderLayer"]

    def __init__(self, config):
        Gemma3PreTrainedModel.__init__(self, config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = Gemma3TextScaledWordEmbedding(
            config.vocab_size, config.hidden_size, self.padding_idx, embed_scale=config.hidden_size**0.5)
        self.layers = nn.ModuleList(
            [AutocompressGemma3DecoderLayer(layer_config(config, i), i) for i in range(config.num_hidden_layers)])
        self.norm = Gemma3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Gemma3RotaryEmbedding(config)
        self.gradient_checkpointing = False
        self.post_init()


class AutocompressGemma3ForCausalLM(Gemma3ForCausalLM):
    _no_split_modules = ["AutocompressGemma3DecoderLayer"]

    def __init__(self, config):
        Gemma3PreTrainedModel.__init__(self, config)
        self.model = AutocompressGemma3TextModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()


__all__ = ["AutocompressGemma3DecoderLayer", "AutocompressGemma3ForCausalLM", "AutocompressGemma3TextModel"]
