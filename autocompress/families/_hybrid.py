"""The torch side the hybrid and MoE families share (``nn.hybrid``, ``compress.hybrid_*``), as a
``BuildFamily`` around a family's own checkpoint loader and exporter."""

from __future__ import annotations

from autocompress.families.base import BuildFamily


def _forward(params, cfg, input_ids, masks=None, tap=None, return_hidden=False, start=None):
    from autocompress.nn.hybrid import forward

    return forward(params, cfg, input_ids, masks, tap, return_hidden, start)


def _importance(params, cfg, rows, batch, ablation_rows, progress):
    from autocompress.prune.hybrid_importance import measure_importance

    return measure_importance(params, cfg, rows, batch, ablation_rows, progress)


def _permute(params, cfg, stats):
    from autocompress.prune.hybrid_permute import permute

    return permute(params, cfg, stats)


def _supernet(permuted, cfg, space, parent_arch=None):
    from autocompress.search.hybrid_supernet import HybridSupernet

    return HybridSupernet(permuted, cfg, space, parent_arch)


def _extract(permuted, cfg, arch):
    from autocompress.prune.hybrid_extract import extract

    return extract(permuted, cfg, arch)


def _student(arch, state, extras):
    from autocompress.prune.hybrid_extract import student_model

    return student_model(arch, state, extras)


def _load_exported(folder):
    from autocompress.evaluate.heldout import load_exported

    return load_exported(folder)


def hybrid_family(name: str, load, config, export) -> BuildFamily:
    """The family ``name`` whose checkpoints ``load`` reads (and ``config`` describes) and ``export`` writes.

    The stages that read the parent key their code by ``load``'s module (``families.<name>_load``:
    names, globals, the reader), never by the family module, which reaches every stage (``export``,
    this module's lazy imports): a change to the search or the export must not re-run importance
    or the teacher (docs/decisions.md, 2026-12-01, fifth session)."""
    reader = load.__module__
    return BuildFamily(
        name, load, config, _forward, _importance, _permute, _supernet, _extract, _student, export, _load_exported,
        {"importance": ("autocompress.prune.hybrid_importance", "autocompress.prune.hybrid_permute", reader),
         "teacher": ("autocompress.data.teacher", "autocompress.nn.hybrid", reader),
         "search": ("autocompress.search.strategy", "autocompress.search.hybrid_supernet"),
         "distill": ("autocompress.train.distill", "autocompress.prune.hybrid_extract", reader)})


def config_of(folder, hybrid_config):
    """The ``HybridConfig`` of a folder's config.json (no weights read), by the family's builder."""
    import json
    from pathlib import Path

    from autocompress.parents.hf_config import architecture_from_config

    native = json.loads((Path(folder) / "config.json").read_text())
    return hybrid_config(native, architecture_from_config(native))
