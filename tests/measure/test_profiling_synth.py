"""Synthetic profiling architectures: reproducible, legal for vLLM, varied like search results."""

from __future__ import annotations

from autocompress.parents.resolve import resolve_parent
from autocompress.calibrate.synth import arch_key, variants
from autocompress.lang.model import ParentRef


def _parent():
    return resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture


def test_variants_are_reproducible_and_start_with_the_parent():
    a, b = variants(_parent(), 12, seed=3), variants(_parent(), 12, seed=3)
    assert [arch_key(x) for x in a] == [arch_key(x) for x in b]
    assert a[0].hidden_size == _parent().hidden_size and a[0].blocks == _parent().blocks
    assert len({arch_key(x) for x in a}) == 12  # all different


def test_variants_cover_the_search_space_and_stay_servable():
    vs = variants(_parent(), 24)
    assert all(v.blocks[0].attention is not None for v in vs)  # vLLM's DeciLM loader needs layer 0 attention
    assert all(b.attention is not None or b.ffn is not None for v in vs for b in v.blocks)
    assert len({v.hidden_size for v in vs}) >= 3
    assert len({v.num_layers for v in vs}) >= 2
    assert any(b.attention is None for v in vs for b in v.blocks)
    assert any(b.ffn is None for v in vs for b in v.blocks)
    assert any(not v.is_homogeneous() for v in vs) and sum(v.is_homogeneous() for v in vs) >= 2
