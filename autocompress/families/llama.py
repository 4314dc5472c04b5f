"""The Llama build family (Llama, SmolLM2, Mistral, DeciLM parents): the modules ``acc build`` ran
before the per-family seam, unchanged, behind ``BuildFamily``.

Forward ``nn.llama``, importance ``prune.importance``, permutation ``prune.permute``,
supernet ``search.supernet``, extraction ``prune.extract``, export ``export.writer``
(Llama when homogeneous, DeciLM otherwise).
"""

from __future__ import annotations

from pathlib import Path

from autocompress.families.base import BuildFamily


def _load(folder):
    from autocompress.nn.llama import load_llama

    return load_llama(folder)


def _config(folder):
    import json

    from autocompress.nn.llama import LlamaConfig

    return LlamaConfig.from_hf(json.loads((Path(folder) / "config.json").read_text()))


def _forward(params, cfg, input_ids, masks=None, tap=None, return_hidden=False, start=None):
    from autocompress.nn.llama import forward

    return forward(params, cfg, input_ids, masks, tap, return_hidden, start)


def _importance(params, cfg, rows, batch, ablation_rows, progress):
    from autocompress.prune.importance import measure_importance

    return measure_importance(params, cfg, rows, batch, ablation_rows, progress)


def _permute(params, cfg, stats):
    from autocompress.prune.permute import permute

    return permute(params, cfg, stats)


def _supernet(permuted, cfg, space, parent_arch=None):
    from autocompress.search.supernet import Supernet

    return Supernet(permuted, cfg, space)


def _extract(permuted, cfg, arch):
    from autocompress.prune.extract import extract

    return extract(permuted, cfg, arch)


def _student(arch, state, extras):
    from autocompress.prune.extract import student_model

    return student_model(arch, state, extras)


def _export(out, arch, state, tokenizer_dir, extras, overwrite=True, spec_path=None, strategy=None) -> str:
    from autocompress.export.writer import export_architecture, llama_format

    export_architecture(Path(out), arch, state, tokenizer_dir, overwrite=overwrite, spec_path=spec_path,
                        strategy=strategy, **extras)
    return "llama" if llama_format(arch) else "decilm"


def _load_exported(folder):
    from autocompress.evaluate.heldout import load_exported

    return load_exported(folder)


FAMILY = BuildFamily(
    "llama", _load, _config, _forward, _importance, _permute, _supernet, _extract, _student, _export, _load_exported,
    # importance and teacher name the loader too (``nn.llama.load_llama``; already in their import
    # closure, so the digests are the ones they were)
    {"importance": ("autocompress.prune.importance", "autocompress.prune.permute", "autocompress.nn.llama"),
     "teacher": ("autocompress.data.teacher", "autocompress.nn.llama"),
     "search": ("autocompress.search.strategy", "autocompress.search.supernet"),
     "distill": ("autocompress.train.distill", "autocompress.prune.extract")},
)
