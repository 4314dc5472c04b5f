"""Tiny models for the accuracy tests: a random Llama folder (with the offline tokenizer) and a
DeciLM with no-attention layers (the exported students' class)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def kit(name: str, folder: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TESTS / folder / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def llama_folder(out: Path, seed: int = 0) -> Path:
    tiny = kit("_tinykit", "compress")
    return tiny.save_parent(tiny.random_llama(layers=2, seed=seed), out, tokenizer=True)


def hetero_decilm(vocab: int):
    ek = kit("_exportkit", "export")
    from autocompress.export.decilm import decilm_config_from_architecture

    return ek.random_decilm(decilm_config_from_architecture(ek.hetero_arch(vocab), **ek.GLOBALS))
