"""Permuting by importance keeps the parent's function; the masked forward's semantics per axis."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import _tinykit as kit  # noqa: E402

from autocompress.nn.hybrid import forward
from autocompress.plan.options import layer_options
from autocompress.plan.space import DEFAULT_AXES, SearchSpace
from autocompress.prune.importance import collect_importance
from autocompress.prune.permute import permute, pool_matrix
from autocompress.search.supernet import Choices, Supernet

SPACE = SearchSpace((64, 48, 32), 32, (1, 2), (), DEFAULT_AXES, True, 0.25, ())


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def parent(request):
    model = kit.random_llama(3, tie=request.param)
    cfg = kit.config_of(model)
    params = kit.canonical_of(model)
    stats = collect_importance(params, cfg, kit.batches(2))
    permuted, perm = permute(params, cfg, stats)
    return cfg, params, permuted, perm


def test_permutation_keeps_logits_and_sorts_importance(parent):
    cfg, params, permuted, perm = parent
    ids = kit.batches(1, seed=7)[0]
    with torch.no_grad():
        torch.testing.assert_close(forward(permuted, cfg, ids), forward(params, cfg, ids), atol=1e-5, rtol=1e-5)
    assert any(not torch.equal(perm[f"L{l}.ffn"], torch.arange(len(perm[f"L{l}.ffn"])))
               for l in range(cfg.num_layers))  # it did reorder something
    again = collect_importance(permuted, cfg, kit.batches(2))  # same data: now sorted in every axis
    for s in (again.hidden_channels, *again.ffn_channels, *again.kv_groups):
        assert (s[:-1] >= s[1:] - 1e-6).all()


def test_pool_matrix():
    torch.testing.assert_close(pool_matrix(4, 2, 1), torch.tensor([[0.5, 0.5]]))
    torch.testing.assert_close(pool_matrix(4, 2, 2), torch.eye(2))
    # 6 query heads, 3 -> 2 KV heads: new group 0 holds q heads 0,1,2 (parent groups 0,0,1)
    torch.testing.assert_close(pool_matrix(6, 3, 2), torch.tensor([[2, 1, 0], [0, 1, 2]]) / 3.0)
    with pytest.raises(ValueError):
        pool_matrix(6, 3, 4)


def test_options_follow_the_space(parent):
    cfg = parent[0]
    opts = layer_options(cfg.arch, SPACE)
    assert opts.attn == ((0, 1, 2),) * 3 and opts.ffn == ((0, 32, 64, 96, 128),) * 3
    narrow = SearchSpace((64,), 48, (1,), (), ("hidden", "kv_heads"), False, 0.25, ())
    opts = layer_options(cfg.arch, narrow)
    assert opts.attn == ((0, 1),) * 3 and opts.ffn == ((0, 128),) * 3  # no "ffn" axis: the parent's width


def test_full_choice_is_the_parent_and_architecture_round_trips(parent):
    cfg, params, permuted, _ = parent
    sn = Supernet(permuted, cfg, SPACE)
    ids = kit.batches(1, seed=3)[0]
    full = sn.one_hot(cfg.arch)
    assert full.hidden.tolist() == [1, 0, 0] and full.attn[:, -1].tolist() == [1, 1, 1]
    with torch.no_grad():
        torch.testing.assert_close(sn(ids, full), forward(params, cfg, ids), atol=1e-5, rtol=1e-5)
    arch = sn.architecture(2, (1, 0, 2), (0, 3, 1))
    assert sn.indices_of(arch) == (2, (1, 0, 2), (0, 3, 1))
    assert arch.hidden_size == 32 and arch.blocks[1].mixer is None and arch.blocks[0].ffn is None
    assert [b.attention.kv_heads for b in arch.blocks if b.attention] == [1, 2]


def _branch(sn, ids, choices, event, layer):
    """The residual update of one sub-block (after - before) seen through the forward's tap."""
    seen = {}

    def tap(ev, l, *t):
        if ev == event and l == layer:
            seen["d"] = t[1] - t[0]

    with torch.no_grad():
        forward(sn.params, sn.cfg, ids, sn.masks(choices), tap=tap)
    return seen.get("d")


