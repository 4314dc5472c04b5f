"""Activation-based importance of the parent's channels, heads, sub-layers and layers (Minitron, ShortGPT).

One pass of the functional forward (``autocompress.nn.llama``) over the caller's calibration batches; the
forward's ``tap`` hands every activation to an accumulator (sums in float64, divided by the token count):

* FFN channel c of layer l: mean over tokens of |act(gate) * up|_c (Minitron's neuron importance);
* query head h: mean over tokens of the L2 norm of its attention output before o_proj (Minitron's head
  importance); a KV group scores the sum over its query heads (all of them share the group's K/V);
* hidden channel c: sum over every RMSNorm output (pre-attention, pre-FFN, final) of mean |y_c|
  (Minitron's embedding-channel importance, aggregated over the LayerNorms);
* layer l: block influence 1 - cos(layer input, layer output), mean over tokens (ShortGPT); the same for
  the attention and the FFN residual branches alone (the cosine sub-layer influence);
* sub-layer removal cost (``ablation_influence``): KL(parent || parent without that one attention or FFN
  sub-block) per token on a few calibration batches, one extra forward per sub-block. Minitron ranks depth
  by the loss when a layer is dropped, not by activations: the cosine influence values an attention
  sub-block at ~1/3 of an FFN on SmolLM2 (attention moves tokens between positions, changing the residual
  little per position) and the search kept attention in 4 of 30 layers; removal KL measures what the
  objective needs, what is lost when the sub-block goes.

``ImportanceStats.to_json`` writes the importance file the feasibility stage reads
(``autocompress.feasibility.objective.load_importance``): per layer the removal KLs (or, without them, the
cosine influences) as the attention / FFN weights and cumulative-share curves over sorted KV-group and FFN-channel importances,
plus the hidden-channel curve, each sampled at SEGMENTS + 1 evenly spaced keep fractions.
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
from autocompress.nn.llama import LlamaConfig, forward

IMPORTANCE_VERSION = 2  # 2: attention / FFN weights are removal KLs (ablation_influence)


@dataclass(frozen=True)
class ImportanceStats:
    """Per-layer tuples hold None where the parent's layer has no such sub-block."""

    ffn_channels: tuple[torch.Tensor | None, ...]  # (I_l,) mean |act(gate) * up|
    head_scores: tuple[torch.Tensor | None, ...]  # (H,) mean L2 norm of each head's output
    kv_groups: tuple[torch.Tensor | None, ...]  # (K_l,) sum of head_scores over the group's query heads
    hidden_channels: torch.Tensor  # (d,) summed over all RMSNorm outputs
    layer_influence: torch.Tensor  # (L,) 1 - cos(block input, block output)
    attention_influence: torch.Tensor  # (L,) 1 - cos(x, x + attn(x)); 0 without attention
    ffn_influence: torch.Tensor  # (L,) 1 - cos(x, x + ffn(x)); 0 without FFN
    tokens: int
    attention_removal: torch.Tensor | None = None  # (L,) KL(parent || without layer l's attention), per token
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
            entry = {"attention": float(a), "ffn": float(f), "attention_cos": float(self.attention_influence[l]),
                     "ffn_cos": float(self.ffn_influence[l])}
            if self.kv_groups[l] is not None:
                entry["kv_curve"] = cumulative_curve(self.kv_groups[l])
            if self.ffn_channels[l] is not None:
                entry["ffn_curve"] = cumulative_curve(self.ffn_channels[l])
            entry["block"] = float(self.layer_influence[l])
            layers.append(entry)
        return {"version": IMPORTANCE_VERSION, "tokens": self.tokens, "weights": "removal_kl" if ablated else "cosine",
                "layers": layers,
                "hidden_curve": cumulative_curve(self.hidden_channels)}

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=1) + "\n").encode())
        return path


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


