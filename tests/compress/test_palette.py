"""Width palettes (``search.palette``): the search pays for the distinct GEMM shapes it creates.

Synthetic tables: 8 FFN-only layers under a memory bound, each width option a memory cost, and a
profile charge per distinct shape. The free greedy spreads its widths (the KL of narrowing differs
by layer) and, once the exact count of its shapes is charged, is over the bound; a palette's
greedy prepays its shapes and stays within the bound under the exact count too.
"""

import itertools
import random

import numpy as np
import pytest

from autocompress.search.palette import kmeans_1d, make_palette, palette_start
from autocompress.search.refine import RefineConfig, Scored, choose, costs, greedy, of_states, refine, violation
from autocompress.search.tables import CostTables
from autocompress.plan.options import LayerOptions as Options

L, D = 8, 256
A0 = (0,) * L  # no attention options in these tables: every layer at option 0
WIDTHS = (0,) + tuple(range(64, 513, 64))  # option c: width 64 c
SENS = [3.0, 0.2, 1.5, 0.1, 0.8, 0.05, 2.0, 0.4]  # KL per narrowed grid step squared, by layer


def tables(shape_memory=0.012):
    opts = Options(attn=((),) * L, ffn=(WIDTHS,) * L, attn_removable=(False,) * L, ffn_removable=(True,) * L)
    ffn = np.zeros((1, L, len(WIDTHS)))
    ffn[0, :, :] = 0.02 * np.arange(len(WIDTHS))  # full model: 0.3 + 8 x 0.16 = 1.58 of the bound
    shapes = (((),) * L, tuple(tuple(frozenset() if w == 0 else frozenset({("up", 2 * w, D), ("down", D, w)})
                                     for w in WIDTHS) for _ in range(L)))
    return [CostTables(D, ("memory",), np.array([0.3]), np.zeros((1, L, 1)), ffn, np.zeros(1), opts,
                       shapes=shapes, fixed_shapes=frozenset({("lm_head", 1000, D)}), charged_shapes=3,
                       shape_memory=shape_memory)]


def kl(state):
    return sum(s * (8 - c) ** 2 * 0.01 for s, c in zip(SENS, state[2]))


def exact_memory(t, s):
    """What the exact model charges: the tables plus the state's own distinct shapes."""
    return float(costs([t], s)[0]) + (t.shape_count(s[1], s[2]) - t.charged_shapes) * t.shape_memory


def widths_of(s):
    return {WIDTHS[c] for c in s[2] if c}


def test_kmeans_1d_is_the_least_squares_partition():
    rng = random.Random(0)
    for _ in range(20):
        xs = [rng.choice(WIDTHS[1:]) for _ in range(rng.randrange(3, 9))]
        k = rng.randrange(1, 4)
        got = kmeans_1d(xs, k)
        sse = lambda cs: sum(min((x - c) ** 2 for c in cs) for x in xs)  # noqa: E731
        xs_sorted, m = sorted(xs), min(k, len(set(xs)))
        brute = min(sse([float(np.mean(xs_sorted[a:b])) for a, b in zip((0,) + cuts, cuts + (len(xs),))])
                    for cuts in itertools.combinations(range(1, len(xs)), m - 1))
        assert sse(got) == pytest.approx(brute)


def test_a_palette_prepays_every_shape_its_states_can_have():
    t = tables()[0]
    p = make_palette(t, {128, 384}, ())
    assert p.prepaid == 1 + 2 * 2  # the LM head, and up + down at each width
    for l in range(L):
        assert [WIDTHS[c] for c in p.ffn[l]] == [0, 128, 384]
    s = (0, A0, (2,) * L)  # only one of the two widths used: fewer shapes than prepaid
    assert t.shape_count(s[1], s[2]) == 3 < p.prepaid
    assert float(costs([t], s, p)[0]) == pytest.approx(exact_memory(t, s) + 2 * t.shape_memory)


def test_palette_start_snaps_to_the_nearest_width_and_skips_what_changes_nothing():
    t = tables()[0]
    s = (0, A0, (1, 2, 7, 8, 8, 0, 3, 8))
    p, start = palette_start(t, s, 2)
    assert p.widths == (128, 512)  # clusters {64, 128, 192} and {448, 512 x 3}: centres 128, 493 -> 512
    assert [WIDTHS[c] for c in start[2]] == [128, 128, 512, 512, 512, 0, 128, 512]  # nearest; removed stays
    assert palette_start(t, (0, A0, (4,) * L), 1) is None  # one width already


def test_the_free_greedy_is_over_once_its_shapes_are_counted_and_a_palette_is_not():
    t = tables()
    res = refine(t, {"parent": (0, A0, (8,) * L)}, of_states(kl), kl, RefineConfig(palette_sizes=(1, 2, 4)))
    by = {c.name: c.state for c in res.candidates}
    free = by["greedy (hidden 256)"]
    assert len(widths_of(free)) > 2 and exact_memory(t[0], free) > 1  # the tables alone call it feasible
    assert violation(costs(t, free)) == 0
    pal = {n: s for n, s in by.items() if n.startswith("palette")}
    assert {"palette 1 (hidden 256)", "palette 2 (hidden 256)"} <= set(pal)
    for name, s in pal.items():
        k = int(name.split()[1])
        assert len(widths_of(s)) <= k
        assert exact_memory(t[0], s) <= 1 + 1e-9  # prepaid >= the real count: feasible for the exact model
    without = refine(t, {"parent": (0, A0, (8,) * L)}, of_states(kl), kl, RefineConfig(palette_sizes=()))
    assert not any(c.name.startswith("palette") for c in without.candidates)
    assert res.evals > without.evals + len(pal)  # the palette greedies' forwards are counted
    # the final choice: the exact model rejects the free greedy (its shapes) and nothing repairs it
    # here, so the least KL among what passes is a palette; by KL alone the free greedy would win
    picked = choose(res.candidates, lambda c: (c.state, exact_memory(t[0], c.state) <= 1 + 1e-9), lambda a: None)
    assert picked.arch in pal.values() and picked.kl > by_kl(res)["greedy (hidden 256)"]


