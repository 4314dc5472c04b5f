"""The torch side the hybrid and MoE families share (``nn.hybrid``, ``prune.hybrid_*``,
``search.hybrid_supernet``), as a ``BuildFamily`` around a family's own checkpoint loader and
exporter."""

from __future__ import annotations

import json
from pathlib import Path

from autocompress.evaluate.heldout import load_exported
from autocompress.families.base import BuildFamily
from autocompress.nn.hybrid import forward
from autocompress.parents.hf_config import architecture_from_config
from autocompress.prune.hybrid_extract import extract, student_model
from autocompress.prune.hybrid_importance import measure_importance
from autocompress.prune.hybrid_permute import permute
from autocompress.search.hybrid_supernet import HybridSupernet


def hybrid_family(name: str, load, config, export) -> BuildFamily:
    """The family ``name`` whose checkpoints ``load`` reads (and ``config`` describes) and ``export`` writes.

    The stages that read the parent key their code by ``load``'s module (``families.<name>_load``:
    names, globals, the reader), never by the family module, which reaches every stage (``export``,
    the search's supernet): a change to the search or the export must not re-run importance or
    the teacher."""
    reader = load.__module__
    return BuildFamily(
        name, load, config, forward, measure_importance, permute, HybridSupernet, extract, student_model, export,
        load_exported,
        {"importance": ("autocompress.prune.hybrid_importance", "autocompress.prune.hybrid_permute", reader),
         "teacher": ("autocompress.data.teacher", "autocompress.nn.hybrid", reader),
         "search": ("autocompress.search.strategy", "autocompress.search.hybrid_supernet"),
         "distill": ("autocompress.train.distill", "autocompress.prune.hybrid_extract", reader)})


def config_of(folder, hybrid_config):
    """The ``HybridConfig`` of a folder's config.json (no weights read), by the family's builder."""
    native = json.loads((Path(folder) / "config.json").read_text())
    return hybrid_config(native, architecture_from_config(native))
