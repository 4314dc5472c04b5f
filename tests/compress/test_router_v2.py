"""Router v2 on synthetic cost tables: it moves when the loss says so and only then, the prior is
a bias, the temperature anneals, dual ascent brings an over-budget decode under the bound, an
argmax over the tables is brought within them by the router's own preference, a resumed run
equals an uninterrupted one (a checkpoint whose history is in another form restarts it), and the
typed history and record keep the report's JSON."""

import json

import pytest

torch = pytest.importorskip("torch")

from autocompress.search.refine import costs, full_state  # noqa: E402
from autocompress.search.router_v2 import (Router, RouterStep, RouterV2Config, budget_decode, temperature,  # noqa: E402
                                           train_router_v2)

from _searchkit import setup_tables  # noqa: E402

P0 = (2, (1, 0, 0, 0, 0, 0), (4, 4, 4, 4, 4, 4))
LOOSE = 8e-4  # a TPOT bound the parent meets (0.77 of it): no budget pressure anywhere


def _loose():
    tables, _ = setup_tables(LOOSE)
    assert max(costs(tables, full_state(tables, 0))) < 1.0
    return tables


def _zero(step, choices, params):
    return torch.zeros(())


def _wants_ffn2_at_2(step, choices, params):  # a loss that prefers layer 2's FFN narrower (cheaper)
    return -choices[2][2, 2]


def _decode(res):
    return res.hidden_index, res.attn_choice, res.ffn_choice


def _argmax(res):
    """The router's own argmax after its last step (before ``budget_decode`` fills the slack)."""
    return res.history[-1].decode


def test_choices_change_when_the_loss_says_so_and_only_then():
    tables = _loose()
    moved = train_router_v2(tables, _wants_ffn2_at_2, {}, RouterV2Config(steps=30), prior=P0)
    h, ca, cf = _argmax(moved)
    assert cf[2] == 2  # the loss's choice won against the prior ...
    assert (h, ca, cf[:2] + cf[3:]) == (P0[0], P0[1], P0[2][:2] + P0[2][3:])  # ... and nothing else moved
    flip = next(r.step for r in moved.history if r.decode[2][2] == 2)
    assert flip < 30  # Adam at lr 0.1 overcomes the 2-nat prior in ~20 steps (v1 never flipped in 20)
    still = train_router_v2(tables, _zero, {}, RouterV2Config(steps=30), prior=P0)
    assert _argmax(still) == P0
    assert all(r.decode == P0 for r in still.history)


def test_the_prior_is_a_bias_on_free_logits():
    tables = _loose()
    r = Router(tables)
    r.set_prior(P0, 2.0)
    assert all(float(p.detach().abs().sum()) == 0.0 for p in r.parameters())  # learned logits start at 0
    h, a, f = r.logits()
    assert float(h[P0[0]]) == 2.0 and float(f[2, 4]) == 2.0 and float(f[2, 3]) == 0.0
    assert r.decode() == P0
    # a stronger prior takes proportionally longer to overcome; no prior: the loss's choice at once
    first = {}
    for strength in (0.0, 1.0, 4.0):
        res = train_router_v2(tables, _wants_ffn2_at_2, {}, RouterV2Config(steps=45, prior=strength), prior=P0)
        first[strength] = next(r.step for r in res.history if r.decode[2][2] == 2)
    assert first[0.0] <= first[1.0] < first[4.0]


def test_temperature_anneals_geometrically():
    cfg = RouterV2Config(steps=50, tau_start=2.0, tau_end=0.1)
    taus = [temperature(cfg, s) for s in range(cfg.steps)]
    assert taus[0] == pytest.approx(2.0) and taus[-1] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(taus, taus[1:]))
    tables = _loose()
    res = train_router_v2(tables, _zero, {}, RouterV2Config(steps=5, tau_start=2.0, tau_end=0.1), prior=P0)
    assert [r.tau for r in res.history] == pytest.approx([temperature(RouterV2Config(steps=5, tau_start=2.0,
                                                                                         tau_end=0.1), s)
                                                             for s in range(5)])


def test_dual_ascent_pushes_an_over_budget_decode_under_the_bound():
    tables, _ = setup_tables()
    full = full_state(tables, 0)
    assert costs(tables, full)[0] > 1.09  # the parent: 10% over the TPOT bound
    res = train_router_v2(tables, _zero, {}, RouterV2Config(steps=60), prior=full)
    assert max(costs(tables, _decode(res))) <= 1.0
    assert res.history[0].expected["w.tpot"] > 1.0
    assert max(r.multipliers["w.tpot"] for r in res.history) > 0  # the multiplier rose while violated


