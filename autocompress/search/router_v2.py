"""Router v2: the router and the supernet's temporary weights trained together, by distillation.

The paper's method (AutoCompress §3; FBNet-style Gumbel-softmax with straight-through;
Sheared-LLaMA-style multipliers). Why learned logits from 0 under a prior, and adapters: a router
started at the cvxpy point (logit 3.0 on its choices, 20 Adam steps at lr 0.05) over frozen parent
weights never flipped a choice in a measured run; it returned the cvxpy point.

    logits      learned (start at 0) + prior: ``prior`` nats on the cvxpy point's choices, a bias
                the loss can overcome (Adam moves a logit ~lr per step: prior / lr steps to flip)
    each step   tau = tau_start * (tau_end / tau_start) ** (step / (steps - 1))   (annealed)
                sample  p = gumbel_softmax(logits / tau), hard one-hot forward, soft gradient
                quality KD (top-k KL) of the supernet with low-rank adapters (``adapters``) on the
                        parent's weights against the cached teacher outputs
                cost    E[bound_b] from the exact per-layer cost tables, soft p
                loss    quality + sum_b lambda_b (E_b - 1) + rho/2 relu(E_b - 1)^2
                update  router and adapters by Adam; lambda_b <- max(0, lambda_b + eta (E_b - 1))
    decode      argmax of learned + prior logits; where the cost tables put that point over a bound
                (the budget term binds the *expected* cost, not the argmax's), the option changes
                that cost the router the least log-probability per unit of excess removed; where
                it is under every bound, the larger options that stay within them, least
                log-probability lost per unit of budget spent first (``budget_decode``); the
                caller checks the result with the exact cost model
    hidden      fixed at the prior's (``learn_hidden`` False, the default): the hidden size is a
                global choice the global sweep and the measured prior make; learned, it fell to
                384 on npc-5080 where every per-layer point at 576 or 512 measured better

The adapters let the router see which layers recover with training; they are dropped at the end
(the build extracts from the parent's weights). Resumable: every ``ckpt_every`` steps the whole
state (logits, adapters, both Adam states, multipliers, the sampler's generator; the step and the
history in its metadata) is written atomically to one safetensors file in ``ckpt_dir``, and a
rerun continues from it with the same result as an uninterrupted run (a test pins it). The history
is typed (``RouterStep``); its JSON form (``RouterStep.to_json``) is the checkpoint's and the
report's.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save as save_tensors

from autocompress.build import dist
from autocompress.cache import atomic_write_bytes
from autocompress.search.adapters import Adapters, load_optimizer_state, optimizer_state
from autocompress.search.refine import State, apply, costs, violation
from autocompress.search.tables import CostTables, kv_row_value

# kd_loss(step, (ph, pa, pf), params) -> the distillation loss of the supernet with these choice
# weights and these (adapted) weights on the step's batch
KDLoss = Callable[[int, tuple, dict], torch.Tensor]
CKPT = "router_v2.safetensors"


@dataclass(frozen=True)
class RouterV2Config:
    steps: int = 120  # the build derives it from the search budget in tokens (``settings``)
    lr: float = 0.1  # router Adam: ~0.1 nat per step, so a 2-nat prior can flip within ~20 steps
    prior: float = 2.0  # bias on the cvxpy point's choices, in logits (0: no prior)
    tau_start: float = 1.0  # Gumbel-softmax temperature, annealed geometrically (spec: ``temperature``)
    tau_end: float = 0.05
    dual_lr: float = 1.0  # eta of the multipliers' dual ascent (bounds are normalized: 1 = on the bound)
    rho: float = 10.0
    rank: int = 8  # adapter rank (0: frozen parent weights)
    adapter_lr: float = 1e-3
    seed: int = 0
    ckpt_every: int = 10
    learn_hidden: bool = False  # the hidden size stays the prior's (module docstring)


@dataclass(frozen=True)
class RouterStep:
    """One training step as the history keeps it. ``expected`` and ``multipliers`` are per row of
    the cost tables (``CostTables.row_names``, bounds normalized: 1 = on the bound)."""

    step: int
    tau: float  # the Gumbel-softmax temperature of the step
    quality: float  # the distillation loss (KD) of the sampled supernet
    loss: float  # quality + the budget terms
    expected: dict[str, float]  # E[bound value] under the soft probabilities
    multipliers: dict[str, float]  # lambda_b after the step's dual ascent
    decode: State  # the router's argmax after the step (before ``budget_decode``)

    def to_json(self) -> dict:
        """The step as the checkpoint's metadata and the report's ``search.first`` / ``last`` hold it:
        its ``asdict``, but the multipliers under ``lambda`` (the method's name for them) and the
        decode as ``[hidden, [attention...], [FFN...]]``."""
        d = asdict(self)
        h, ca, cf = self.decode
        return {**{k: v for k, v in d.items() if k not in ("multipliers", "decode")}, "lambda": d["multipliers"],
                "decode": [h, list(ca), list(cf)]}

    @classmethod
    def from_json(cls, d: dict) -> RouterStep:
        """``to_json``'s inverse (``KeyError``, ``TypeError`` or ``ValueError`` on another form)."""
        h, ca, cf = d["decode"]
        return cls(int(d["step"]), float(d["tau"]), float(d["quality"]), float(d["loss"]), dict(d["expected"]),
                   dict(d["lambda"]), (int(h), tuple(map(int, ca)), tuple(map(int, cf))))


@dataclass(frozen=True)
class RouterResult:
    """What ``train_router_v2`` returns: its decode (``budget_decode``) and how it got there."""

    hidden_index: int
    attn_choice: tuple[int, ...]  # option index per layer (0 = removed)
    ffn_choice: tuple[int, ...]
    history: tuple[RouterStep, ...] = ()
    seconds: float = 0.0
    decode_moves: int = 0  # option changes that brought its argmax within the cost tables
    decode_fills: int = 0  # option changes that spent the slack its argmax left

    @property
    def decode(self) -> State:
        return self.hidden_index, self.attn_choice, self.ffn_choice


class Router(torch.nn.Module):
    """Logits over the hidden grid and, per layer, over attention and FFN options: learned (from 0)
    plus a fixed prior bias (``set_prior``).

    Illegal options (a layer without attention, layer 0's attention under vLLM, padding beyond
    a layer's option count) are masked with -inf.
    """

    def __init__(self, tables: list[CostTables]):
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
        # a fixed prior added to the learned logits (the cvxpy point as a bias, ``set_prior``)
        self.register_buffer("bias_h", torch.zeros(len(tables)))
        self.register_buffer("bias_a", torch.zeros(L, amax))
        self.register_buffer("bias_f", torch.zeros(L, fmax))

    def set_prior(self, point: State, strength: float) -> None:
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
        """Keep hidden size ``h``: the other sizes get -inf (the router learns per-layer choices only)."""
        with torch.no_grad():
            self.mask_h.fill_(-math.inf)
            self.mask_h[h] = 0.0

    def logits(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Learned logits + prior bias (+ -inf on illegal options)."""
        return (self.hidden + self.bias_h + self.mask_h, self.attn + self.bias_a + self.mask_a,
                self.ffn + self.bias_f + self.mask_f)

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

    def decode(self) -> State:
        h, a, f = self.logits()
        return int(h.argmax()), tuple(int(i) for i in a.argmax(-1)), tuple(int(i) for i in f.argmax(-1))


@dataclass(frozen=True)
class StackedTables:
    """The cost tables of every hidden size as tensors, built once per search."""

    base: torch.Tensor  # (H, B)
    attn: torch.Tensor  # (H, B, L, A)
    ffn: torch.Tensor  # (H, B, L, F)
    both: torch.Tensor  # (H, B)
    # vLLM-CPU's whole-GiB KV reservation (``tables``); None where the engine does not round it
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


def temperature(cfg: RouterV2Config, step: int) -> float:
    frac = step / max(cfg.steps - 1, 1)
    return cfg.tau_start * (cfg.tau_end / cfg.tau_start) ** frac


class _State:
    """Everything a step changes, and its checkpoint."""

    def __init__(self, tables: list[CostTables], params: dict, cfg: RouterV2Config, prior: State | None):
        torch.manual_seed(cfg.seed)
        self.router = Router(tables)
        if prior is not None and cfg.prior:
            self.router.set_prior(prior, cfg.prior)
        if prior is not None and not cfg.learn_hidden:
            self.router.fix_hidden(prior[0])
        self.opt = torch.optim.Adam(self.router.parameters(), lr=cfg.lr)
        self.adapters = Adapters(params, cfg.rank, seed=cfg.seed)
        ps = self.adapters.parameters()
        self.adapter_opt = torch.optim.Adam(ps, lr=cfg.adapter_lr) if ps else None
        self.lam = torch.zeros(len(tables[0].row_names))
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.step, self.history = 0, []  # history: list[RouterStep]

    def save(self, folder: Path, cfg: RouterV2Config) -> None:
        t = {f"router.{k}": v.detach().clone() for k, v in self.router.named_parameters()}
        t.update(optimizer_state(self.opt, "opt"))
        t.update({f"adapter.{k}": v for k, v in self.adapters.state().items()})
        if self.adapter_opt is not None:
            t.update(optimizer_state(self.adapter_opt, "adapter_opt"))
        t["lambda"] = self.lam.clone()
        t["generator"] = self.gen.get_state()
        # one file, written atomically: the step and history travel in its metadata with the tensors
        meta = json.dumps({"step": self.step, "history": [r.to_json() for r in self.history], "config": asdict(cfg)})
        atomic_write_bytes(folder / CKPT, save_tensors(t, metadata={"router_v2": meta}))

    def load(self, folder: Path, cfg: RouterV2Config) -> bool:
        path = folder / CKPT
        if not path.is_file():
            return False
        with safe_open(str(path), "pt") as f:
            meta = json.loads(f.metadata()["router_v2"])
        if meta["config"] != asdict(cfg):
            return False  # another search's state (the stage key differs too): start over
        try:
            history = [RouterStep.from_json(r) for r in meta["history"]]
        except (KeyError, TypeError, ValueError):
            # a history in another form than ``RouterStep.to_json`` writes (other code, whose stage
            # key differs too, so only a copied folder holds one): treated as absent, the router
            # restarts from step 0
            return False
        t = load_file(str(path))
        with torch.no_grad():
            for k, v in self.router.named_parameters():
                v.copy_(t[f"router.{k}"])
        load_optimizer_state(self.opt, t, "opt")
        self.adapters.load_state({k[len("adapter."):]: v for k, v in t.items() if k.startswith("adapter.")})
        if self.adapter_opt is not None:
            load_optimizer_state(self.adapter_opt, t, "adapter_opt")
        self.lam = t["lambda"].clone()
        self.gen.set_state(t["generator"])
        self.step, self.history = meta["step"], history
        return True


def train_router_v2(tables: list[CostTables], kd_loss: KDLoss, params: dict, cfg: RouterV2Config,
                    prior: State | None = None, on_step: Callable[[RouterStep], None] | None = None,
                    ckpt_dir: Path | None = None, stop_after: int | None = None,
                    on_resume: Callable[[int], None] | None = None) -> RouterResult:
    """Train router and adapters jointly (module docstring). ``params``: the supernet's (parent)
    weights, never modified; ``prior``: the cvxpy point (hidden index, attention and FFN option per
    layer) or None; ``ckpt_dir``: resume from / checkpoint to; ``stop_after``: stop after that many
    steps (a checkpoint is written), for the resume test; ``on_resume(step)``: steps already done."""
    t0 = time.perf_counter()
    s = _State(tables, params, cfg, prior)
    if ckpt_dir is not None:
        ckpt_dir = Path(ckpt_dir)
        if s.load(ckpt_dir, cfg) and on_resume:
            on_resume(s.step)
    st = StackedTables.of(tables)
    names = tables[0].row_names
    while s.step < cfg.steps:
        step = s.step
        tau = temperature(cfg, step)
        ph, pa, pf = s.router.probs(tau, hard=True, generator=s.gen)
        q = kd_loss(step, (ph, pa, pf), s.adapters.merged(params))
        # the cost term uses the soft probabilities: the expectation is exact and low-variance
        e = expected_costs(st, *s.router.probs(tau, hard=False, generator=None))
        viol = e - 1.0
        loss = q + (s.lam * viol).sum() + 0.5 * cfg.rho * F.relu(viol).pow(2).sum()
        s.opt.zero_grad()
        if s.adapter_opt is not None:
            s.adapter_opt.zero_grad()
        loss.backward()
        s.opt.step()
        if s.adapter_opt is not None:
            s.adapter_opt.step()
        with torch.no_grad():
            s.lam = torch.clamp(s.lam + cfg.dual_lr * viol.detach(), min=0.0)
        rec = RouterStep(step, tau, float(q.detach()), float(loss.detach()),
                         dict(zip(names, (float(v) for v in e.detach()))), dict(zip(names, (float(v) for v in s.lam))),
                         s.router.decode())
        s.history.append(rec)
        s.step += 1
        if on_step:
            on_step(rec)
        last = s.step == cfg.steps or (stop_after is not None and s.step >= stop_after)
        if ckpt_dir is not None and (s.step % cfg.ckpt_every == 0 or last):
            _save(s, ckpt_dir, cfg)
        if stop_after is not None and s.step >= stop_after:
            break
    (h, ca, cf), moves, fills = budget_decode(s.router, tables)
    return RouterResult(h, ca, cf, tuple(s.history), time.perf_counter() - t0, moves, fills)


def budget_decode(router: Router, tables: list[CostTables]) -> tuple[State, int, int]:
    """(point, changes that removed excess, changes that spent slack): the router's argmax brought
    onto the cost tables' budget by the router's own preference. The hidden size stays the argmax's.

    Over a bound: take the single change of one layer's attention or FFN option that removes
    excess at the least log-probability per unit of excess removed. Why: the training penalty
    binds the *expected* cost under soft probabilities, so the argmax can sit over a bound
    (npc-5080: TPOT 1.035 of the bound); the exact model's repair is cost-driven and
    blind to the router, and undid every one of v2's moves there (KL 3.56 -> 5.42 as repaired).
    Under every bound: take the single larger option that stays within the tables at the least
    log-probability lost per unit of budget spent (on the row it loads most), until none fits.
    Why: the same expectation leaves the argmax under the bound (npc-5080: 49.9M parameters where
    the greedy built 66.5M at the same TPOT bound), and slack is quality left unbought."""
    with torch.no_grad():
        _, la, lf = router.logits()
        lp = {"a": F.log_softmax(la, -1).numpy(), "f": F.log_softmax(lf, -1).numpy()}
    s = router.decode()
    excess, moves, fills, cap = violation(costs(tables, s)), 0, 0, 4 * len(s[1])
    while excess > 0 and moves < cap:
        best = None
        for kind, l, c, j, t in _changes(s, lp, larger=False):
            v = violation(costs(tables, t))
            if v < excess - 1e-12:
                score = (lp[kind][l, c] - lp[kind][l, j]) / (excess - v)
                if best is None or score < best[0]:
                    best = (score, t, v)
        if best is None:  # no single change lowers the excess: the exact model's repair takes over
            return s, moves, fills
        _, s, excess = best
        moves += 1
    e = costs(tables, s)
    while excess <= 0 and fills < cap:
        best = None
        for kind, l, c, j, t in _changes(s, lp, larger=True):
            et = costs(tables, t)
            if violation(et) > 0:
                continue
            score = (lp[kind][l, c] - lp[kind][l, j]) / max(float((et - e).max()), 1e-9)
            if best is None or score < best[0]:
                best = (score, t, et)
        if best is None:
            break
        _, s, e = best
        fills += 1
    return s, moves, fills


def _changes(s, lp: dict, larger: bool):
    """Every single change of one layer's attention or FFN option to another legal option (only
    larger ones, options being ordered by size, with ``larger``): (kind, layer, now, new, state)."""
    for kind, choice in (("a", s[1]), ("f", s[2])):
        for l, c in enumerate(choice):
            for j in np.flatnonzero(np.isfinite(lp[kind][l])):
                if j != c and (j > c or not larger):
                    yield kind, l, c, int(j), apply(s, [(kind, l, int(j))])


def _save(s: _State, folder: Path, cfg: RouterV2Config) -> None:
    if not dist.is_main():  # under a launcher every rank runs the same search; rank 0 alone writes
        return
    folder.mkdir(parents=True, exist_ok=True)
    s.save(folder, cfg)


__all__ = ["KDLoss", "Router", "RouterResult", "RouterStep", "RouterV2Config", "StackedTables", "budget_decode",
           "expected_costs", "temperature", "train_router_v2"]
