"""export_architecture picks Llama only where transformers' LlamaConfig accepts the shapes."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from autocompress.export.decilm import decilm_config_from_architecture, expected_shapes
from autocompress.export.writer import export_architecture
from autocompress.ir import MLP, Architecture, Attention, Block


def _arch(hidden: int) -> Architecture:
    blocks = tuple(Block(Attention(4, 2, 8), MLP(48)) for _ in range(2))
    return Architecture("llama", 64, hidden, 4, 8, False, blocks, max_position=64, name="t")


@pytest.mark.parametrize("hidden,model_type", [(32, "llama"), (30, "nemotron-nas")])
def test_homogeneous_model_format_follows_head_divisibility(tmp_path, hidden, model_type):
    arch = _arch(hidden)
    state = {k: torch.zeros(v) for k, v in expected_shapes(decilm_config_from_architecture(arch)).items()}
    out = export_architecture(tmp_path / "m", arch, state)
    assert json.loads((out / "config.json").read_text())["model_type"] == model_type