def by_kl(res):
    return {c.name: c.kl for c in res.candidates}


def test_choose_ranks_a_repaired_candidate_by_its_kl_as_repaired():
    cands = [Scored("free", "F", 0.3), Scored("palette", "P", 0.5)]
    check = lambda c: (c.state, c.state != "F")  # noqa: E731  (the free one is over a bound)
    repair = lambda a: ("F repaired", 4)  # noqa: E731
    got = choose(cands, check, repair, measure=lambda a: 0.9)
    assert got.arch == "P" and got.kl == 0.5 and "KL 0.300 -> 0.900" in got.repaired[0]
    assert choose(cands, check, repair, measure=lambda a: 0.4).arch == "F repaired"
    old_rule = choose(cands, check, repair)  # without a measure: the KL before the repair stands
    assert old_rule.arch == "F repaired" and old_rule.kl == 0.3
    assert choose(cands, lambda c: (c.state, False), lambda a: None) is None


def test_palette_greedy_moves_stay_inside_the_palette():
    t = tables()
    p = make_palette(t[0], {192, 448}, ())
    seen = []
    s, _ = greedy(t, 0, of_states(lambda st: seen.append(st) or kl(st)), RefineConfig(), start=(0, A0, (7,) * L),
                  palette=p)
    assert s is not None and violation(costs(t, s, p)) == 0
    assert all(widths_of(st) <= {192, 448} for st in seen)
    assert all(t[0].shape_count(st[1], st[2]) <= p.prepaid for st in seen)


def with_attention():
    """The same tables with attention: KV options 1-4 per layer (qkv shape per count), layer 0's
    attention not removable."""
    t = tables()[0]
    kv = (0, 1, 2, 3, 4)
    opts = Options(attn=(kv,) * L, ffn=t.options.ffn, attn_removable=(False,) + (True,) * (L - 1),
                   ffn_removable=t.options.ffn_removable)
    attn = np.zeros((1, L, len(kv)))
    attn[0, :, :] = 0.01 * np.arange(len(kv))
    shapes = (tuple(tuple(frozenset() if k == 0 else frozenset({("qkv", 64 * (4 + 2 * k), D), ("o", D, 256)})
                          for k in kv) for _ in range(L)), t.shapes[1])
    return [CostTables(D, ("memory",), np.array([0.2]), attn, t.ffn, np.zeros(1), opts, shapes=shapes,
                       fixed_shapes=t.fixed_shapes, charged_shapes=5, shape_memory=t.shape_memory)]


def test_palettes_keep_the_results_kv_counts_and_never_remove_what_must_stay():
    t = with_attention()
    sens_a = [0.5, 0.01, 0.3, 0.02, 0.2, 0.05, 0.4, 0.03]
    measure = lambda st: kl(st) + sum(a * (4 - c) ** 2 * 0.05 for a, c in zip(sens_a, st[1]))  # noqa: E731
    seen = []
    res = refine(t, {"parent": (0, (4,) * L, (8,) * L)}, of_states(lambda st: seen.append(st) or measure(st)),
                 measure)
    by = {c.name: c.state for c in res.candidates}
    free, pal = by["greedy (hidden 256)"], {n: s for n, s in by.items() if n.startswith("palette")}
    assert pal and len({c for c in free[1] if c}) >= 2  # the free result mixes KV counts
    kv_free = {c for c in free[1] if c}
    for s in pal.values():
        assert s[1][0] != 0  # layer 0's attention stays
        assert {c for c in s[1] if c} <= kv_free  # KV counts of the palette: the free result's
        assert exact_memory(t[0], s) <= 1 + 1e-9
    assert all(st[1][0] != 0 for st in seen)


def test_no_palettes_without_a_shape_price():
    res = refine(tables(shape_memory=0.0), {"parent": (0, A0, (8,) * L)}, of_states(kl), kl)
    assert not any(c.name.startswith("palette") for c in res.candidates)


def test_router_v2s_decode_gets_palettes_too():
    """The default seeds the greedy with router v2's decode: many widths, which the exact model
    charges; its palettes, refit within them, join the candidates beside the greedy's."""
    t = tables()
    decode = (0, A0, (1, 2, 7, 8, 8, 0, 3, 8))
    res = refine(t, {"router v2": decode}, of_states(kl), kl, RefineConfig(palette_sizes=(1, 2)),
                 palette_seeds=("router v2",))
    pal = {c.name: c.state for c in res.candidates if c.name.startswith("router v2 palette")}
    assert {"router v2 palette 1 (hidden 256)", "router v2 palette 2 (hidden 256)"} <= set(pal)
    for name, s in pal.items():
        assert len(widths_of(s)) <= int(name.split()[3])
        assert exact_memory(t[0], s) <= 1 + 1e-9
    plain = refine(t, {"router v2": decode}, of_states(kl), kl, RefineConfig(palette_sizes=(1, 2)))
    assert not any(c.name.startswith("router v2 palette") for c in plain.candidates)
