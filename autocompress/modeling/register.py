"""Model classes for the formats autocompress exports.

``configuration_decilm.py`` and ``modeling_decilm.py`` (and the NemotronH-Puzzle pair) are
self-contained: the exporter copies them into each checkpoint (``auto_map``), so stock
transformers and vLLM load the result with ``trust_remote_code=True`` without autocompress
installed. Importing this module imports nothing heavy: the model classes import transformers and
torch at their top (they must, as standalone files), so ``register()`` and ``causal_lm_class()``
import them when called. ``register()`` makes ``AutoConfig`` and ``AutoModelForCausalLM`` resolve
``model_type: nemotron-nas`` and ``nemotron_h_puzzle`` in this process without remote code.
"""

from __future__ import annotations

import json
from pathlib import Path

#: The files copied into a DeciLM checkpoint, and the auto_map that points at them.
DECILM_FILES = ("configuration_decilm.py", "modeling_decilm.py")
DECILM_AUTO_MAP = {
    "AutoConfig": "configuration_decilm.DeciLMConfig",
    "AutoModelForCausalLM": "modeling_decilm.DeciLMForCausalLM",
}


#: The same for a NemotronH-Puzzle checkpoint (``families.nemotron_h``).
PUZZLE_FILES = ("configuration_nemotron_h_puzzle.py", "modeling_nemotron_h_puzzle.py")
PUZZLE_AUTO_MAP = {
    "AutoConfig": "configuration_nemotron_h_puzzle.NemotronHPuzzleConfig",
    "AutoModelForCausalLM": "modeling_nemotron_h_puzzle.NemotronHPuzzleForCausalLM",
}


#: A heterogeneous Gemma 3 checkpoint (``families.gemma3``): stock ``gemma3_text`` config with
#: ``per_layer_config``, our thin subclasses of the stock model classes. ``AutoModel`` is what vLLM's
#: Transformers backend builds; the architecture name is one vLLM's registry does not know.
GEMMA3_FILES = ("modeling_gemma3_hetero.py",)
GEMMA3_ARCHITECTURE = "AutocompressGemma3ForCausalLM"
GEMMA3_AUTO_MAP = {
    "AutoModel": "modeling_gemma3_hetero.AutocompressGemma3TextModel",
    "AutoModelForCausalLM": "modeling_gemma3_hetero.AutocompressGemma3ForCausalLM",
}


def source_dir() -> Path:
    """Folder holding the self-contained modeling files (for copying into a checkpoint)."""
    return Path(__file__).resolve().parent


def causal_lm_class(folder):
    """The class that loads an exported folder without remote code: our heterogeneous Gemma 3
    class (imported in-process: the same file the folder ships) or ``AutoModelForCausalLM``
    (after ``register()`` for DeciLM / NemotronH-Puzzle)."""
    config = json.loads((Path(folder) / "config.json").read_text())
    if GEMMA3_ARCHITECTURE in (config.get("architectures") or []):
        from autocompress.modeling import modeling_gemma3_hetero  # transformers, torch

        return modeling_gemma3_hetero.AutocompressGemma3ForCausalLM
    from transformers import AutoModelForCausalLM

    register()
    return AutoModelForCausalLM


def own_code(folder) -> bool:
    """True when every module a folder's ``auto_map`` names is byte-identical to the file
    autocompress ships (``source_dir()``): trusting that "remote" code runs only our own code. A
    folder with no ``auto_map`` needs no remote code (False); one whose files differ, or that names
    a module we do not ship, is never trusted (an untrusted checkpoint measured by ``acc verify`` or
    ``acc profile`` must not run its Python)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    refs = (config.get("auto_map") or {}).values()
    modules = {str(r).split("--")[-1].rsplit(".", 1)[0] + ".py" for r in refs if isinstance(r, str)}
    if not modules:
        return False
    for name in modules:
        ours, theirs = source_dir() / name, Path(folder) / name
        if "/" in name or not ours.is_file() or not theirs.is_file() or ours.read_bytes() != theirs.read_bytes():
            return False
    return True


def register() -> None:
    """Register the DeciLM and NemotronH-Puzzle config / model classes with the transformers Auto
    classes (idempotent)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from autocompress.modeling import modeling_decilm, modeling_nemotron_h_puzzle  # transformers, torch

    for model in (modeling_decilm.DeciLMForCausalLM, modeling_nemotron_h_puzzle.NemotronHPuzzleForCausalLM):
        AutoConfig.register(model.config_class.model_type, model.config_class, exist_ok=True)
        AutoModelForCausalLM.register(model.config_class, model, exist_ok=True)


__all__ = ["DECILM_AUTO_MAP", "DECILM_FILES", "GEMMA3_ARCHITECTURE", "GEMMA3_AUTO_MAP", "GEMMA3_FILES", "PUZZLE_AUTO_MAP", "PUZZLE_FILES",
           "causal_lm_class", "own_code", "register", "source_dir"]