def test_budget_decode_fits_the_tables_by_the_routers_preference():
    tables, _ = setup_tables()
    full = full_state(tables, 0)
    r = Router(tables)
    r.set_prior(full, 5.0)  # the argmax is the parent: 10% over the TPOT bound
    assert budget_decode(r, tables)[0] != full and max(costs(tables, full)) > 1.0
    plain, n, _ = budget_decode(r, tables)
    assert max(costs(tables, plain)) <= 1.0 and n >= 1
    for layer in (1, 4):  # kept whole above; now the router barely minds it one step narrower: it changes
        r2 = Router(tables)
        r2.set_prior(full, 5.0)
        with torch.no_grad():
            r2.ffn[layer, full[2][layer] - 1] = 4.999
        point, n, _ = budget_decode(r2, tables)
        assert max(costs(tables, point)) <= 1.0
        assert plain[2][layer] == full[2][layer] and point[2][layer] < full[2][layer]
    loose = _loose()  # within the tables already: the argmax, unchanged
    r3 = Router(loose)
    r3.set_prior(full_state(loose, 0), 5.0)
    assert budget_decode(r3, loose) == (full_state(loose, 0), 0, 0)


def test_budget_decode_spends_the_slack_by_the_routers_preference():
    from autocompress.search.refine import up_moves, apply

    tables, _ = setup_tables(6.0e-4)  # the parent is over the TPOT bound; P0 is well under it
    assert max(costs(tables, full_state(tables, 0))) > 1.0 and max(costs(tables, P0)) < 0.95
    r = Router(tables)
    r.set_prior(P0, 5.0)
    filled, moves, fills = budget_decode(r, tables)
    assert moves == 0 and fills >= 1 and filled != P0
    assert max(costs(tables, P0)) < max(costs(tables, filled)) <= 1.0
    # maximal: no one-step-larger option of any sub-block still fits
    assert all(max(costs(tables, apply(filled, [m]))) > 1.0 for m in up_moves(tables, filled))
    # by preference: layer 3's FFN one step wider, which the router barely minds, is bought first
    r2 = Router(tables)
    r2.set_prior(P0, 5.0)
    with torch.no_grad():
        r2.ffn[3, P0[2][3] + 1] = 4.999
    pref, _, _ = budget_decode(r2, tables)
    assert pref[2][3] > P0[2][3]
    assert filled[2][3] == P0[2][3] or pref[2][3] >= filled[2][3]


def _with_weights(step, choices, params):
    """A loss that reads the adapted weights too, so the resume test covers the adapters' state."""
    w = params["model.layers.0.mlp.up_proj.weight"]
    x = torch.linspace(-1, 1, w.shape[1])
    return -choices[2][2, 2] + 0.1 * (w @ x).pow(2).mean() * (1 + step % 3)


def test_resume_gives_the_same_decode_as_an_uninterrupted_run(tmp_path):
    tables, _ = setup_tables()  # under budget pressure: the multipliers' state matters too
    g = torch.Generator().manual_seed(0)
    params = {"model.layers.0.mlp.up_proj.weight": torch.randn(24, 16, generator=g),
              "model.embed_tokens.weight": torch.randn(32, 16, generator=g)}
    cfg = RouterV2Config(steps=17, ckpt_every=4, rank=2)
    whole = train_router_v2(tables, _with_weights, params, cfg, prior=P0)
    resumed_at = []
    part = train_router_v2(tables, _with_weights, params, cfg, prior=P0, ckpt_dir=tmp_path, stop_after=7)
    assert len(part.history) == 7
    rest = train_router_v2(tables, _with_weights, params, cfg, prior=P0, ckpt_dir=tmp_path,
                           on_resume=resumed_at.append)
    assert resumed_at == [7]
    assert _decode(rest) == _decode(whole) and _argmax(rest) == _argmax(whole)
    assert rest.history == whole.history  # bit-identical: logits, adapters, Adam states, generator
    # another configuration does not resume from this state
    other = []
    train_router_v2(tables, _with_weights, params, RouterV2Config(steps=3, rank=2), prior=P0, ckpt_dir=tmp_path,
                    on_resume=other.append)
    assert other == []


