"""Model classes for the formats autocompress exports.

``configuration_decilm.py`` and ``modeling_decilm.py`` are self-contained: the exporter copies them into
each checkpoint (``auto_map``), so stock transformers and vLLM load the result with
``trust_remote_code=True`` without autocompress installed. Importing this package imports nothing
heavy; ``register()`` (which imports torch and transformers) makes ``AutoConfig`` and
``AutoModelForCausalLM`` resolve ``model_type: nemotron-nas`` in this process without remote code.
"""

from __future__ import annotations

from pathlib import Path

#: The files copied into a DeciLM checkpoint, and the auto_map that points at them.
DECILM_FILES = ("configuration_decilm.py", "modeling_decilm.py")
DECILM_AUTO_MAP = {
    "AutoConfig": "configuration_decilm.DeciLMConfig",
    "AutoModelForCausalLM": "modeling_decilm.DeciLMForCausalLM",
}


def source_dir() -> Path:
    """Folder holding the self-contained modeling files (for copying into a checkpoint)."""
    return Path(__file__).resolve().parent


def register() -> None:
    """Register DeciLMConfig / DeciLMForCausalLM with the transformers Auto classes (idempotent)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from autocompress.modeling.configuration_decilm import DeciLMConfig
    from autocompress.modeling.modeling_decilm import DeciLMForCausalLM

    AutoConfig.register(DeciLMConfig.model_type, DeciLMConfig, exist_ok=True)
    AutoModelForCausalLM.register(DeciLMConfig, DeciLMForCausalLM, exist_ok=True)


__all__ = ["DECILM_AUTO_MAP", "DECILM_FILES", "register", "source_dir"]
