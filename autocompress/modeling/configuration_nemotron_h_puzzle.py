"""Configuration of the NemotronH-Puzzle format: a NemotronH with one block config per layer.

Self-contained on purpose: this file is copied next to ``config.json`` in every Puzzle checkpoint
autocompress exports, and loaded with ``trust_remote_code=True`` by processes that never import
autocompress (stock vLLM 0.32, stock transformers 5.19). It imports only torch-free transformers API.

Format (vLLM ``model_executor/models/nemotron_h.py``, which ``NemotronHPuzzleForCausalLM`` maps to)::

    "block_configs": [{"block_type": "mamba"},
                      {"block_type": "attention", "num_key_value_heads": 1},
                      {"block_type": "mlp", "intermediate_size": 96},
                      {"block_type": "moe", "n_routed_experts": 3, "moe_intermediate_size": 48}, ...]

One entry per layer; ``block_type`` gives the layer's kind, the other keys override the global
config for that layer. vLLM looks up ``get_nemotron_h_config_for_layer`` on the config object
(``getattr``) in its MLP, MoE and attention layers; its Mamba2 layers and state cache read the
global config, so Mamba2 sizes are global. Global values stay real values (never deleted): a
deleted key would silently come back as the dataclass default.
"""

from __future__ import annotations

import copy

from transformers.models.nemotron_h.configuration_nemotron_h import NemotronHConfig

_LAYER_TYPE = {"mamba": "linear_attention", "attention": "full_attention", "mlp": "mlp", "moe": "moe"}


class NemotronHPuzzleConfig(NemotronHConfig):
    model_type = "nemotron_h_puzzle"
    block_configs: list | None = None

    def __post_init__(self, **kwargs):
        if self.block_configs:
            self.layers_block_type = [_LAYER_TYPE[b["block_type"]] for b in self.block_configs]
        super().__post_init__(**kwargs)

    def get_nemotron_h_config_for_layer(self, layer_idx: int) -> NemotronHConfig:
        """The global config with layer ``layer_idx``'s overrides (what vLLM and the model class read)."""
        layer_config = copy.copy(self)
        for key, value in (self.block_configs or [{}] * (layer_idx + 1))[layer_idx].items():
            if key != "block_type":
                object.__setattr__(layer_config, key, value)
        return layer_config


__all__ = ["NemotronHPuzzleConfig"]
