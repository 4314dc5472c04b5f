"""Width palettes (``compress.palette``): the search pays for the distinct GEMM shapes it creates.

Synthetic tables: 8 FFN-only layers under a memory bound, each width option a memory cost, and a
profile charge per distinct shape. The free greedy spreads its widths (the KL of narrowing differs
by layer) and, once the exact count of its shapes is charged, is over the bound; a palette's
greedy prepays its shapes and stays within the bound under the exact count too.
"""

import itertools
import random

import numpy as np
import pytest

from autocompress.compress.palette import kmeans_1d, make_palette, palette_start
from autocompress.compress.refine import RefineConfig, costs, greedy, of_states, refine, violation
from autocompress.compress.tables import CostTables
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
    assert len(p.widths) == 2 and widths_of(start) <= set(p.widths)
    assert start[2][5] == 0  # a removed FFN stays removed
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
    assert res.evals > len(by)  # the palette greedies' forwards are counted


def test_palette_greedy_moves_stay_inside_the_palette():
    t = tables()
    p = make_palette(t[0], {192, 448}, ())
    seen = []
    s, _ = greedy(t, 0, of_states(lambda st: seen.append(st) or kl(st)), RefineConfig(), start=(0, A0, (7,) * L),
                  palette=p)
    assert s is not None and violation(costs(t, s, p)) == 0
    assert all(widths_of(st) <= {192, 448} for st in seen)


def test_no_palettes_without_a_shape_price():
    res = refine(tables(shape_memory=0.0), {"parent": (0, A0, (8,) * L)}, of_states(kl), kl)
    assert not any(c.name.startswith("palette") for c in res.candidates)