@pytest.mark.parametrize("axis", ["ffn", "attn"])
def test_soft_choice_mixes_the_options_linearly(parent, axis):
    """Upstream of the last layer nothing changes, so its branch output under soft weights p equals
    sum_o p_o * (branch output of option o): FFN by linearity in the channel weights, attention by the
    mixing of head outputs before o_proj."""
    cfg, _, permuted, _ = parent
    sn = Supernet(permuted, cfg, SPACE)
    ids = kit.batches(1, seed=4)[0]
    base = sn.one_hot(cfg.arch)
    last, n = cfg.num_layers - 1, len(getattr(sn.options, axis)[-1])
    p = torch.softmax(torch.randn(n, generator=torch.Generator().manual_seed(0)), 0)

    def with_row(row):
        tab = getattr(base, axis).clone()
        tab[last, :n] = row
        return Choices(base.hidden, *((tab, base.ffn) if axis == "attn" else (base.attn, tab)))

    mixed = _branch(sn, ids, with_row(p), axis, last)
    expect = sum(p[o] * (_branch(sn, ids, with_row(torch.eye(n)[o]), axis, last)
                         if o else torch.zeros_like(mixed)) for o in range(n))
    torch.testing.assert_close(mixed, expect, atol=1e-5, rtol=1e-5)


def test_removed_sub_blocks_pass_the_residual(parent):
    cfg, _, permuted, _ = parent
    sn = Supernet(permuted, cfg, SPACE)
    ch = sn.one_hot((0, (2, 0, 2), (4, 0, 4)))  # layer 1 is an identity
    seen = {}

    def tap(ev, l, *t):
        if ev == "block" and l == 1:
            seen["same"] = torch.equal(t[0], t[1])

    with torch.no_grad():
        forward(sn.params, cfg, kit.batches(1)[0], sn.masks(ch), tap=tap)
    assert seen["same"]


def test_hard_hidden_mask_zeroes_pruned_channels(parent):
    cfg, _, permuted, _ = parent
    sn = Supernet(permuted, cfg, SPACE)
    ch = sn.one_hot(sn.architecture(1, (2, 2, 2), (4, 4, 4)))
    with torch.no_grad():
        h = sn(kit.batches(1)[0], ch, return_hidden=True)
    assert h[..., 48:].abs().max() == 0 and h[..., :48].abs().min() > 0


def test_gradients_reach_every_choice_straight_through(parent):
    """One-hot forward, soft backward (the search's Gumbel straight-through): zero-valued options get
    gradients too, because their outputs are computed when the weights require grad."""
    cfg, _, permuted, _ = parent
    sn = Supernet(permuted, cfg, SPACE)
    g = torch.Generator().manual_seed(0)
    logits = [torch.randn(3, generator=g), torch.randn(3, 3, generator=g), torch.randn(3, 5, generator=g)]
    for t in logits:
        t.requires_grad_(True)

    def st(x):
        y = torch.softmax(x, -1)
        return torch.zeros_like(y).scatter_(-1, y.argmax(-1, keepdim=True), 1.0) - y.detach() + y

    out = sn(kit.batches(1)[0], Choices(*(st(t) for t in logits)))
    out.logsumexp(-1).mean().backward()
    for t in logits:
        assert torch.isfinite(t.grad).all() and (t.grad.abs().sum(-1) > 0).all()
    assert not any(p.grad is not None for p in sn.params.values())


def test_choices_are_checked(parent):
    cfg, _, permuted, _ = parent
    sn = Supernet(permuted, cfg, SPACE)
    ch = sn.one_hot(cfg.arch)
    padded = Choices(ch.hidden, torch.cat([ch.attn, torch.zeros(3, 2)], 1), ch.ffn)  # wider is fine if zero
    with torch.no_grad():
        sn(kit.batches(1, seq=4)[0], padded)
    bad = padded.attn.clone()
    bad[0, 4] = 0.5
    with pytest.raises(ValueError, match="padding"):
        sn.masks(Choices(ch.hidden, bad, ch.ffn))
    with pytest.raises(ValueError, match="shapes"):
        sn.masks(Choices(ch.hidden[:2], ch.attn, ch.ffn))


def test_sliced_ffn_and_resumed_forward_equal_the_masked_forward(parent):
    """The measured search's two shortcuts change the cost, never the logits: a hard FFN choice
    runs the sliced FFN (removed: skipped), and a forward resumed at layer l from the residual
    entering it equals the whole forward."""
    cfg, params, permuted, perm = parent
    sn = Supernet(permuted, cfg, SPACE)
    ids = kit.batches(1, seed=3)[0]
    h, ca, cf = sn.indices_of(sn.architecture(1, [1, 0, 2], [1, 0, 2]))
    choices = sn.one_hot((h, ca, cf))
    soft = Choices(choices.hidden, choices.attn, choices.ffn.clone().requires_grad_(True))
    want = sn.forward(ids, soft).detach()  # with grad on: the masked full-width FFN, no slicing
    with torch.no_grad():
        xs = {}
        got = sn.forward(ids, choices, tap=lambda ev, l, *t: xs.__setitem__(l, t[0]) if ev == "block" else None)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        for l in range(cfg.num_layers):
            torch.testing.assert_close(sn.forward(ids, choices, start=(l, xs[l])), want, atol=1e-5, rtol=1e-5)
