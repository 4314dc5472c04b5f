"""Activation-based importance of the parent's channels, heads, experts, sub-layers and layers
(Minitron, ShortGPT, REAP), for every family.

One pass of the functional forward (``nn.hybrid.forward``) over the caller's calibration batches; the
forward's ``tap`` hands every activation to an accumulator (sums in float64, divided by the token count):

* FFN channel c of layer l: mean over tokens of |act(gate) * up|_c (Minitron's neuron importance);
* query head h: mean over tokens of the L2 norm of its attention output before ``o`` (Minitron's head
  importance); a KV group scores the sum over its query heads (all of them share the group's K/V);
* hidden channel c: sum over every RMSNorm output (pre-mixer, pre-FFN, final) of mean |y_c|
  (Minitron's embedding-channel importance, aggregated over the norms);
* **experts** (REAP, Lasby et al. 2025, "router-weighted expert activation pruning"): the mean,
  over the tokens routed to expert e, of its routing weight times the L2 norm of its output,
  g_e(x) ||f_e(x)||; the routing mass (share of all routing weight) is kept for the report;
* **expert channels**: per expert, the routing-weighted mean |z_c| of its intermediate channel c
  over its tokens (Minitron's neuron importance inside each expert);
* **Mamba2 heads**: the mean L2 norm of each head's normed, gated output (what ``out_proj`` reads,
  the analogue of an attention head's output); ranked within each group (``prune.permute``);
* layer l: block influence 1 - cos(layer input, layer output), mean over tokens (ShortGPT); the same for
  the mixer and the FFN residual branches alone (the cosine sub-layer influence);
* sub-layer removal cost (``ablation_influence``): KL(parent || parent without that one mixer or FFN
  sub-block) per token on a few calibration batches, one extra forward per sub-block. Minitron ranks depth
  by the loss when a layer is dropped, not by activations: the cosine influence values an attention
  sub-block at ~1/3 of an FFN on SmolLM2 (attention moves tokens between positions, changing the residual
  little per position) and the search kept attention in 4 of 30 layers; removal KL measures what the
  objective needs, what is lost when the sub-block goes.

``ImportanceStats.to_json`` writes the importance file the feasibility stage reads
(``autocompress.feasibility.objective.load_importance``): per layer the removal KLs (or, without them, the
cosine influences) as the mixer / FFN weights and cumulative-share curves over sorted KV-group and
FFN-channel importances, plus the hidden-channel curve, each sampled at SEGMENTS + 1 evenly spaced keep
fractions; ``mamba_curve`` (share kept by the best heads of every group at each fraction) and
``width_curve`` (share kept by the first channels of every expert). A MoE layer's ``ffn_curve`` is over
its experts, the size the relaxation varies.

Under a launcher (``build.dist``) the batches of the statistics pass (models without MoE layers, whose
per-batch contributions have a fixed layout) and the removal KLs are split over the ranks and added in
the single-process order, so every rank gets the single-process result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.nn.functional import log_softmax

from autocompress.build import dist
from autocompress.cache import atomic_write_bytes
from autocompress.feasibility.objective import SEGMENTS
from autocompress.ir import MLP, Attention, Block, Mamba2, MoE
from autocompress.nn.hybrid import HybridConfig, forward

IMPORTANCE_VERSION = 2  # 2: attention / FFN weights are removal KLs (ablation_influence)

_TENSOR_EVENTS = ("norm", "ffn_act", "heads", "mamba_heads", "router")  # the others add a float


def cumulative_curve(scores: torch.Tensor, points: int = SEGMENTS + 1) -> list[float]:
    """Share of the total importance kept by the best x * n items, at ``points`` fractions x in [0, 1].

    Items are sorted by decreasing score; between whole counts the share is interpolated linearly (a
    fraction of the next item), so the curve is concave, starts at 0 and ends at 1.
    """
    s = torch.sort(scores.double().clamp_min(0), descending=True).values.numpy()
    total = float(s.sum())
    n = len(s)
    if total <= 0:
        cum = np.linspace(0.0, 1.0, n + 1)
    else:
        cum = np.concatenate([[0.0], np.cumsum(s) / total])
    xs = np.linspace(0.0, 1.0, points) * n
    out = [float(v) for v in np.interp(xs, np.arange(n + 1), cum)]
    out[0], out[-1] = 0.0, 1.0
    return out


def rowwise_curve(scores: torch.Tensor, points: int = SEGMENTS + 1) -> list[float]:
    """Share of the total kept when every row keeps its best x * n entries, at ``points`` fractions."""
    s = torch.sort(scores.double().clamp_min(0), dim=-1, descending=True).values.numpy()
    n, total = s.shape[-1], float(s.sum())
    cum = np.concatenate([np.zeros((len(s), 1)), np.cumsum(s, axis=-1)], axis=-1).sum(0)
    cum = cum / total if total > 0 else np.linspace(0.0, 1.0, n + 1)
    out = [float(v) for v in np.interp(np.linspace(0.0, 1.0, points) * n, np.arange(n + 1), cum)]
    out[0], out[-1] = 0.0, 1.0
    return out


@dataclass(frozen=True)
class ImportanceStats:
    """Per-layer tuples hold None where the parent's layer has no such sub-block."""

    hidden_channels: torch.Tensor  # (d,) summed over all RMSNorm outputs
    ffn_channels: tuple  # (I_l,) mean |act(gate) * up| per dense FFN
    head_scores: tuple  # (H,) mean L2 norm of each head's output
    kv_groups: tuple  # (K_l,) sum of head_scores over the group's query heads
    mamba_heads: tuple  # (H,) per Mamba2 layer
    experts: tuple  # (E,) REAP score per MoE layer
    expert_mass: tuple  # (E,) share of the routing weight
    expert_channels: tuple  # (E, I) per MoE layer
    layer_influence: torch.Tensor  # (L,) 1 - cos(block input, block output)
    attention_influence: torch.Tensor  # (L,) the mixer's (attention or Mamba2) 1 - cos(x, x + mixer(x))
    ffn_influence: torch.Tensor  # (L,) 1 - cos(x, x + ffn(x)); 0 without FFN
    tokens: int
    groups: tuple = ()  # Mamba2 groups per layer (0 elsewhere), for the group-aware curve
    attention_removal: torch.Tensor | None = None  # (L,) KL(parent || without layer l's mixer), per token
    ffn_removal: torch.Tensor | None = None  # (L,) the same without its FFN

    @property
    def num_layers(self) -> int:
        return len(self.ffn_channels)

    def to_dict(self) -> dict:
        """The importance file's content (see ``load_importance``): the weights are the removal KLs when
        measured, the cosine influences otherwise; both are kept for the report."""
        layers = []
        ablated = self.attention_removal is not None and self.ffn_removal is not None
        for l in range(self.num_layers):
            a, f = ((self.attention_removal[l], self.ffn_removal[l]) if ablated
                    else (self.attention_influence[l], self.ffn_influence[l]))
            e = {"attention": float(a), "ffn": float(f), "attention_cos": float(self.attention_influence[l]),
                 "ffn_cos": float(self.ffn_influence[l]), "block": float(self.layer_influence[l])}
            if self.kv_groups[l] is not None:
                e["kv_curve"] = cumulative_curve(self.kv_groups[l])
            if self.mamba_heads[l] is not None:
                e["mamba_curve"] = rowwise_curve(self.mamba_heads[l].view(self.groups[l], -1))
            if self.ffn_channels[l] is not None:
                e["ffn_curve"] = cumulative_curve(self.ffn_channels[l])
            if self.experts[l] is not None:
                e["ffn_curve"] = cumulative_curve(self.experts[l])
                e["width_curve"] = rowwise_curve(self.expert_channels[l])
                e["expert_mass"] = [round(float(x), 6) for x in self.expert_mass[l]]
            layers.append(e)
        return {"version": IMPORTANCE_VERSION, "tokens": self.tokens, "weights": "removal_kl" if ablated else "cosine",
                "layers": layers, "hidden_curve": cumulative_curve(self.hidden_channels)}

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=1) + "\n").encode())
        return path


