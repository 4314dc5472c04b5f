"""Router v2 on a tiny random Llama supernet: the adapters start as the parent exactly and train by
KD against the teacher's outputs, so the router sees a pruned model recover."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.integration

import _tinykit as kit  # noqa: E402

from autocompress.search.adapters import Adapters, adapted_names  # noqa: E402
from autocompress.search.router_v2 import RouterV2Config, train_router_v2  # noqa: E402
from autocompress.search.supernet import Supernet  # noqa: E402
from autocompress.search.tables import CostTables  # noqa: E402
from autocompress.data.teacher import topk_kl, topk_of  # noqa: E402
from autocompress.nn.hybrid import forward  # noqa: E402
from autocompress.plan.space import DEFAULT_AXES, SearchSpace  # noqa: E402

SPACE = SearchSpace((64,), 32, (1, 2), (), DEFAULT_AXES, True, 0.25, ())


def _setup():
    model = kit.random_llama(3)
    cfg = kit.config_of(model)
    params = kit.canonical_of(model)
    net = Supernet(params, cfg, SPACE)
    ids = kit.batches(4, batch=2, seq=16, seed=3)
    with torch.no_grad():
        targets = [topk_of(forward(params, cfg, x), 32) for x in ids]
    o = net.options
    L, A, F = 3, max(map(len, o.attn)), max(map(len, o.ffn))
    zeros = lambda *s: torch.zeros(s).numpy()  # noqa: E731
    # one bound the tables never reach: the router is free, only the loss decides
    tables = [CostTables(64, ("memory",), zeros(1) + 0.1, zeros(1, L, A), zeros(1, L, F), zeros(1), o)]
    return params, net, ids, targets, tables


def test_adapters_start_at_the_parent_and_cover_the_projections():
    params, net, ids, targets, _ = _setup()
    ad = Adapters(params, rank=4)
    names = adapted_names(params, 4)
    assert len(names) == 3 * 7 and not any("embed" in n or "norm" in n for n in names)
    merged = ad.merged(params)
    assert all(torch.equal(merged[k], params[k]) for k in params)  # B = 0: step 0 is the parent


def test_kd_trains_the_adapters_of_a_pruned_supernet():
    params, net, ids, targets, tables = _setup()
    pruned = (0, (1, 1, 1), (1, 1, 1))  # one KV head, 32 of 128 FFN channels in every layer

    def kd(step, choices, p):
        return topk_kl(net.forward(ids[step % 4], choices, params=p), targets[step % 4])

    cfg = RouterV2Config(steps=40, prior=60.0, lr=1e-3, rank=4, adapter_lr=1e-2)  # choices pinned to the prior
    res = train_router_v2(tables, kd, params, cfg, prior=pruned)
    assert all(r.decode == pruned for r in res.history)
    q = [r.quality for r in res.history]
    # the same four batches cycle: compare a cycle at the start with one at the end
    assert sum(q[-4:]) < 0.8 * sum(q[:4]), q
    frozen = train_router_v2(tables, kd, params, RouterV2Config(steps=8, prior=60.0, lr=1e-3, rank=0), prior=pruned)
    assert [r.quality for r in frozen.history[4:8]] == pytest.approx([r.quality for r in frozen.history[:4]])
