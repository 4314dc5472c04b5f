"""Fixtures for the export tests. Modules that need torch + transformers (the full environment,
scripts/install-full.sh) skip themselves with ``pytest.importorskip``; the rest run anywhere."""

from __future__ import annotations

import _exportkit as kit
import pytest


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    return kit.build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def hetero_checkpoint(tmp_path_factory, tokenizer_dir):
    """(folder, reference model) of the heterogeneous tiny DeciLM, exported once per session."""
    from autocompress.export.decilm import decilm_config_from_architecture
    from autocompress.export.writer import export_decilm

    cfg = decilm_config_from_architecture(kit.hetero_arch(vocab=512), **kit.GLOBALS)
    model = kit.random_decilm(cfg)
    out = export_decilm(tmp_path_factory.mktemp("ckpt") / "hetero", cfg, model.state_dict(), tokenizer_dir)
    return out, model
