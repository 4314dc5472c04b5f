"""Measured refinement (``autocompress.search.refine``) on synthetic cost tables and a synthetic KL.

The KL here is not additive: removing two neighbouring attention blocks costs far more than the
two single removals. The additive objective the cvxpy start and the router use would pick that
pair; the measured greedy, which re-measures after each removal, must not.
"""

import numpy as np

from autocompress.search.tables import CostTables
from autocompress.plan.options import LayerOptions as Options
from autocompress.search.refine import RefineConfig, costs, greedy, of_states, refine, violation

L = 6
SINGLE = [9.0, 0.1, 0.1, 0.3, 0.35, 0.4]  # KL of removing layer l's attention alone


def tables(per_layer=0.2, base=0.2):
    opts = Options(attn=((0, 1),) * L, ffn=((),) * L, attn_removable=(False,) + (True,) * (L - 1),
                   ffn_removable=(False,) * L)
    attn = np.zeros((1, L, 2))
    attn[0, :, 1] = per_layer  # full model: 0.2 + 6 * 0.2 = 1.4 -> two removals are needed
    return [CostTables(576, ("w.tpot",), np.array([base]), attn, np.zeros((1, L, 1)), np.zeros(1), opts)]


def kl(state):
    removed = [l for l, c in enumerate(state[1]) if c == 0]
    value = sum(SINGLE[l] for l in removed)
    if 1 in removed and 2 in removed:  # the interaction the additive model cannot see
        value += 5.0
    return value


def test_greedy_reaches_the_bound_and_sees_the_interaction():
    t = tables()
    calls = []
    s, evals = greedy(t, 0, of_states(lambda st: calls.append(st) or kl(st)), RefineConfig())
    assert s is not None and violation(costs(t, s)) == 0
    removed = {l for l, c in enumerate(s[1]) if c == 0}
    assert removed == {1, 3}  # additive would remove {1, 2}: KL 5.2 instead of 0.4
    assert 0 not in removed  # layer 0's attention is not removable
    assert evals == len(calls)


def test_greedy_stops_within_its_budget():
    s, evals = greedy(tables(), 0, of_states(kl), RefineConfig(max_evals=3))
    assert s is None and evals <= 3
    # a budget that runs out inside a round (after its new moves, before a pick) also stops
    s, evals = greedy(tables(), 0, of_states(kl), RefineConfig(max_evals=6))
    assert s is None and evals == 6


def test_greedy_fills_the_slack_a_coarse_round_leaves():
    # one FFN of 8 grid steps at 0.05 each: full = 1.1; the greedy's 4-step move lands at 0.9, and
    # the fill takes single steps back while they fit (0.95, then 1.0 exactly on the bound)
    opts = Options(attn=((),), ffn=((0,) + tuple(range(64, 513, 64)),), attn_removable=(False,), ffn_removable=(True,))
    ffn = np.zeros((1, 1, 9))
    ffn[0, 0, 1:] = 0.05 * np.arange(1, 9)
    t = [CostTables(576, ("w.tpot",), np.array([0.7]), np.zeros((1, 1, 1)), ffn, np.zeros(1), opts)]
    s, _ = greedy(t, 0, of_states(lambda st: (8 - st[2][0]) * 0.1), RefineConfig())
    assert s[2] == (6,) and abs(float(costs(t, s)[0]) - 1.0) < 1e-9


def test_refine_keeps_the_lowest_kl_on_the_selection_rows_and_measures_each_state_once():
    t = tables()
    additive = (0, (1, 0, 0, 1, 1, 1), (0,) * L)
    seen = []
    res = refine(t, {"router": additive, "cvxpy start": additive}, of_states(kl), lambda st: seen.append(st) or kl(st))
    names = [c.name for c in res.candidates]
    assert names[:2] == ["router", "cvxpy start"] and any(n.startswith("greedy") for n in names)
    assert res.best.name.startswith("greedy") and res.best.kl == min(c.kl for c in res.candidates)
    assert len(seen) == len(set(seen)) == 2  # the duplicate seed is not measured twice


def test_lazy_rounds_measure_new_moves_and_re_measure_only_until_the_best_is_fresh():
    t = tables()
    per_round, calls = [], []

    def measure(st):
        calls.append(st)
        return kl(st)

    s, _ = greedy(t, 0, of_states(measure), RefineConfig(), lambda msg: per_round.append(len(calls)))
    # round 1: the full model, 5 new removals, the new state. Round 2: no new move (a removal is a
    # sub-block's last step); layer 2's estimate (0.1) is re-measured (now 5.1), then layer 3's
    # (0.3, still 0.3) is fresh and best: picked. 2 re-measures + the new state.
    assert per_round[0] == 1 + 5 + 1
    assert per_round[1] - per_round[0] == 2 + 1
    assert {l for l, c in enumerate(s[1]) if c == 0} == {1, 3}


def test_round_estimate_follows_the_observed_share():
    from autocompress.search.refine import rounds_left

    cfg = RefineConfig()
    assert rounds_left(0.0, cfg) == cfg.fill_rounds
    # share 0.5, floor 0.03: 1.0 -> 0.5 -> 0.25 -> 0.125 -> 0.0625 -> 0.03125 -> 0.00125 -> done (7 rounds)
    assert rounds_left(1.0, cfg) == 7 + cfg.fill_rounds
    assert rounds_left(1.0, cfg, share=0.25) > rounds_left(1.0, cfg)  # capped rounds: more of them
    assert rounds_left(1.0, cfg, share=0.9) == rounds_left(1.0, cfg)  # never faster than the schedule
