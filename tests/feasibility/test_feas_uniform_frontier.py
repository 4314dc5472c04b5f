"""The uniform arm's candidates (``uniform_frontier``): every one meets the contract by the exact
model, one per (hidden, depth, KV heads) cell at its widest passing FFN, and they span depth and
KV heads; the prior's single pick (``uniform_search``) is among them."""

from __future__ import annotations

from _feaskit import MiB, serve, setup, spec_for, tiny_arch

import pytest

from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.metrics import Relaxation
from autocompress.feasibility.uniform import uniform_frontier, uniform_search


def _relaxes(s):
    return {d: Relaxation(s.arch, d, s.spec, s.profile, s.device, s.space, s.importance, s.limits)
            for d in s.space.hidden_grid}


@pytest.mark.integration  # ~150 exact checks: tens of seconds on 2 cores
def test_frontier_spans_the_grid_and_meets_the_contract():
    arch = tiny_arch(layers=8, hidden=1024, kv=4, heads=8, head_dim=128, ffn=4096)  # bandwidth-bound decode
    probe = setup(spec_for(serve(tpot=1.0), hardware="rtx-5070", memory=2048 * MiB), arch)
    tpot = next(c.predicted for c in evaluate(arch, probe.spec, probe.profile, probe.device, probe.limits).checks
                if c.metric == "tpot")
    s = setup(spec_for(serve(tpot=0.75 * tpot), hardware="rtx-5070", memory=2048 * MiB), arch)
    relaxes = _relaxes(s)
    front = uniform_frontier(relaxes, s.profile, s.device, s.limits)
    assert len(front) >= 20
    cells = set()
    for a, ev, score, d in front:
        assert ev.ok and evaluate(a, s.spec, s.profile, s.device, s.limits).ok
        kept = [b for b in a.blocks if b.attention or b.ffn]
        assert len({b for b in kept}) == 1  # uniform: every kept layer identical
        cells.add((d, len(kept), kept[0].attention.kv_heads if kept[0].attention else 0))
    assert len(cells) == len(front)  # one candidate per cell
    assert len({c[1] for c in cells}) >= 2 and len({c[2] for c in cells}) >= 2  # depth and KV heads vary
    scores = [f[2] for f in front]
    assert scores == sorted(scores, reverse=True)
    best = uniform_search(relaxes, s.profile, s.device, s.limits)
    assert best is not None and best[0] == front[0][0]


@pytest.mark.integration
def test_frontier_measures_no_architecture_twice():
    """6 layers: the depth shares 0.25 and 0.375 both remove 2 layers (round(1.5) = round(2.25) = 2).
    The uniform arm's measured forwards are its budget, so a repeated candidate would waste one."""
    arch = tiny_arch(layers=6, hidden=1024, kv=4, heads=8, head_dim=128, ffn=4096)
    probe = setup(spec_for(serve(tpot=1.0), hardware="rtx-5070", memory=2048 * MiB), arch)
    tpot = next(c.predicted for c in evaluate(arch, probe.spec, probe.profile, probe.device, probe.limits).checks
                if c.metric == "tpot")
    s = setup(spec_for(serve(tpot=0.75 * tpot), hardware="rtx-5070", memory=2048 * MiB), arch)
    front = uniform_frontier(_relaxes(s), s.profile, s.device, s.limits)
    assert len(front) >= 2
    assert len({a for a, *_ in front}) == len(front)
    assert any(len([b for b in a.blocks if b.attention or b.ffn]) == 4 for a, *_ in front)  # 2 removed: kept once
