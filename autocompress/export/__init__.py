"""Export: checkpoints that stock vLLM and transformers load (DeciLM for heterogeneous, Llama otherwise).

Importing this package is cheap; torch, safetensors and transformers are imported by the writers.
``gguf_convert`` turns a shipped GGUF parent into a cached safetensors folder.
"""

from .decilm import (
    check_decilm_servable,
    decilm_config_from_architecture,
    expected_shapes,
    export_architecture,
    export_decilm,
    export_llama,
    llama_config_from_architecture,
)

__all__ = [
    "check_decilm_servable",
    "decilm_config_from_architecture",
    "expected_shapes",
    "export_architecture",
    "export_decilm",
    "export_llama",
    "llama_config_from_architecture",
]