class Accumulator:
    """The ``tap`` of the statistics pass: ``reduce`` one event's contribution, ``add`` it to the sums."""

    def __init__(self, cfg: HybridConfig):
        A, f64 = cfg.arch, torch.float64
        z = lambda n: torch.zeros(n, dtype=f64)  # noqa: E731
        self.cfg, self.tokens = cfg, 0
        self.hidden = z(A.hidden_size)
        self.ffn = [z(b.ffn.width) if isinstance(b.ffn, MLP) else None for b in A.blocks]
        self.heads = [z(b.mixer.q_heads) if isinstance(b.mixer, Attention) else None for b in A.blocks]
        self.mamba = [z(b.mixer.heads) if isinstance(b.mixer, Mamba2) else None for b in A.blocks]
        moe = [b.ffn if isinstance(b.ffn, MoE) else None for b in A.blocks]
        self.e_score = [None if m is None else z(m.experts) for m in moe]
        self.e_count = [None if m is None else z(m.experts) for m in moe]
        self.e_mass = [None if m is None else z(m.experts) for m in moe]
        self.e_chan = [None if m is None else torch.zeros(m.experts, m.expert_width, dtype=f64) for m in moe]
        self.block, self.attn, self.ffn_bi = z(A.num_layers), z(A.num_layers), z(A.num_layers)

    @staticmethod
    def _cos(before, after) -> float:
        return float((1.0 - torch.nn.functional.cosine_similarity(before.double(), after.double(), dim=-1)).sum())

    @staticmethod
    def reduce(event: str, *t):
        """One tap event's contribution to the sums (float64), before it is added; None: not summed."""
        if event in ("norm", "ffn_act"):
            return t[0].abs().double().sum(dim=(0, 1))
        if event in ("heads", "mamba_heads"):
            return t[0].double().norm(dim=-1).sum(dim=(0, 1))
        if event == "router":
            return t[0].double().sum(0)
        if event in ("attn", "ffn", "block"):
            return Accumulator._cos(*t)
        return None

    def add(self, event: str, layer: int, c) -> None:
        if event == "norm":
            self.hidden += c
        elif event == "ffn_act":
            self.ffn[layer] += c
        elif event == "heads":
            self.heads[layer] += c
        elif event == "mamba_heads":
            self.mamba[layer] += c
        elif event == "router":
            self.e_mass[layer] += c
        elif event in ("attn", "ffn", "block"):
            target = {"attn": self.attn, "ffn": self.ffn_bi, "block": self.block}[event]
            target[layer] += c

    def __call__(self, event: str, layer: int, *t) -> None:
        if event == "expert":
            e, w, z, y = t
            w = w.double()
            self.e_score[layer][e] += float((w * y.double().norm(dim=-1)).sum())
            self.e_count[layer][e] += len(w)
            self.e_chan[layer][e] += (w[:, None] * z.double().abs()).sum(0)
            return
        c = self.reduce(event, *t)
        if c is not None:
            self.add(event, layer, c)

    def stats(self) -> ImportanceStats:
        n = max(self.tokens, 1)
        f32 = lambda x: None if x is None else (x / n).float()  # noqa: E731
        A = self.cfg.arch
        heads = [f32(h) for h in self.heads]
        # query head h is in group h // (H / K)
        kv = [None if h is None else h.view(b.mixer.kv_heads, -1).sum(-1) for h, b in zip(heads, A.blocks)]
        reap = [None if s is None else (s / c.clamp_min(1)).float() for s, c in zip(self.e_score, self.e_count)]
        mass = [None if m is None else (m / m.sum().clamp_min(1e-12)).float() for m in self.e_mass]
        chan = [None if c is None else (c / k.clamp_min(1)[:, None]).float() for c, k in zip(self.e_chan, self.e_count)]
        groups = tuple(b.mixer.groups if isinstance(b.mixer, Mamba2) else 0 for b in A.blocks)
        return ImportanceStats(f32(self.hidden), tuple(f32(f) for f in self.ffn), tuple(heads), tuple(kv),
                               tuple(f32(m) for m in self.mamba), tuple(reap), tuple(mass), tuple(chan),
                               f32(self.block), f32(self.attn), f32(self.ffn_bi), self.tokens, groups)


