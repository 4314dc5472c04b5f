"""Quality of a student against its parent on held-out tokens: pure functions over callables.

A model is any callable ``input_ids [b, T] -> logits [b, T, V]`` (or a transformers model). Over packed
rows ``[n, T + 1]`` (inputs ``row[:-1]``, targets ``row[1:]``), every position counts once:

* perplexity      exp(mean over positions of -log q(target))
* KL              mean over positions of KL(p_parent || q_student), full rows (exact, not top-k)
* top-1 agreement fraction of positions where argmax q == argmax p

The build and the benchmark report them separately for code and for prose (``quality_by_kind``), and a
code-quality proxy from HumanEval (``humaneval_logprob``): the mean log-probability per token of each
problem's reference solution given its prompt, pooled over all solution tokens (so long solutions weigh
more, as in a perplexity). Prompt and solution are tokenized apart and concatenated, so the solution's
tokens do not depend on how a BPE merge would fall across the boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from autocompress.data.teacher import TeacherCache, logits_of, topk_kl


@dataclass(frozen=True)
class QualityStats:
    tokens: int  # predicted positions
    nll: float  # mean negative log-likelihood (nats / token)
    kl: float | None = None  # mean KL(parent || model), when a parent was given
    top1: float | None = None  # top-1 agreement with the parent

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)


@dataclass(frozen=True)
class HumanEvalScore:
    problems: int
    tokens: int  # solution tokens scored
    mean_logprob: float  # pooled: sum of log-probs / tokens
    mean_logprob_per_problem: float  # each problem's per-token mean, averaged


@torch.no_grad()
def evaluate_tokens(
    model: Callable,
    tokens: torch.Tensor,
    parent: Callable | None = None,
    batch: int = 4,
    parent_topk: TeacherCache | None = None,
    on_batch: Callable[[], None] | None = None,
) -> QualityStats:
    """Perplexity of ``model`` on packed rows; with ``parent``, also KL(parent || model) and top-1 agreement.

    ``parent_topk`` instead of ``parent``: the parent's cached top-k outputs for these rows
    (``teacher.cache_teacher``), so that many students are compared without re-running the parent; KL is
    then the top-k + tail approximation (a lower bound, see ``teacher.topk_kl``), top-1 is exact.
    """
    assert parent is None or parent_topk is None, "give parent or parent_topk, not both"
    nll = kl = agree = 0.0
    count = 0
    for s in range(0, tokens.shape[0], batch):
        rows = tokens[s : s + batch].long()
        ids, targets = rows[:, :-1], rows[:, 1:]
        logits = logits_of(model, ids).float()
        logq = torch.log_softmax(logits, dim=-1)
        nll -= logq.gather(-1, targets.unsqueeze(-1)).sum().item()
        count += targets.numel()
        if parent is not None:
            logp = torch.log_softmax(logits_of(parent, ids).float(), dim=-1)
            kl += (logp.exp() * (logp - logq)).sum().item()
            agree += (logp.argmax(-1) == logq.argmax(-1)).sum().item()
        elif parent_topk is not None:
            top = parent_topk.get(list(range(s, s + rows.shape[0])))
            kl += topk_kl(logits, top).item() * targets.numel()
            agree += (top.indices[..., 0] == logq.argmax(-1)).sum().item()
        if on_batch:
            on_batch()
    if count == 0:
        raise ValueError("evaluate_tokens: no tokens to evaluate")
    if parent is None and parent_topk is None:
        return QualityStats(count, nll / count)
    return QualityStats(count, nll / count, kl / count, agree / count)


def quality_by_kind(
    model: Callable,
    datasets: Mapping[str, torch.Tensor],
    parent: Callable | None = None,
    batch: int = 4,
    parent_topk: Mapping[str, TeacherCache] | None = None,
    on_batch: Callable[[], None] | None = None,
) -> dict[str, QualityStats]:
    """``evaluate_tokens`` per named dataset (e.g. {"code": ..., "prose": ...}), in the mapping's order."""
    return {
        name: evaluate_tokens(model, rows, parent, batch, parent_topk[name] if parent_topk else None, on_batch)
        for name, rows in datasets.items()
    }


@torch.no_grad()
def humaneval_logprob(
    model: Callable,
    encode: Callable[[str], Sequence[int]],
    problems: Sequence,
    max_len: int = 1024,
    on_problem: Callable[[], None] | None = None,
) -> HumanEvalScore:
    """Mean log-prob per token of each ``problem.solution`` given ``problem.prompt`` (see module docstring).

    ``encode``: text -> token ids without special tokens. A pair longer than ``max_len`` loses the start
    of its prompt (the solution is always scored whole; a solution alone over ``max_len`` is an error).
    """
    total, tokens, per_problem = 0.0, 0, []
    for p in problems:
        prompt, solution = list(encode(p.prompt)), list(encode(p.solution))
        if not solution:
            continue
        if len(solution) >= max_len:
            raise ValueError(f"{p.task_id}: solution of {len(solution)} tokens, allowed < max_len {max_len}")
        ids = (prompt + solution)[-max_len:]
        n_prompt = len(ids) - len(solution)
        if n_prompt == 0:  # nothing to condition the first solution token on
            raise ValueError(f"{p.task_id}: empty prompt")
        x = torch.tensor([ids])
        logq = torch.log_softmax(logits_of(model, x[:, :-1]).float(), dim=-1)[0]
        # position t predicts token t+1: solution tokens ids[n_prompt:] are predicted at n_prompt-1 ...
        lp = logq[n_prompt - 1 :].gather(-1, x[0, n_prompt:].unsqueeze(-1)).squeeze(-1)
        total += lp.sum().item()
        tokens += lp.numel()
        per_problem.append(lp.mean().item())
        if on_problem:
            on_problem()
    if not per_problem:
        raise ValueError("humaneval_logprob: no problem to score")
    return HumanEvalScore(len(per_problem), tokens, total / tokens, sum(per_problem) / len(per_problem))


__all__ = ["HumanEvalScore", "QualityStats", "evaluate_tokens", "humaneval_logprob", "quality_by_kind"]
