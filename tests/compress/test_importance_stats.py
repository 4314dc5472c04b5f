"""Activation importance equals a reference computed with hooks on the transformers model; the file
it writes is what the feasibility stage reads."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import _tinykit as kit  # noqa: E402

from autocompress.feasibility.objective import SEGMENTS, load_importance
from autocompress.prune.importance import ablation_influence, collect_importance, cumulative_curve

LAYERS = 3


@pytest.fixture(scope="module")
def parent():
    model = kit.random_llama(LAYERS)
    cfg = kit.config_of(model)
    data = kit.batches(3, batch=2, seq=16)
    return model, cfg, data, collect_importance(kit.canonical_of(model), cfg, data)


def _reference(model, data):
    """The same statistics from forward hooks on transformers' modules (independent of our forward)."""
    L, H, hd = LAYERS, kit.HEADS, kit.HEAD_DIM
    ffn = [0.0] * L
    heads = [0.0] * L
    hidden = 0.0
    bi = torch.zeros(L, dtype=torch.float64)
    hooks, ntok = [], 0

    def cos_gap(a, b):
        return (1 - torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)).sum()

    for l, layer in enumerate(model.model.layers):
        def down_in(mod, args, l=l):
            ffn[l] = ffn[l] + args[0].abs().double().sum((0, 1))

        def o_in(mod, args, l=l):
            x = args[0]
            heads[l] = heads[l] + x.view(*x.shape[:2], H, hd).double().norm(dim=-1).sum((0, 1))

        def block(mod, args, kwargs, out, l=l):
            x = args[0] if args else kwargs["hidden_states"]
            y = out[0] if isinstance(out, tuple) else out
            bi[l] += cos_gap(x, y)

        hooks += [layer.mlp.down_proj.register_forward_pre_hook(down_in),
                  layer.self_attn.o_proj.register_forward_pre_hook(o_in),
                  layer.register_forward_hook(block, with_kwargs=True)]
    norms = [m for n, m in model.named_modules() if n.endswith("norm")]

    def norm_out(mod, args, out):
        nonlocal hidden
        hidden = hidden + out.abs().double().sum((0, 1))

    hooks += [m.register_forward_hook(norm_out) for m in norms]
    with torch.no_grad():
        for ids in data:
            model(ids)
            ntok += ids.numel()
    for h in hooks:
        h.remove()
    return ([f / ntok for f in ffn], [h / ntok for h in heads], hidden / ntok, bi / ntok, len(norms))


def test_statistics_equal_hook_reference(parent):
    model, cfg, data, st = parent
    ffn, heads, hidden, bi, n_norms = _reference(model, data)
    assert n_norms == 2 * LAYERS + 1 and st.tokens == 3 * 2 * 16
    for l in range(LAYERS):
        torch.testing.assert_close(st.ffn_channels[l], ffn[l].float(), rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(st.head_scores[l], heads[l].float(), rtol=1e-4, atol=1e-6)
        groups = heads[l].float().view(kit.KV, kit.HEADS // kit.KV).sum(-1)  # q head h is in group h // 2
        torch.testing.assert_close(st.kv_groups[l], groups, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(st.hidden_channels, hidden.float(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(st.layer_influence, bi.float(), rtol=1e-4, atol=1e-7)
    # sub-layer influences (1 - cos of a residual update): strictly between 0 and 1 for random weights
    assert ((st.attention_influence > 0) & (st.attention_influence < 1)).all()
    assert ((st.ffn_influence > 0) & (st.ffn_influence < 1)).all()


def test_cumulative_curve_values():
    c = cumulative_curve(torch.tensor([1.0, 3.0]), points=5)  # sorted 3, 1: shares 0, .75, 1 at 0, 1, 2 items
    assert c == pytest.approx([0.0, 0.375, 0.75, 0.875, 1.0])
    flat = cumulative_curve(torch.zeros(4))
    assert flat == pytest.approx([i / SEGMENTS for i in range(SEGMENTS + 1)])


def test_importance_file_loads_in_feasibility(parent, tmp_path):
    model, cfg, _, st = parent
    path = st.to_json(tmp_path / "importance.json")
    raw = json.loads(path.read_text())
    assert raw["version"] == 2 and raw["weights"] == "cosine" and len(raw["layers"]) == LAYERS
    imp = load_importance(str(path), cfg.arch)
    assert sum(imp.alpha) + sum(imp.beta) == pytest.approx(1.0)
    for curve in (*imp.kv_curves, *imp.ffn_curves, imp.hidden_curve):
        assert len(curve) == SEGMENTS + 1 and curve[0] == 0.0 and curve[-1] == 1.0
        steps = [b - a for a, b in zip(curve, curve[1:])]
        assert all(s >= -1e-12 for s in steps)  # non-decreasing
        assert all(b <= a + 1e-9 for a, b in zip(steps, steps[1:]))  # concave: sorted decreasing
    parent_arch = cfg.arch
    assert imp.score(parent_arch, parent_arch) == pytest.approx(1.0)


def _kl_with_zeroed(model, data, name: str) -> float:
    """KL(parent || parent with ``name``'s weight zeroed) per token, on transformers' model: zeroing a
    sub-block's output projection removes it exactly (its residual update becomes 0)."""
    import copy

    F = torch.nn.functional
    other = copy.deepcopy(model)
    dict(other.named_parameters())[name].data.zero_()
    total, ntok = 0.0, 0
    with torch.no_grad():
        for ids in data:
            lp, lq = F.log_softmax(model(ids).logits.float(), -1), F.log_softmax(other(ids).logits.float(), -1)
            total += float((lp.exp() * (lp - lq)).sum())
            ntok += ids.numel()
    return total / ntok


def test_removal_kl_equals_zeroed_projection_reference(parent, tmp_path):
    model, cfg, data, st = parent
    attn, ffn = ablation_influence(kit.canonical_of(model), cfg, data)
    for l in range(LAYERS):
        ref_a = _kl_with_zeroed(model, data, f"model.layers.{l}.self_attn.o_proj.weight")
        ref_f = _kl_with_zeroed(model, data, f"model.layers.{l}.mlp.down_proj.weight")
        assert ref_a > 0 and ref_f > 0
        assert float(attn[l]) == pytest.approx(ref_a, rel=1e-3, abs=1e-7)
        assert float(ffn[l]) == pytest.approx(ref_f, rel=1e-3, abs=1e-7)
    # the file then carries the removal KLs as the weights, the cosine influences beside them
    from dataclasses import replace

    raw = json.loads(replace(st, attention_removal=attn, ffn_removal=ffn).to_json(tmp_path / "i.json").read_text())
    assert raw["weights"] == "removal_kl"
    assert raw["layers"][1]["attention"] == pytest.approx(float(attn[1]))
    assert raw["layers"][1]["ffn_cos"] == pytest.approx(float(st.ffn_influence[1]))
