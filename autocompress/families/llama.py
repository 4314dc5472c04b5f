"""The Llama build family (Llama, SmolLM2, Mistral, DeciLM parents): the modules ``acc build`` ran
before the per-family seam, unchanged, behind ``BuildFamily``.

Forward ``nn.llama``, importance ``compress.importance``, permutation ``compress.permute``,
supernet ``compress.supernet``, extraction ``compress.extract``, export ``export.writer``
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
    from autocompress.compress.importance import measure_importance

    return measure_importance(params, cfg, rows, batch, ablation_rows, progress)


def _permute(params, cfg, stats):
    from autocompress.compress.permute import permute

    return permute(params, cfg, stats)


def _supernet(permuted, cfg, space, parent_arch=None):
    from autocompress.compress.supernet import Supernet

    return Supernet(permuted, cfg, space)


def _extract(permuted, cfg, arch):
    from autocompress.compress.extract import extract

    return extract(permuted, cfg, arch)


def _student(arch, state, extras):
    from autocompress.compress.extract import student_model

    return student_model(arch, state, extras)


def _export(out, arch, state, tokenizer_dir, extras, overwrite=True, spec_path=None, strategy=None) -> str:
    from autocompress.export.writer import export_architecture, llama_format

    export_architecture(Path(out), arch, state, tokenizer_dir, overwrite=overwrite, spec_path=spec_path,
                        strategy=strategy, **extras)
    return "llama" if llama_format(arch) else "decilm"


def _load_exported(folder):
    from autocompress.compress.evaluate import load_exported

    return load_exported(folder)


FAMILY = BuildFamily(
    "llama", _load, _config, _forward, _importance, _permute, _supernet, _extract, _student, _export, _load_exported,
    # importance and teacher name the loader too (``nn.llama.load_llama``; already in their import
    # closure, so the digests are the ones they were)
    {"importance": ("autocompress.compress.importance", "autocompress.compress.permute", "autocompress.nn.llama"),
     "teacher": ("autocompress.compress.teacher", "autocompress.nn.llama"),
     "search": ("autocompress.compress.search", "autocompress.compress.supernet"),
     "distill": ("autocompress.compress.distill", "autocompress.compress.extract")},
)
