"""Which family reads which parent: a literal table, torch-free (``acc check`` reads it).

``CONFIG_READERS`` maps a config.json ``model_type`` to its family's reader (``Cfg``, name) ->
``Architecture``; ``parents.hf_config`` parses, dispatches through it and words the errors.
``GGUF_READERS`` maps a GGUF ``general.architecture`` (llama.cpp's name) to its family's reader
(the generic Llama-block reading, the sliding window) -> ``Architecture``; ``parents.gguf_meta``
reads the keys every architecture shares and dispatches through it. Each reader lives in its
family's folder (``families/<name>/config.py``), next to the family's torch side; every module
here and there imports no torch.

A family the parsers read is either built (``registry.BUILD_FAMILIES``) or says why not
(``registry.NOT_BUILT``); ``tests/families/test_registry.py`` checks both tables against these.
"""

from __future__ import annotations

from collections.abc import Callable

from autocompress.families.gemma3 import config as gemma3
from autocompress.families.llama import config as llama
from autocompress.families.native_moe import config as native_moe
from autocompress.families.nemotron_h import config as nemotron_h
from autocompress.ir import Architecture
from autocompress.parents.config_access import Cfg

# model_type -> reader. Keep in step with examples/configs (tests/parents/test_parent_hf_config.py).
CONFIG_READERS: dict[str, Callable[[Cfg, str], Architecture]] = {
    "llama": llama.llama,
    "mistral": llama.llama,
    "qwen2": llama.qwen_dense,
    "qwen3": llama.qwen_dense,
    "nemotron-nas": llama.decilm,
    "mixtral": native_moe.mixtral,
    "qwen2_moe": native_moe.qwen_moe,
    "qwen3_moe": native_moe.qwen_moe,
    "gemma3_text": gemma3.gemma3,
    "nemotron_h": nemotron_h.nemotron_h,
    "nemotron_h_puzzle": nemotron_h.nemotron_h,  # what acc build exports for a heterogeneous NemotronH
}

# GGUF general.architecture -> reader of (the Llama-block architecture its shared keys give, the
# sliding window or None). The order is the one the "unsupported architecture" error lists.
GGUF_READERS: dict[str, Callable[[Architecture, int | None], Architecture]] = {
    "llama": llama.from_gguf,  # SmolLM2, Mistral
    "qwen2": llama.from_gguf,
    "qwen3": llama.from_gguf,
    "gemma3": gemma3.from_gguf,
}
