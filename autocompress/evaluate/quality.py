"""Quality of a student against its parent on held-out tokens: pure functions over callables.

A model is any callable ``input_ids [b, T] -> logits [b, T, V]`` (or a transformers model). Over packed
rows ``[n, T + 1]`` (inputs ``row[:-1]``, targets ``row[1:]``), every position counts once:

* perplexity      exp(mean over positions of -log q(target))
* KL              mean over positions of KL(p_parent || q_student), full rows (exact, not top-k)
* top-1 agreement fraction of positions where argmax q == argmax p

Each comes with its standard error over rows: a row is the unit (its positions are one stretch of
text, correlated), every row has the same number of positions, so the mean over positions is the mean
of the row means and its SE is their sample SD / sqrt(rows), as lm-eval's ``mean_stderr`` over
documents; perplexity's is exp(nll) * SE(nll) (delta method).

The build and the benchmark report them per held-out set (``quality_by_kind``: code and prose, in and
out of the distillation's domain), and a
code-quality proxy from HumanEval (``humaneval_logprob``): the mean log-probability per token of each
problem's reference solution given its prompt, pooled over all solution tokens (so long solutions weigh
more, as in a perplexity). Prompt and solution are tokenized apart and concatenated, so the solution's
tokens do not depend on how a BPE merge would fall across the boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import torch

from autocompress.data.teacher import TeacherCache, TopK, logits_of, topk_kl


@dataclass(frozen=True)
class QualityStats:
    tokens: int  # predicted positions
    nll: float  # mean negative log-likelihood (nats / token)
    kl: float | None = None  # mean KL(parent || model), when a parent was given
    top1: float | None = None  # top-1 agreement with the parent
    rows: int = 0  # the rows the SEs are over
    nll_se: float | None = None  # standard errors over rows (module docstring); None with one row
    kl_se: float | None = None
    top1_se: float | None = None

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)

    @property
    def ppl_se(self) -> float | None:
        return None if self.nll_se is None else self.ppl * self.nll_se


def row_se(values: Sequence[float]) -> float | None:
    """The standard error of the mean of per-row values: sample SD / sqrt(n); None below two rows."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


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
    nll: list[float] = []  # per row: means over its positions
    kl: list[float] = []
    agree: list[float] = []
    for s in range(0, tokens.shape[0], batch):
        rows = tokens[s : s + batch].long()
        ids, targets = rows[:, :-1], rows[:, 1:]
        logits = logits_of(model, ids).float()
        logq = torch.log_softmax(logits, dim=-1)
        nll += (-logq.gather(-1, targets.unsqueeze(-1)).squeeze(-1).mean(-1)).tolist()
        if parent is not None:
            logp = torch.log_softmax(logits_of(parent, ids).float(), dim=-1)
            kl += (logp.exp() * (logp - logq)).sum(-1).mean(-1).tolist()
            agree += (logp.argmax(-1) == logq.argmax(-1)).float().mean(-1).tolist()
        elif parent_topk is not None:
            top = parent_topk.get(list(range(s, s + rows.shape[0])))
            kl += [topk_kl(logits[i], TopK(top.values[i], top.indices[i], top.lse[i])).item()
                   for i in range(rows.shape[0])]
            agree += (top.indices[..., 0] == logq.argmax(-1)).float().mean(-1).tolist()
        if on_batch:
            on_batch()
    if not nll or tokens.shape[1] < 2:
        raise ValueError("evaluate_tokens: no tokens to evaluate")
    n, count = len(nll), len(nll) * (tokens.shape[1] - 1)
    base = QualityStats(count, sum(nll) / n, rows=n, nll_se=row_se(nll))
    if parent is None and parent_topk is None:
        return base
    return replace(base, kl=sum(kl) / n, top1=sum(agree) / n, kl_se=row_se(kl), top1_se=row_se(agree))


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


__all__ = ["HumanEvalScore", "QualityStats", "evaluate_tokens", "humaneval_logprob", "quality_by_kind", "row_se"]
