"""The canonical torch side every family shares (``nn.hybrid``, ``prune.importance``,
``prune.permute``, ``search.supernet``, ``prune.extract``), as a ``BuildFamily`` around a family's
own checkpoint loader and exporter."""

from __future__ import annotations

import json
from pathlib import Path

from autocompress.evaluate.heldout import load_exported
from autocompress.families.base import BuildFamily
from autocompress.nn.hybrid import forward
from autocompress.parents.hf_config import architecture_from_config
from autocompress.prune.extract import extract, student_model
from autocompress.prune.importance import measure_importance
from autocompress.prune.permute import permute
from autocompress.search.supernet import Supernet


def hybrid_family(name: str, load, config, export, student=student_model, supernet=Supernet) -> BuildFamily:
    """The family ``name`` whose checkpoints ``load`` reads (and ``config`` describes) and ``export`` writes;
    ``student`` (default: ``prune.extract.student_model``, the functional module) is what distillation
    trains, and ``supernet`` builds the search's masked supernet (``search.supernet.Supernet``'s arguments).

    The stages that read the parent key their code by ``load``'s module (``families.<name>.load``:
    names, globals, the reader), never by the family module, which reaches every stage (``export``,
    the search's supernet): a change to the search or the export must not re-run importance or
    the teacher. Distillation adds ``student``'s module when it is not ``prune.extract``."""
    reader = load.__module__
    own_student = () if student.__module__ == student_model.__module__ else (student.__module__,)
    return BuildFamily(
        name, load, config, forward, measure_importance, permute, supernet, extract, student, export,
        load_exported,
        {"importance": ("autocompress.prune.importance", "autocompress.prune.permute", reader),
         "teacher": ("autocompress.data.teacher", "autocompress.nn.hybrid", reader),
         "search": ("autocompress.search.strategy", "autocompress.search.supernet"),
         "distill": ("autocompress.train.distill", "autocompress.prune.extract", reader, *own_student)})


def config_of(folder, hybrid_config):
    """The ``HybridConfig`` of a folder's config.json (no weights read), by the family's builder."""
    native = json.loads((Path(folder) / "config.json").read_text())
    return hybrid_config(native, architecture_from_config(native))
