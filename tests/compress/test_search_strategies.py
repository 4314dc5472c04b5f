"""The search strategies are registered objects behind one interface: every strategy a spec may
name has one, and nothing else is registered."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from autocompress.lang import model  # noqa: E402
from autocompress.search.context import ArchRecord, Finalist, SearchOutcome  # noqa: E402
from autocompress.search.strategy import STRATEGIES  # noqa: E402
from autocompress.ir import arch_to_dict  # noqa: E402
from autocompress.parents.hf_config import architecture_from_config  # noqa: E402


def test_the_registry_names_every_strategy_of_the_language():
    assert set(STRATEGIES) == set(model.STRATEGIES)
    assert all(callable(getattr(s, "choose", None)) for s in STRATEGIES.values())


def test_a_search_outcome_reads_back_as_the_json_it_wrote():
    """The stage's ``architecture.json`` round-trips: a cached search reads as it was written."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 128,
           "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 32, "max_position_embeddings": 512, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0}
    parent = architecture_from_config(cfg)
    narrower = parent.with_blocks(parent.blocks[:1] + tuple(b.__class__(None, b.ffn) for b in parent.blocks[1:]))
    start, chosen = ArchRecord.of(parent, 1.0), ArchRecord.of(narrower, 0.812345)
    out = SearchOutcome(start, None, ({"variant": "the parent's"},), chosen, "measured choice: x",
                        (Finalist("x", 0.123456, chosen), Finalist("cvxpy start", None, start)),
                        {"router": "v2"}, {"forwards": 3})
    doc = out.to_json()
    assert doc["architecture"] == {**arch_to_dict(narrower), "importance_kept": 0.8123}
    assert doc["finalists"][0] == {"name": "x", "kl": 0.1235, "architecture": doc["architecture"]}
    back = SearchOutcome.from_json(doc, parent)
    assert back.to_json() == doc and back.arch == narrower
