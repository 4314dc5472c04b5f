"""The NemotronH-Puzzle model for transformers: stock NemotronH blocks, each built from its layer's
config (``NemotronHPuzzleConfig.get_nemotron_h_config_for_layer``).

Self-contained (copied into Puzzle checkpoints, loaded with ``trust_remote_code=True``); vLLM does
not need it (it serves ``NemotronHPuzzleForCausalLM`` with its own ``nemotron_h.py``).
transformers finds checkpoint-name conversions by ``model_type``: without registering NemotronH's
(``backbone.*`` <-> ``model.*``, per-expert <-> stacked experts) for ``nemotron_h_puzzle``, it
would load none of the weights and say so only in a warning.
"""

from __future__ import annotations

from torch import nn
from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.models.nemotron_h.modeling_nemotron_h import (NemotronHBlock, NemotronHForCausalLM, NemotronHModel,
                                                                NemotronHRMSNorm)

from .configuration_nemotron_h_puzzle import NemotronHPuzzleConfig  # a sibling file in the checkpoint too

register_checkpoint_conversion_mapping("nemotron_h_puzzle", get_checkpoint_conversion_mapping("nemotron_h"),
                                       overwrite=True)


class NemotronHPuzzleModel(NemotronHModel):
    config_class = NemotronHPuzzleConfig

    def __init__(self, config):
        super(NemotronHModel, self).__init__(config)  # PreTrainedModel's init only: the layers differ
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([NemotronHBlock(config.get_nemotron_h_config_for_layer(i), layer_idx=i)
                                     for i in range(config.num_hidden_layers)])
        self.norm_f = NemotronHRMSNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.gradient_checkpointing = False
        self.post_init()


class NemotronHPuzzleForCausalLM(NemotronHForCausalLM):
    config_class = NemotronHPuzzleConfig

    def __init__(self, config):
        super(NemotronHForCausalLM, self).__init__(config)
        self.model = NemotronHPuzzleModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()


__all__ = ["NemotronHPuzzleForCausalLM", "NemotronHPuzzleModel"]
