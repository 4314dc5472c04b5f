"""The Llama family's student for distillation: the extracted canonical weights under their Llama
names, loaded into the DeciLM class the export ships (fp32).

Distillation trains this module (not the functional ``prune.extract.HybridStudent``) because it
has ``model.layers``, which the FSDP2 recipe shards one decoder layer at a time
(``train.distill_dist.shard``) and hidden-state matching hooks (``train.distill.HiddenPairs``);
its ``state_dict`` has the Llama names ``families.llama.family``'s export writes.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from autocompress.export.decilm import decilm_config_from_architecture
from autocompress.families import checkpoint as ck
from autocompress.families.llama.load import llama_globals, names
from autocompress.ir import Architecture
from autocompress.modeling.configuration_decilm import DeciLMConfig
from autocompress.modeling.modeling_decilm import DeciLMForCausalLM


def llama_state(canonical: Mapping[str, torch.Tensor], arch: Architecture) -> dict[str, torch.Tensor]:
    """Canonical weights of ``arch`` under their Llama names."""
    return ck.from_canonical(canonical, names(arch), {})


def student_model(arch: Architecture, state: Mapping[str, torch.Tensor], extras: dict) -> torch.nn.Module:
    """The extracted student (canonical ``state``, ``prune.extract.extract``'s extras) as our DeciLM model."""
    cfg = decilm_config_from_architecture(arch, **llama_globals(extras["cfg"]))
    model = DeciLMForCausalLM(DeciLMConfig(**cfg)).float()
    missing, unexpected = model.load_state_dict(llama_state(state, arch), strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg.get("tie_word_embeddings"))]
    if missing or unexpected:
        raise RuntimeError(f"student weights do not match the architecture: missing {missing}, unexpected {unexpected}")
    if cfg.get("tie_word_embeddings"):
        model.tie_weights()
    return model


__all__ = ["llama_state", "student_model"]