@torch.no_grad()
def collect_importance(params: Mapping[str, torch.Tensor], cfg: HybridConfig, batches: Iterable[torch.Tensor],
                       progress=None) -> ImportanceStats:
    """Importance of the parent over calibration batches of token ids (B, T); ``progress(i)`` per batch.

    Every position counts as a real token (pack or chunk documents; no padding masks). Statistics are
    means over all tokens of all batches, so batches may differ in shape.
    """
    acc = Accumulator(cfg)
    batches = list(batches)
    if dist.active() and not any(isinstance(b.ffn, MoE) for b in cfg.arch.blocks):
        _collect_shared(params, cfg, batches, acc, progress)
        return acc.stats()
    for i, ids in enumerate(batches):
        forward(params, cfg, ids, tap=acc, return_hidden=True)  # logits are not needed
        acc.tokens += ids.numel()
        if progress:
            progress(i)
    if acc.tokens == 0:
        raise ValueError("no calibration tokens")
    return acc.stats()


def _collect_shared(params, cfg: HybridConfig, batches: list[torch.Tensor], acc: Accumulator, progress) -> None:
    """``collect_importance`` under a launcher: each rank records the contributions of its share of
    the batches, every rank gathers all of them and adds them in the single-process order (an
    all-reduce of per-rank sums would add in another order and change the last bits)."""
    def recorder(out: list):
        def tap(event, layer, *t):
            c = acc.reduce(event, *t)
            if c is not None:
                out.append((event, layer, torch.as_tensor(c, dtype=torch.float64).reshape(-1)))
        return tap

    probe: list = []  # the layout from a one-token forward: a rank with no batch knows it too
    forward(params, cfg, batches[0][:1, :1], tap=recorder(probe), return_hidden=True)
    layout = [(e, l, len(c)) for e, l, c in probe]  # (event, layer, length) of one batch's contributions
    mine = []
    for i in dist.share(len(batches)):
        rec: list = []
        forward(params, cfg, batches[i], tap=recorder(rec), return_hidden=True)
        mine.append(torch.cat([c for _, _, c in rec]))
        if progress:
            progress(i)
    width = sum(n for _, _, n in layout)
    rows = dist.gather_rows(torch.stack(mine) if mine else torch.zeros(0, width, dtype=torch.float64), len(batches))
    if progress:  # the other ranks' batches are done too
        for i in sorted(set(range(len(batches))) - set(dist.share(len(batches)))):
            progress(i)
    for row, ids in zip(rows, batches):
        parts = row.split([n for _, _, n in layout])
        for (event, layer, n), c in zip(layout, parts):
            acc.add(event, layer, c if event in _TENSOR_EVENTS else float(c))
        acc.tokens += ids.numel()


