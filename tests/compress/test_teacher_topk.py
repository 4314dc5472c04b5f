"""The top-k + tail KD loss against the exact full-logit KL."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from autocompress.data.teacher import full_kl, topk_kl, topk_of


def _pair(v=50, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 7, v, generator=g) * scale, torch.randn(2, 7, v, generator=g)


def test_exact_when_k_is_vocab():
    t, s = _pair()
    assert torch.allclose(topk_kl(s, topk_of(t, k=50)), full_kl(s, t), atol=1e-6, rtol=1e-6)
    assert topk_of(t, k=99).values.shape[-1] == 50  # k is capped at the vocabulary


def test_lower_bound_and_tight_when_topk_holds_the_mass():
    t, s = _pair(scale=1.0)
    exact = full_kl(s, t)
    prev = 0.0
    for k in (1, 4, 16, 49):
        approx = topk_kl(s, topk_of(t, k=k)).item()
        assert approx <= exact.item() + 1e-6  # coarse-graining never increases KL (data processing)
        assert approx >= prev - 1e-6  # a finer partition never decreases it
        prev = approx
    t, s = _pair(scale=6.0)  # a peaked teacher: its top 12 of 50 hold >= 98.9 % of the mass everywhere
    top = topk_of(t, k=12)
    mass = (top.values - top.lse.unsqueeze(-1)).exp().sum(-1)
    assert mass.min() > 0.985
    assert topk_kl(s, top).item() == pytest.approx(full_kl(s, t).item(), rel=0.005)


def test_zero_for_the_teacher_itself_and_finite_gradients():
    t, _ = _pair()
    s = t.clone().requires_grad_(True)
    loss = topk_kl(s, topk_of(t, k=5))
    assert abs(loss.item()) < 1e-6
    s2 = torch.randn_like(t).requires_grad_(True)
    topk_kl(s2, topk_of(t, k=5)).backward()
    assert torch.isfinite(s2.grad).all() and s2.grad.abs().sum() > 0


def test_mask_averages_selected_positions():
    t, s = _pair()
    top = topk_of(t, k=50)
    mask = torch.zeros(2, 7)
    mask[0, 3] = 1
    assert torch.allclose(topk_kl(s, top, mask), full_kl(s[0, 3], t[0, 3]), atol=1e-6)


def test_on_a_tiny_model():
    kit = pytest.importorskip("_distillkit")
    teacher, student = kit.tiny_llama(0), kit.tiny_llama(1)
    ids = kit.random_tokens(2, 16)[:, :-1]
    with torch.no_grad():
        tl, sl = teacher(ids).logits, student(ids).logits
    assert torch.allclose(topk_kl(sl, topk_of(tl, k=kit.VOCAB)), full_kl(sl, tl), atol=1e-6)
    assert topk_kl(sl, topk_of(tl, k=32)) <= full_kl(sl, tl) + 1e-6
