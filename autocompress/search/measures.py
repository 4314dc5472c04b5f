"""The two KL-to-the-parent measures every strategy searches with, on disjoint training rows
(top-k teacher outputs from the cache):

    search_kl   ``refine.Measure`` for the greedy, on the last search batch of rows: it measures
                many one-move variants of one state, so the residual stream entering each layer
                is kept for the last state seen and a variant's forward resumes at its move's layer
    select_kl   a function of states that judges candidates, on the 4 search batches before those
                (``baseline.SELECT_ROWS``): rows the greedy never saw, each state measured once

The selection rows are what every strategy's final choice reads (the prior, the seeds, the
uniform frontier and the final check ask for the same points), so the measured choices of
different strategies are comparable.
"""

from __future__ import annotations

from typing import Callable

import torch

from autocompress.build.settings import BuildSettings
from autocompress.data.teacher import topk_kl
from autocompress.search.baseline import SELECT_ROWS
from autocompress.search.refine import Measure, State, apply


def kl_measures(net, teacher, train_rows, settings: BuildSettings) -> tuple[Measure, Callable[[State], float]]:
    """(search_kl, select_kl) of the supernet ``net`` (module docstring)."""
    T, b, n = settings.search_seq, settings.search_batch, len(train_rows)

    def rows_of(rows):
        rows = [r % n for r in rows]
        t = teacher.get(rows)
        return train_rows[rows][:, :T], type(t)(t.values[:, :T], t.indices[:, :T], t.lse[:, :T])

    ids, target = rows_of(range(n - b, n))
    kept: dict = {}

    def search_kl(state, move=None) -> float:
        with torch.no_grad():
            if kept.get("state") != state:
                xs = {}
                tap = lambda ev, l, *t: xs.__setitem__(l, t[0]) if ev == "block" else None  # noqa: E731
                logits = net.forward(ids, net.one_hot(state), tap=tap)
                kept.update(state=state, xs=xs, kl=float(topk_kl(logits, target)))
            if move is None:
                return kept["kl"]
            l = move[1]
            logits = net.forward(ids, net.one_hot(apply(state, [move])), start=(l, kept["xs"][l]))
            return float(topk_kl(logits, target))

    sel_ids, sel_target = rows_of(range(n - (SELECT_ROWS + 1) * b, n - b))
    judged: dict = {}  # a state's KL on the selection rows, measured once

    def select_kl(state) -> float:
        if state not in judged:
            with torch.no_grad():
                judged[state] = float(topk_kl(net.forward(sel_ids, net.one_hot(state)), sel_target))
        return judged[state]
    return search_kl, select_kl


__all__ = ["kl_measures"]
