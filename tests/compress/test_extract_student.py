"""The extracted student's logits equal the masked supernet's at the decoded architecture."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import _tinykit as kit  # noqa: E402

from autocompress.export.decilm import decilm_config_from_architecture, expected_shapes
from autocompress.export.writer import export_decilm
from autocompress.families.llama.load import llama_globals
from autocompress.families.llama.student import llama_state
from autocompress.ir import MLP, Block
from autocompress.plan.space import DEFAULT_AXES, SearchSpace
from autocompress.prune import extract as canonical
from autocompress.prune.importance import collect_importance
from autocompress.prune.permute import permute
from autocompress.search.supernet import Supernet

SPACE = SearchSpace((64, 48, 32), 32, (1, 2), (), DEFAULT_AXES, True, 0.25, ())
# 4 layers: kv 1 / removed / 2 / 1; FFN 64 / 128 / removed / 96; hidden 48
HETERO = (1, (1, 0, 2, 1), (2, 4, 0, 3))


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def supernet(request):
    model = kit.random_llama(4, tie=request.param)
    cfg = kit.config_of(model)
    params = kit.canonical_of(model)
    permuted, _ = permute(params, cfg, collect_importance(params, cfg, kit.batches(2)))
    return Supernet(permuted, cfg, SPACE)


def extract(permuted, cfg, arch):
    """The canonical extraction under the Llama names, with the DeciLM export's globals."""
    sd, extras = canonical.extract(permuted, cfg, arch)
    return llama_state(sd, arch), llama_globals(extras["cfg"])


def _decilm(arch, sd, g):
    from autocompress.modeling.configuration_decilm import DeciLMConfig
    from autocompress.modeling.modeling_decilm import DeciLMForCausalLM

    cfg = decilm_config_from_architecture(arch, **g)
    model = DeciLMForCausalLM(DeciLMConfig(**cfg)).eval()
    model.load_state_dict(sd, strict=not arch.tie_embeddings)
    return cfg, model


@pytest.mark.parametrize("indices", [HETERO, (2, (2, 1, 0, 2), (1, 0, 4, 2)), (0, (2, 2, 2, 2), (4, 4, 4, 4))],
                         ids=["hetero-48", "hetero-32", "parent"])
def test_extracted_student_equals_hard_supernet(supernet, indices):
    arch = supernet.architecture(*indices)
    sd, g = extract(supernet.params, supernet.cfg, arch)
    cfg, student = _decilm(arch, sd, g)
    assert {k: tuple(v.shape) for k, v in sd.items() if k != "lm_head.weight" or not arch.tie_embeddings} \
        == expected_shapes(cfg)
    ids = kit.batches(1, batch=2, seq=24, seed=9)[0]
    with torch.no_grad():
        want = supernet(ids, supernet.one_hot(arch))
        got = student(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_exported_student_loads_with_remote_code(supernet, tmp_path):
    from transformers import AutoModelForCausalLM

    arch = supernet.architecture(*HETERO)
    sd, g = extract(supernet.params, supernet.cfg, arch)
    out = export_decilm(tmp_path / "student", arch, sd, **g)
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True, dtype=torch.float32).eval()
    assert model.config.head_dim == kit.HEAD_DIM and model.config.hidden_size == 48  # 48 / 4 heads would be 12
    ids = kit.batches(1, batch=1, seq=16, seed=2)[0]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, supernet(ids, supernet.one_hot(arch)), atol=1e-5, rtol=1e-5)


def test_extract_slices_the_parents_weights(supernet):
    """Prefix slices of the permuted parent; K/V of a 1-KV-head layer are the mean of the two groups."""
    arch = supernet.architecture(*HETERO)
    sd, _ = extract(supernet.params, supernet.cfg, arch)
    P = llama_state(supernet.params, supernet.cfg.arch)
    down = "model.layers.0.mlp.down_proj.weight"
    torch.testing.assert_close(sd[down], P[down][:48, :64])
    k = P["model.layers.0.self_attn.k_proj.weight"].view(2, kit.HEAD_DIM, -1).mean(0)[:, :48]
    torch.testing.assert_close(sd["model.layers.0.self_attn.k_proj.weight"], k)
    assert "model.layers.1.self_attn.q_proj.weight" not in sd and "model.layers.2.mlp.up_proj.weight" not in sd
    assert sd["model.layers.2.self_attn.k_proj.weight"].shape == (2 * kit.HEAD_DIM, 48)


def test_extract_refuses_what_the_parent_cannot_give(supernet):
    arch = supernet.architecture(*HETERO)
    too_wide = arch.with_blocks(arch.blocks[:3] + (Block(arch.blocks[3].mixer, MLP(256)),))
    with pytest.raises(ValueError, match="width 256"):
        extract(supernet.params, supernet.cfg, too_wide)
    with pytest.raises(ValueError, match="hidden size"):
        extract(supernet.params, supernet.cfg, arch.with_blocks(arch.blocks, hidden_size=96))
