"""The router: masks illegal options, raises multipliers while violated, decodes within bounds."""

import pytest

torch = pytest.importorskip("torch")

from autocompress.search.router import (Router, SearchConfig, StackedTables, choices_to_numpy, expected_costs, train_router)

from _searchkit import setup_tables  # noqa: E402


def test_router_masks_layer0_attention_removal_under_vllm():
    tables, relax = setup_tables()
    r = Router(tables, None, 3.0)
    assert r.mask_a[0, 0] == float("-inf")  # layer 0's attention stays (vLLM DeciLM loader)
    assert r.mask_a[1, 0] == 0.0


def test_search_meets_bounds_with_a_quality_that_wants_everything():
    tables, relax = setup_tables()
    L = relax.L
    # quality prefers keeping every option at full size: only the bounds hold it back
    def quality(step, ph, pa, pf):
        return -(ph[0] + pa[:, -1].sum() / L + pf[:, -1].sum() / L)
    res = train_router(tables, quality, SearchConfig(steps=150, seed=0))
    pa, pf = choices_to_numpy(tables, res.hidden_index, res.attn_choice, res.ffn_choice)
    values = tables[res.hidden_index].expected(pa, pf)
    # the parent is at 1.10; the decoded router lands near the bound (the build then repairs the
    # last few percent greedily under the exact cost model)
    assert max(values) <= 1.08, dict(zip(tables[0].names, values))
    assert res.history[0]["expected"]["w.tpot"] > 1.0
    # the binding multiplier rose while the bound was violated at the start
    lam = res.history[-1]["lambda"]
    assert max(lam.values()) > 0


def test_expected_costs_are_differentiable():
    tables, relax = setup_tables()
    st = StackedTables.of(tables)
    L, A, F = tables[0].attn.shape[1], tables[0].attn.shape[2], tables[0].ffn.shape[2]
    ph = torch.full((len(tables),), 1 / len(tables), requires_grad=True)
    pa = torch.full((L, A), 1 / A, requires_grad=True)
    pf = torch.full((L, F), 1 / F, requires_grad=True)
    expected_costs(st, ph, pa, pf).sum().backward()
    assert pa.grad.abs().sum() > 0 and pf.grad.abs().sum() > 0 and ph.grad.abs().sum() > 0
