"""Unit tests of the hybrid math against plain references: the SSD scan, routers with removed
experts, option mixtures, checkpoint name maps (milliseconds, no transformers)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from autocompress.families import checkpoint as ck  # noqa: E402
from autocompress.nn.mamba2 import segsum, ssd  # noqa: E402
from autocompress.nn.moe import Router, experts, mixed_route, route  # noqa: E402


def test_ssd_equals_the_recurrence_across_chunks():
    g = torch.Generator().manual_seed(0)
    b, t, h, p, groups, n = 2, 37, 4, 3, 2, 5
    x = torch.randn(b, t, h, p, generator=g, dtype=torch.float64)
    dt = torch.rand(b, t, h, generator=g, dtype=torch.float64) * 0.5
    A = -torch.rand(h, generator=g, dtype=torch.float64) * 2
    B = torch.randn(b, t, groups, n, generator=g, dtype=torch.float64)
    C = torch.randn(b, t, groups, n, generator=g, dtype=torch.float64)
    state = torch.zeros(b, h, p, n, dtype=torch.float64)
    Bh, Ch = B.repeat_interleave(h // groups, 2), C.repeat_interleave(h // groups, 2)
    ref = []
    for i in range(t):  # state_t = exp(dt A) state + dt x B^T; y = C state
        state = state * torch.exp(dt[:, i, :, None, None] * A[None, :, None, None]) \
            + dt[:, i, :, None, None] * x[:, i, :, :, None] * Bh[:, i, :, None, :]
        ref.append(torch.einsum("bhpn,bhn->bhp", state, Ch[:, i]))
    for chunk in (4, 16, 64):  # several chunks, one chunk, a padded chunk
        assert torch.allclose(ssd(x, dt, A, B, C, chunk=chunk), torch.stack(ref, 1), atol=1e-12)


def test_segsum_is_the_log_decay():
    x = torch.tensor([1.0, 2.0, 4.0])
    s = segsum(x)
    assert s[2, 0] == 6.0 and s[2, 2] == 0.0 and s[1, 0] == 2.0 and s[0, 1] == -torch.inf


@pytest.mark.parametrize("router", [Router("softmax", 2, True), Router("softmax", 2, False),
                                    Router("sigmoid", 2, True, 2.5)])
def test_removed_experts_route_like_a_sliced_gate(router):
    """Masking experts >= k equals a gate with only the first k rows (softmax denominators, top-k
    selection and its renormalization all over the kept experts)."""
    g = torch.Generator().manual_seed(1)
    logits, bias = torch.randn(9, 6, generator=g), 0.1 * torch.randn(6, generator=g)
    for kept in (2, 4, 6):
        masked = route(logits, router, kept, bias)
        sliced = route(logits[:, :kept], router, None, bias[:kept])
        assert torch.allclose(masked[:, :kept], sliced, atol=1e-7) and not masked[:, kept:].any()
        assert ((masked > 0).sum(-1) == 2).all()


def test_option_mixture_is_the_mixture_of_the_option_layers():
    g = torch.Generator().manual_seed(2)
    E, I, d, N = 4, 5, 3, 7
    up, gate, down = torch.randn(E, I, d, generator=g), torch.randn(E, I, d, generator=g), torch.randn(E, d, I, generator=g)
    h, logits = torch.randn(N, d, generator=g), torch.randn(N, E, generator=g)
    r = Router("softmax", 2, True)
    opts = ((0.3, 2), (0.7, 4))
    mixed = experts(h, mixed_route(logits, r, opts), up, down, gate, "silu")
    parts = sum(w * experts(h, route(logits, r, k), up, down, gate, "silu") for w, k in opts)
    assert torch.allclose(mixed, parts, atol=1e-6)
    dense = torch.einsum("ne,ned->nd", route(logits, r),  # every expert on every token, weighted
                         torch.einsum("eji,nei->nej", down, torch.nn.functional.silu(torch.einsum("eid,nd->nei", gate, h))
                                      * torch.einsum("eid,nd->nei", up, h)))
    assert torch.allclose(experts(h, route(logits, r), up, down, gate, "silu"), dense, atol=1e-5)
    assert not mixed_route(logits, r, ()).any()  # the layer removed


def test_checkpoint_names_round_trip():
    state = {"embed": torch.ones(3, 2), "L0.e_up": torch.arange(24.0).view(2, 3, 4)}
    plain, experts_ = {"embed": "model.embed.weight"}, {"L0.e_up": "model.layers.0.experts.{e}.up.weight"}
    native = ck.from_canonical(state, plain, experts_)
    assert sorted(native) == ["model.embed.weight", "model.layers.0.experts.0.up.weight",
                              "model.layers.0.experts.1.up.weight"]
    back = ck.to_canonical(native, plain, experts_, {"L0.e_up": 2})
    assert all(torch.equal(back[k], v) for k, v in state.items())
    fused = {"model.embed.weight": torch.ones(3, 2), "model.layers.0.experts.gate_up": torch.arange(48.0).view(2, 6, 4)}
    got = ck.to_canonical(fused, plain, experts_, {"L0.e_up": 2}, {"L0.e_up": ("model.layers.0.experts.gate_up", 3, 3)})
    assert torch.equal(got["L0.e_up"], fused["model.layers.0.experts.gate_up"][:, 3:])
    with pytest.raises(ValueError, match="checkpoint lacks 1 tensors"):
        ck.to_canonical({"model.embed.weight": torch.ones(3, 2)}, plain, experts_, {"L0.e_up": 2})
    with pytest.raises(ValueError, match="embed: expected"):
        ck.check_shapes({"embed": torch.ones(3, 2)}, {"embed": (3, 3)})