class _Accumulator:
    def __init__(self, cfg: LlamaConfig):
        L, f64 = cfg.num_layers, torch.float64
        self.cfg = cfg
        self.ffn = [None if w is None else torch.zeros(w, dtype=f64) for w in cfg.ffn_widths]
        self.heads = [None if k is None else torch.zeros(cfg.num_heads, dtype=f64) for k in cfg.kv_heads]
        self.hidden = torch.zeros(cfg.hidden_size, dtype=f64)
        self.block = torch.zeros(L, dtype=f64)
        self.attn = torch.zeros(L, dtype=f64)
        self.ffn_bi = torch.zeros(L, dtype=f64)
        self.tokens = 0

    @staticmethod
    def _influence(before: torch.Tensor, after: torch.Tensor) -> float:
        cos = torch.nn.functional.cosine_similarity(before.double(), after.double(), dim=-1)
        return float((1.0 - cos).sum())

    def reduce(self, event: str, *t: torch.Tensor) -> torch.Tensor | float | None:
        """One tap event's contribution to the sums (float64), before it is added."""
        if event == "norm" or event == "ffn_act":
            return t[0].abs().double().sum(dim=(0, 1))
        if event == "heads":
            return t[0].double().norm(dim=-1).sum(dim=(0, 1))
        if event in ("attn", "ffn", "block"):
            return self._influence(*t)
        return None

    def add(self, event: str, layer: int, c) -> None:
        if event == "norm":
            self.hidden += c
        elif event == "ffn_act":
            self.ffn[layer] += c
        elif event == "heads":
            self.heads[layer] += c
        elif event == "attn":
            self.attn[layer] += c
        elif event == "ffn":
            self.ffn_bi[layer] += c
        elif event == "block":
            self.block[layer] += c

    def __call__(self, event: str, layer: int, *t: torch.Tensor) -> None:
        c = self.reduce(event, *t)
        if c is not None:
            self.add(event, layer, c)

    def stats(self) -> ImportanceStats:
        n = max(self.tokens, 1)
        cfg = self.cfg
        f32 = lambda x: None if x is None else (x / n).float()  # noqa: E731
        heads = [f32(h) for h in self.heads]
        kv = [None if h is None else h.view(k, cfg.num_heads // k).sum(-1)  # q head h is in group h // (H/K)
              for h, k in zip(heads, cfg.kv_heads)]
        return ImportanceStats(tuple(f32(f) for f in self.ffn), tuple(heads), tuple(kv), f32(self.hidden),
                               f32(self.block), f32(self.attn), f32(self.ffn_bi), self.tokens)


@torch.no_grad()
def collect_importance(params: Mapping[str, torch.Tensor], cfg: LlamaConfig, batches: Iterable[torch.Tensor],
                       progress=None) -> ImportanceStats:
    """Importance of the parent over calibration batches of token ids (B, T); ``progress(i)`` per batch.

    Every position counts as a real token (pack or chunk documents; no padding masks). Statistics are
    means over all tokens of all batches, so batches may differ in shape.
    """
    acc = _Accumulator(cfg)
    if dist.active():
        _collect_shared(params, cfg, list(batches), acc, progress)
        return acc.stats()
    for i, ids in enumerate(batches):
        forward(params, cfg, ids, tap=acc, return_hidden=True)  # logits are not needed
        acc.tokens += ids.numel()
        if progress:
            progress(i)
    if acc.tokens == 0:
        raise ValueError("no calibration tokens")
    return acc.stats()


def _collect_shared(params, cfg: LlamaConfig, batches: list[torch.Tensor], acc: _Accumulator, progress) -> None:
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
            acc.add(event, layer, c if event in ("norm", "ffn_act", "heads") else float(c))
        acc.tokens += ids.numel()


@torch.no_grad()
def ablation_influence(params: Mapping[str, torch.Tensor], cfg: LlamaConfig, batches: Iterable[torch.Tensor],
                       progress=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention, ffn) per layer: mean over tokens of KL(parent || parent with that sub-block removed).

    2L + 1 forwards per batch; 0 where the parent has no such sub-block. ``progress(done, total)``."""
    batches = list(batches)
    ref = [log_softmax(forward(params, cfg, ids).float(), dim=-1) for ids in batches]
    L = cfg.num_layers
    out = torch.zeros(2, L, dtype=torch.float64)
    tokens = sum(ids.numel() for ids in batches)
    todo = [(0, l) for l in range(L) if cfg.kv_heads[l] is not None] + \
           [(1, l) for l in range(L) if cfg.ffn_widths[l] is not None]
    done = [0]

    def removal_kl(item) -> float:  # summed over batches in order, as out[kind, l] += ... did
        kind, l = item
        without = tuple(None if i == l else v for i, v in enumerate(cfg.ffn_widths if kind else cfg.kv_heads))
        ablated = replace(cfg, **{"ffn_widths" if kind else "kv_heads": without})
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


def measure_importance(params: Mapping[str, torch.Tensor], cfg: LlamaConfig, rows: torch.Tensor, batch: int,
                       ablation_rows: int, progress) -> ImportanceStats:
    """The importance stage: channel statistics over ``rows`` [n, T + 1] and the removal KL of every
    sub-block over the first ``ablation_rows`` of them (the objective's per-layer weights)."""
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
