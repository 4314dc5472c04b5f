"""DeciLM ("nemotron-nas") for transformers, built from transformers' own Llama pieces.

Self-contained on purpose (see configuration_decilm.py): copied into each exported checkpoint and
loaded with ``trust_remote_code=True``; it imports only torch, transformers and its sibling config.

A layer is a Llama decoder layer whose halves may be missing:

    h = h + attn(input_layernorm(h))            # absent when block.attention.no_op
    h = h + mlp(post_attention_layernorm(h))    # absent when block.ffn.no_op

Per layer: KV heads (``num_attention_heads // n_heads_in_group``) and FFN width. Query heads, head_dim,
RoPE and the norms are global. Parameter names equal LlamaForCausalLM's, which is what vLLM's
``DeciLMForCausalLM.load_weights`` expects (q/k/v/o_proj, gate/up/down_proj, input_layernorm,
post_attention_layernorm, model.norm, model.embed_tokens, lm_head); no-op halves have no parameters.

KV cache: only attention layers own a cache slot, numbered densely in layer order (vLLM does the same),
so ``past_key_values.get_seq_length()`` (slot 0) is right even when layer 0 has no attention.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import (
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

from .configuration_decilm import DeciLMConfig


class DeciLMAttention(nn.Module):
    """LlamaAttention with the KV-head count given per layer instead of read from the config."""

    def __init__(self, config: DeciLMConfig, num_kv_heads: int, cache_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = cache_idx  # the cache slot; attention integrations read ``layer_idx``
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = num_kv_heads
        self.num_key_value_groups = self.num_heads // num_kv_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = True
        bias = config.attention_bias
        d = config.hidden_size
        self.q_proj = nn.Linear(d, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, d, bias=bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        out, weights = attention_interface(
            self,
            q,
            k,
            v,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )
        out = out.reshape(*input_shape, -1).contiguous()
        return self.o_proj(out), weights


class DeciLMMLP(nn.Module):
    """LlamaMLP (gated) with the width given per layer."""

    def __init__(self, config: DeciLMConfig, intermediate_size: int):
        super().__init__()
        d, bias = config.hidden_size, config.mlp_bias
        self.intermediate_size = intermediate_size
        self.gate_proj = nn.Linear(d, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(d, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, d, bias=bias)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DeciLMDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config: DeciLMConfig, layer_idx: int, cache_idx: int | None):
        super().__init__()
        self.layer_idx = layer_idx
        kv_heads, width = config.num_kv_heads(layer_idx), config.ffn_width(layer_idx)
        if kv_heads is not None:
            self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.self_attn = DeciLMAttention(config, kv_heads, cache_idx)
        if width is not None:
            self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.mlp = DeciLMMLP(config, width)
        self.has_attention = kv_heads is not None
        self.has_ffn = width is not None

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        if self.has_attention:
            attn, _ = self.self_attn(
                self.input_layernorm(hidden_states),
                position_embeddings=position_embeddings,
                attention_mask=attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
            hidden_states = hidden_states + attn
        if self.has_ffn:
            hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states


class DeciLMPreTrainedModel(PreTrainedModel):
    config_class = DeciLMConfig
    config: DeciLMConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DeciLMDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_attention_backend = True


class DeciLMModel(DeciLMPreTrainedModel):
    def __init__(self, config: DeciLMConfig):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        layers, slot = [], 0
        for i in range(config.num_hidden_layers):
            has_attn = config.num_kv_heads(i) is not None
            layers.append(DeciLMDecoderLayer(config, i, slot if has_attn else None))
            slot += has_attn
        self.layers = nn.ModuleList(layers)
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache is None:  # no cache while training unless asked (it would be thrown away)
            use_cache = self.config.use_cache and not self.training
        if use_cache and past_key_values is None:
            # Lazily grown: one slot per attention layer (no config, so no slots for no-op layers).
            past_key_values = DynamicCache()
        if position_ids is None:
            seen = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = (torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + seen).unsqueeze(0)
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids=position_ids)
        all_hidden = [] if kwargs.pop("output_hidden_states", False) else None
        for layer in self.layers:
            if all_hidden is not None:
                all_hidden.append(hidden_states)
            hidden_states = layer(
                hidden_states,
                position_embeddings=position_embeddings,
                attention_mask=causal_mask,
                past_key_values=past_key_values,
                position_ids=position_ids,
                **kwargs,
            )
        hidden_states = self.norm(hidden_states)
        if all_hidden is not None:
            all_hidden.append(hidden_states)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values,
            hidden_states=tuple(all_hidden) if all_hidden is not None else None,
        )


class DeciLMForCausalLM(DeciLMPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: DeciLMConfig):
        super().__init__(config)
        self.model = DeciLMModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        kwargs.pop("output_attentions", None)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=bool(output_hidden_states),
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, keep, :])
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
        )


__all__ = ["DeciLMForCausalLM", "DeciLMModel", "DeciLMPreTrainedModel"]
