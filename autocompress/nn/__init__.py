"""Small functional models over dicts of Hugging Face-named weights (teacher and supernet in one).

``llama``: Llama / Mistral / SmolLM2 and DeciLM-shaped (per-layer KV heads, FFN widths, removed halves)
decoders. MoE and Mamba mixers would be siblings with the same ``forward(params, cfg, ids, masks, tap)``
shape; they are not implemented.
"""

from autocompress.nn.llama import (
    AttnOption,
    LlamaConfig,
    Masks,
    forward,
    load_llama,
    param_name,
)

__all__ = ["AttnOption", "LlamaConfig", "Masks", "forward", "load_llama", "param_name"]
