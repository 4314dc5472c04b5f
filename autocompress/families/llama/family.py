"""The Llama build family (Llama, SmolLM2, Mistral, DeciLM parents) behind ``BuildFamily``.

The torch side is the canonical one (``families.hybrid``: ``nn.hybrid`` forward, ``prune.*``,
``search.supernet``); ``families.llama.load`` maps the checkpoint's Llama / DeciLM names to the
canonical layout, ``families.llama.student`` maps them back for the module distilled, and the
export (``export.writer``) writes stock Llama when every block is the same full block and DeciLM
(``block_configs``, remote code) otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

from autocompress.export.writer import export_architecture, llama_format
from autocompress.families.hybrid import hybrid_family
from autocompress.families.llama.load import llama_config, llama_globals, load
from autocompress.families.llama.student import llama_state, student_model
from autocompress.nn.hybrid import HybridConfig
from autocompress.search.supernet import Supernet


def config(folder) -> HybridConfig:
    return llama_config(json.loads((Path(folder) / "config.json").read_text()))


def supernet(permuted, cfg, space, variant=None) -> Supernet:
    return Supernet(permuted, cfg, space)  # a Llama parent has no global variants: its own sizes


def export(out, arch, state, tokenizer_dir, extras, overwrite=True, spec_path=None, strategy=None) -> str:
    """Write the student (Llama names, as the DeciLM student's ``state_dict``; or canonical names) as
    Llama or DeciLM, atomically."""
    if "embed" in state:
        state = llama_state(state, arch)
    export_architecture(Path(out), arch, state, tokenizer_dir, overwrite=overwrite, spec_path=spec_path,
                        strategy=strategy, **llama_globals(extras["cfg"]))
    return "llama" if llama_format(arch) else "decilm"


# its exports load through evaluate.heldout.load_exported, like every family's
FAMILY = hybrid_family("llama", load, config, export, student=student_model, supernet=supernet)