def test_a_checkpoint_whose_history_is_in_another_form_restarts_the_router(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from autocompress.search.router_v2 import CKPT

    tables = _loose()
    cfg = RouterV2Config(steps=9, ckpt_every=3)
    whole = train_router_v2(tables, _wants_ffn2_at_2, {}, cfg, prior=P0)
    train_router_v2(tables, _wants_ffn2_at_2, {}, cfg, prior=P0, ckpt_dir=tmp_path, stop_after=6)
    path = tmp_path / CKPT
    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["router_v2"])
    meta["history"] = [{k: v for k, v in r.items() if k != "lambda"} for r in meta["history"]]
    save_file(load_file(str(path)), str(path), metadata={"router_v2": json.dumps(meta)})
    resumed = []
    again = train_router_v2(tables, _wants_ffn2_at_2, {}, cfg, prior=P0, ckpt_dir=tmp_path, on_resume=resumed.append)
    assert resumed == [] and again.history == whole.history  # treated as absent: started over, same run


def test_a_step_is_typed_and_its_json_is_the_reports():
    tables = _loose()
    res = train_router_v2(tables, _wants_ffn2_at_2, {}, RouterV2Config(steps=3), prior=P0)
    r = res.history[-1]
    assert isinstance(r, RouterStep) and r.decode == P0 and res.decode == _decode(res)
    assert set(r.expected) == set(r.multipliers) == set(tables[0].row_names)
    d = r.to_json()
    assert list(d) == ["step", "tau", "quality", "loss", "expected", "lambda", "decode"]
    assert d["decode"] == [P0[0], list(P0[1]), list(P0[2])] and d["lambda"] == r.multipliers
    assert RouterStep.from_json(json.loads(json.dumps(d))) == r


def test_the_routers_record_keeps_the_reports_form():
    from dataclasses import replace

    from autocompress.search.joint import RouterRecord

    step = RouterStep(0, 1.0, 0.5, 0.6, {"w.tpot": 1.02}, {"w.tpot": 0.02}, P0)
    rec = RouterRecord(64, 12.34, 64 * 1024, "uniform grid point", False, 3, 1, 2,
                       {"cvxpy point": 0.123456, "uniform grid point": 0.1}, step, step)
    assert rec.forwards == 2
    got = replace(rec, final_kl=0.987654).to_json()
    assert list(got) == ["router", "steps", "seconds", "tokens", "prior", "learn_hidden", "moved_from_prior",
                         "decode_moves", "decode_fills", "prior_kl", "points_kl", "forwards", "first", "last",
                         "final_kl"]
    assert got["router"] == "v2" and got["seconds"] == 12.3 and got["prior_kl"] == 0.1235
    assert got["points_kl"] == {"cvxpy point": 0.1235, "uniform grid point": 0.1} and got["final_kl"] == 0.9877
    assert got["first"] == step.to_json() and got["last"]["lambda"] == {"w.tpot": 0.02}
    assert "final_kl" not in rec.to_json()


def test_the_search_key_holds_router_v2s_config():
    from dataclasses import replace

    from autocompress.search.config import search_configs, search_key_parts
    from autocompress.build.settings import derive_build

    _, relax = setup_tables()
    s = derive_build(relax.spec)
    v2 = search_configs(s)[1]
    per_step = s.search_batch * s.search_seq
    assert v2.steps == s.search_tokens // per_step >= 64  # the derived budget: at least 64 steps
    assert v2.tau_start == s.search_temperature == 1.0
    base = search_key_parts(s)
    assert "adapter_lr" in base[1]  # every router v2 setting, defaults included: a new default re-runs
    for change in (dict(search_tokens=s.search_tokens * 2), dict(search_temperature=2.0), dict(seed=1)):
        assert search_key_parts(replace(s, **change)) != base, change


def _wants_hidden_0(step, choices, params):  # a loss that prefers the first hidden size
    return -choices[0][0]


def test_the_hidden_size_stays_the_priors_unless_learned():
    tables = _loose()
    kept = train_router_v2(tables, _wants_hidden_0, {}, RouterV2Config(steps=30), prior=P0)
    assert _argmax(kept)[0] == P0[0] and all(r.decode[0] == P0[0] for r in kept.history)
    learned = train_router_v2(tables, _wants_hidden_0, {}, RouterV2Config(steps=30, learn_hidden=True), prior=P0)
    assert _argmax(learned)[0] == 0