def without(cfg: HybridConfig, layer: int, part: str) -> HybridConfig:
    """The config with one layer's mixer (``part="mixer"``) or FFN removed."""
    blocks = list(cfg.arch.blocks)
    b = blocks[layer]
    blocks[layer] = Block(None, b.ffn) if part == "mixer" else Block(b.mixer, None)
    return replace(cfg, arch=cfg.arch.with_blocks(tuple(blocks)))


@torch.no_grad()
def ablation_influence(params: Mapping[str, torch.Tensor], cfg: HybridConfig, batches: Iterable[torch.Tensor],
                       progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mixer, ffn) per layer: mean over tokens of KL(parent || parent with that sub-block removed).

    2L + 1 forwards per batch; 0 where the parent has no such sub-block. ``progress(done, total)``."""
    batches = list(batches)
    ref = [log_softmax(forward(params, cfg, ids).float(), dim=-1) for ids in batches]
    out = torch.zeros(2, cfg.num_layers, dtype=torch.float64)
    tokens = sum(ids.numel() for ids in batches)
    todo = [(0, l) for l, b in enumerate(cfg.arch.blocks) if b.mixer is not None] + \
           [(1, l) for l, b in enumerate(cfg.arch.blocks) if b.ffn is not None]
    done = [0]

    def removal_kl(item) -> float:  # summed over batches in order
        kind, l = item
        ablated = without(cfg, l, "ffn" if kind else "mixer")
        total = torch.zeros((), dtype=torch.float64)
        for ids, lp in zip(batches, ref):
            lq = log_softmax(forward(params, ablated, ids).float(), dim=-1)
            total += float((lp.exp() * (lp - lq)).sum())
        done[0] += 1
        if progress:
            progress(done[0], len(dist.share(len(todo))))
        return float(total)

    for (kind, l), v in zip(todo, dist.map_shared(removal_kl, todo)):  # sub-blocks split over the ranks
        out[kind, l] = v
    out /= max(tokens, 1)
    return out[0].float(), out[1].float()


def measure_importance(params: Mapping[str, torch.Tensor], cfg: HybridConfig, rows: torch.Tensor, batch: int,
                       ablation_rows: int, progress) -> ImportanceStats:
    """The importance stage (``families.base``): channel statistics over ``rows`` [n, T + 1] and the
    removal KL of every sub-block over the first ``ablation_rows`` of them (the objective's per-layer
    weights)."""
    batches = [rows[i:i + batch, :-1] for i in range(0, len(rows), batch)]
    with torch.no_grad():
        with progress.task("importance", total=len(batches), unit="batch") as bar:
            stats = collect_importance(params, cfg, batches, lambda i: bar.advance())
        few = batches[: max(1, ablation_rows // batch)]
        n = sum(len(b) for b in few)
        with progress.task(f"removal KL ({n} sequences)", unit="forward") as bar:
            def step(done, total):
                bar.state.total = total
                bar.advance(done - bar.state.done)
            attn_kl, ffn_kl = ablation_influence(params, cfg, few, step)
    return replace(stats, attention_removal=attn_kl, ffn_removal=ffn_kl)


__all__ = ["IMPORTANCE_VERSION", "Accumulator", "ImportanceStats", "ablation_influence", "collect_importance",
           "cumulative_curve", "measure_importance", "rowwise_curve", "without"]
