"""Importance of the hybrid / MoE parents' channels, heads, experts and sub-blocks.

One pass of ``nn.hybrid.forward`` with a tap over the calibration batches (sums in float64, then
means), plus the removal KL of every sub-block, as ``prune.importance`` does for Llama:

* hidden channels, dense FFN channels, query heads / KV groups, cosine influences: as for Llama;
* **experts** (REAP, Lasby et al. 2025, "router-weighted expert activation pruning"): the mean,
  over the tokens routed to expert e, of its routing weight times the L2 norm of its output,
  g_e(x) ||f_e(x)||; the routing mass (share of all routing weight) is kept for the report;
* **expert channels**: per expert, the routing-weighted mean |z_c| of its intermediate channel c
  over its tokens (Minitron's neuron importance inside each expert);
* **Mamba2 heads**: the mean L2 norm of each head's normed, gated output (what ``out_proj`` reads,
  the analogue of an attention head's output); ranked within each group (``hybrid_permute``);
* sub-block removal: KL(parent || parent without that mixer or FFN) per token.

``HybridStats.to_dict`` writes the importance file of ``feasibility.objective`` with two more
curves: ``mamba_curve`` (share kept by the best heads of every group at each fraction) and
``width_curve`` (share kept by the first channels of every expert). A MoE layer's ``ffn_curve``
is over its experts, the size the relaxation varies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.nn.functional import log_softmax

from autocompress.cache import atomic_write_bytes
from autocompress.feasibility.objective import SEGMENTS
from autocompress.ir import MLP, Attention, Block, Mamba2, MoE
from autocompress.nn.hybrid import HybridConfig, forward
from autocompress.prune.importance import IMPORTANCE_VERSION, cumulative_curve


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
class HybridStats:
    """Per-layer tuples hold None where the parent's layer has no such sub-block."""

    hidden_channels: torch.Tensor
    ffn_channels: tuple
    head_scores: tuple
    kv_groups: tuple
    mamba_heads: tuple  # (H,) per Mamba2 layer
    experts: tuple  # (E,) REAP score per MoE layer
    expert_mass: tuple  # (E,) share of the routing weight
    expert_channels: tuple  # (E, I) per MoE layer
    layer_influence: torch.Tensor
    attention_influence: torch.Tensor  # the mixer's (attention or Mamba2)
    ffn_influence: torch.Tensor
    tokens: int
    groups: tuple = ()  # Mamba2 groups per layer (0 elsewhere), for the group-aware curve
    attention_removal: torch.Tensor | None = None
    ffn_removal: torch.Tensor | None = None

    def to_dict(self) -> dict:
        layers = []
        ablated = self.attention_removal is not None
        for l in range(len(self.ffn_channels)):
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

    def to_json(self, path) -> Path:
        atomic_write_bytes(Path(path), (json.dumps(self.to_dict(), indent=1) + "\n").encode())
        return Path(path)


class _Accumulator:
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

    def __call__(self, event: str, layer: int, *t) -> None:
        if event == "norm":
            self.hidden += t[0].abs().double().sum(dim=(0, 1))
        elif event == "ffn_act":
            self.ffn[layer] += t[0].abs().double().sum(dim=(0, 1))
        elif event == "heads":
            self.heads[layer] += t[0].double().norm(dim=-1).sum(dim=(0, 1))
        elif event == "mamba_heads":
            self.mamba[layer] += t[0].double().norm(dim=-1).sum(dim=(0, 1))
        elif event == "router":
            self.e_mass[layer] += t[0].double().sum(0)
        elif event == "expert":
            e, w, z, y = t
            w = w.double()
            self.e_score[layer][e] += float((w * y.double().norm(dim=-1)).sum())
            self.e_count[layer][e] += len(w)
            self.e_chan[layer][e] += (w[:, None] * z.double().abs()).sum(0)
        elif event in ("attn", "ffn", "block"):
            target = {"attn": self.attn, "ffn": self.ffn_bi, "block": self.block}[event]
            target[layer] += self._cos(*t)

    def stats(self) -> HybridStats:
        n = max(self.tokens, 1)
        f32 = lambda x: None if x is None else (x / n).float()  # noqa: E731
        A = self.cfg.arch
        heads = [f32(h) for h in self.heads]
        kv = [None if h is None else h.view(b.mixer.kv_heads, -1).sum(-1) for h, b in zip(heads, A.blocks)]
        reap = [None if s is None else (s / c.clamp_min(1)).float() for s, c in zip(self.e_score, self.e_count)]
        mass = [None if m is None else (m / m.sum().clamp_min(1e-12)).float() for m in self.e_mass]
        chan = [None if c is None else (c / k.clamp_min(1)[:, None]).float() for c, k in zip(self.e_chan, self.e_count)]
        groups = tuple(b.mixer.groups if isinstance(b.mixer, Mamba2) else 0 for b in A.blocks)
        return HybridStats(f32(self.hidden), tuple(f32(f) for f in self.ffn), tuple(heads), tuple(kv),
                           tuple(f32(m) for m in self.mamba), tuple(reap), tuple(mass), tuple(chan),
                           f32(self.block), f32(self.attn), f32(self.ffn_bi), self.tokens, groups)


def without(cfg: HybridConfig, layer: int, part: str) -> HybridConfig:
    """The config with one layer's mixer (``part="mixer"``) or FFN removed."""
    blocks = list(cfg.arch.blocks)
    b = blocks[layer]
    blocks[layer] = Block(None, b.ffn) if part == "mixer" else Block(b.mixer, None)
    return replace(cfg, arch=cfg.arch.with_blocks(tuple(blocks)))


@torch.no_grad()
def measure_importance(params, cfg: HybridConfig, rows: torch.Tensor, batch: int, ablation_rows: int,
                       progress) -> HybridStats:
    """The importance stage (``families.base``): statistics over ``rows`` [n, T + 1], removal KL
    of every sub-block over the first ``ablation_rows`` of them."""
    batches = [rows[i:i + batch, :-1] for i in range(0, len(rows), batch)]
    acc = _Accumulator(cfg)
    with progress.task("importance", total=len(batches), unit="batch") as bar:
        for ids in batches:
            forward(params, cfg, ids, tap=acc, return_hidden=True)
            acc.tokens += ids.numel()
            bar.advance()
    stats = acc.stats()
    few = batches[: max(1, ablation_rows // batch)]
    ref = [log_softmax(forward(params, cfg, ids).float(), dim=-1) for ids in few]
    L = cfg.num_layers
    kl = torch.zeros(2, L, dtype=torch.float64)
    todo = [(0, l) for l, b in enumerate(cfg.arch.blocks) if b.mixer is not None] + \
           [(1, l) for l, b in enumerate(cfg.arch.blocks) if b.ffn is not None]
    with progress.task(f"removal KL ({sum(len(b) for b in few)} sequences)", total=len(todo), unit="forward") as bar:
        for kind, l in todo:
            ablated = without(cfg, l, "ffn" if kind else "mixer")
            for ids, lp in zip(few, ref):
                lq = log_softmax(forward(params, ablated, ids).float(), dim=-1)
                kl[kind, l] += float((lp.exp() * (lp - lq)).sum())
            bar.advance()
    kl /= max(sum(ids.numel() for ids in few), 1)
    return replace(stats, attention_removal=kl[0].float(), ffn_removal=kl[1].float())


__all__ = ["HybridStats", "measure_importance", "rowwise_curve", "without"]
