"""The Llama build family (Llama, SmolLM2, Mistral, DeciLM parents) behind ``BuildFamily``.

Forward ``nn.llama``, importance ``prune.importance``, permutation ``prune.permute``,
supernet ``search.supernet``, extraction ``prune.extract``, export ``export.writer``
(Llama when homogeneous, DeciLM otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

from autocompress.evaluate.heldout import load_exported
from autocompress.export.writer import export_architecture, llama_format
from autocompress.families.base import BuildFamily
from autocompress.nn.llama import LlamaConfig, forward, load_llama
from autocompress.prune.extract import extract, student_model
from autocompress.prune.importance import measure_importance
from autocompress.prune.permute import permute
from autocompress.search.supernet import Supernet


def _config(folder):
    return LlamaConfig.from_hf(json.loads((Path(folder) / "config.json").read_text()))


def _supernet(permuted, cfg, space, parent_arch=None):
    return Supernet(permuted, cfg, space)  # a Llama parent has no global variants: its own sizes


def _export(out, arch, state, tokenizer_dir, extras, overwrite=True, spec_path=None, strategy=None) -> str:
    export_architecture(Path(out), arch, state, tokenizer_dir, overwrite=overwrite, spec_path=spec_path,
                        strategy=strategy, **extras)
    return "llama" if llama_format(arch) else "decilm"


FAMILY = BuildFamily(
    "llama", load_llama, _config, forward, measure_importance, permute, _supernet, extract, student_model, _export,
    load_exported,
    # importance and teacher name the loader too (``nn.llama.load_llama``, in their import closure)
    {"importance": ("autocompress.prune.importance", "autocompress.prune.permute", "autocompress.nn.llama"),
     "teacher": ("autocompress.data.teacher", "autocompress.nn.llama"),
     "search": ("autocompress.search.strategy", "autocompress.search.supernet"),
     "distill": ("autocompress.train.distill", "autocompress.prune.extract")},
)
