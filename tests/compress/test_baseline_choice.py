"""The uniform arm's measured choice (``search.baseline``) with a synthetic KL: the lowest KL
wins, not the prior's top; the token budget caps what is measured; every measured candidate is
listed; candidates the supernet cannot express are skipped."""

import pytest

from autocompress.search.baseline import SELECT_ROWS, budget_of, measured_uniform
from autocompress.ir import MLP, Architecture, Attention, Block


def _arch(layers, kv, width):
    full = Block(Attention(4, kv, 16), MLP(width))
    blocks = (full,) * layers + (Block(None, None),) * (4 - layers)
    return Architecture("llama", 320, 64, 4, 16, False, blocks, 256, "t")


FRONTIER = [(_arch(4, 1, 128), None, 0.9, 64), (_arch(3, 2, 128), None, 0.8, 64), (_arch(2, 4, 128), None, 0.7, 64),
            (_arch(4, 2, 64), None, 0.6, 64)]
KL = {0: 3.0, 1: 1.5, 2: 2.0, 3: 2.5}


def test_lowest_kl_wins_and_every_candidate_is_listed():
    got = measured_uniform(FRONTIER, lambda i: KL[i], lambda a: next(
        i for i, f in enumerate(FRONTIER) if f[0] is a), max_evals=900, search_tokens=128)
    arch, kl, entry, ranked = got.arch, got.kl, got.record, got.ranked
    assert arch is FRONTIER[1][0] and kl == 1.5
    # the finalists of the shortlist: every measured candidate with its architecture, least KL first
    assert [k for _, k, _ in ranked] == [1.5, 2.0, 2.5, 3.0] and [a for *_, a in ranked] == [FRONTIER[i][0] for i in (1, 2, 3, 0)]
    assert [c["kl"] for c in entry["candidates"]] == [3.0, 1.5, 2.0, 2.5]
    assert entry["candidates"][1]["name"] == "uniform: hidden 64, 3 layers, KV 2, FFN 128" and entry["candidates"][1]["layers"] == 3
    assert entry["forwards"] == 4 and entry["tokens"] == 4 * SELECT_ROWS * 128 and entry["budget_tokens"] == 900 * 128


def test_the_budget_caps_the_measured_candidates_and_unexpressible_ones_are_skipped():
    def to_state(a):
        i = next(i for i, f in enumerate(FRONTIER) if f[0] is a)
        if i == 0:
            raise ValueError("other global sizes")
        return i
    ticks = []
    got = measured_uniform(FRONTIER, lambda i: KL[i], to_state, max_evals=2 * SELECT_ROWS, search_tokens=1,
                           tick=lambda: ticks.append(1))
    entry, kl = got.record, got.kl
    assert entry["forwards"] == 2 and entry["skipped"] == 1 and kl == 1.5
    assert len(ticks) == 2 == budget_of(2 * SELECT_ROWS)  # the progress bar moves once per measured candidate
    with pytest.raises(ValueError):
        measured_uniform(FRONTIER[:1], lambda i: 0.0, to_state, 900, 1)


def test_a_depth_cut_that_removes_only_mlps_is_named_so():
    """Gemma 3 under vLLM keeps every attention: candidates that differ in removed MLPs only must not
    share one name (the build log listed five as "18 layers, KV 1, FFN 2048")."""
    attn_only = Block(Attention(4, 1, 16), None)
    full = Block(Attention(4, 1, 16), MLP(128))
    a = Architecture("llama", 320, 64, 4, 16, False, (full, full, attn_only, full), 256, "t")
    entry = measured_uniform([(a, None, 0.9, 64), (_arch(4, 1, 128), None, 0.8, 64)], lambda i: float(i),
                             lambda x: 0 if x is a else 1, max_evals=900, search_tokens=1).record
    names = [c["name"] for c in entry["candidates"]]
    assert names == ["uniform: hidden 64, 4 layers (3 with an FFN), KV 1, FFN 128",
                     "uniform: hidden 64, 4 layers, KV 1, FFN 128"]
