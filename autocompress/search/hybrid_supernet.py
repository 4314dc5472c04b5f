"""The weight-sharing supernet of the hybrid / MoE families: ``nn.hybrid.forward`` under masks.

Same choices and layout as ``search.supernet`` (``Choices``: hidden grid, per-layer attention
and FFN options from ``plan.options``), with MoE layers' FFN options being expert counts
(0 = removed, ..., the parent's). The global sizes the format keeps equal in every layer (Mamba2
heads, expert width: the *variant*, ``feasibility.variants``) are not soft choices: the supernet
is built for one variant and slices them once (``hybrid_extract.extract`` with the variant's
sizes), so every architecture it decodes has the variant's global sizes.

Masked forward (``nn.hybrid.HybridMasks``):

* hidden, dense FFN channels, KV-head options: as ``search.supernet`` (exact at one-hot choices);
* MoE: option o keeps the first k_o experts; the routing weights of the options are mixed
  (``nn.moe.mixed_route``), which is the probability-weighted mixture of the option layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from autocompress.prune.hybrid_extract import extract
from autocompress.prune.permute import pool_matrix
from autocompress.search.supernet import Choices
from autocompress.ir import MLP, Architecture, Attention, Block, MoE
from autocompress.nn.hybrid import HybridConfig, HybridMasks, forward
from autocompress.nn.llama import AttnOption
from autocompress.plan.options import layer_options


class HybridSupernet:
    """``HybridSupernet(permuted, cfg, space, variant)``; ``forward(input_ids, choices) -> logits``."""

    def __init__(self, permuted, cfg: HybridConfig, space, variant: Architecture | None = None):
        variant = variant or cfg.arch
        if variant.hidden_size != cfg.arch.hidden_size:
            raise ValueError("the variant keeps the parent's hidden size (hidden is a choice of the supernet)")
        self.params = extract(permuted, cfg, variant)[0] if variant != cfg.arch else dict(permuted)
        self.cfg: HybridConfig = replace(cfg, arch=variant)
        self.hidden_grid = tuple(space.hidden_grid)
        d = variant.hidden_size
        if max(self.hidden_grid) > d:
            raise ValueError(f"hidden grid {self.hidden_grid} exceeds the parent's {d}")
        self.options = layer_options(variant, space)
        self._hid_ind = (torch.arange(d)[None, :] < torch.tensor(self.hidden_grid)[:, None]).float()
        self._hid_n = torch.tensor(self.hidden_grid, dtype=torch.float32)
        blocks = variant.blocks
        self._ffn_ind = [(torch.arange(b.ffn.width)[None, :] < torch.tensor(o)[:, None]).float()
                         if o and isinstance(b.ffn, MLP) else None for o, b in zip(self.options.ffn, blocks)]
        self._pools = [None if not o else [None if k == b.mixer.kv_heads else pool_matrix(b.mixer.q_heads,
                                                                                         b.mixer.kv_heads, k)
                                           for k in o[1:]] for o, b in zip(self.options.attn, blocks)]

    @property
    def num_layers(self) -> int:
        return self.cfg.num_layers

    def indices_of(self, arch: Architecture) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        if arch.num_layers != self.num_layers:
            raise ValueError(f"{arch.num_layers} blocks, the parent has {self.num_layers}")
        ca, cf = [], []
        for l, (b, v) in enumerate(zip(arch.blocks, self.cfg.arch.blocks)):
            if isinstance(b.mixer, Attention):
                ca.append(self.options.attn[l].index(b.attention.kv_heads))
            else:
                if b.mixer != v.mixer and not (b.mixer is None and self.options.attn[l]):
                    raise ValueError(f"block {l}: {b.mixer} is not this supernet's (variant {v.mixer})")
                ca.append(0)
            if isinstance(b.ffn, MoE) and b.ffn.expert_width != v.ffn.expert_width:
                raise ValueError(f"block {l}: expert width {b.ffn.expert_width}, the variant's is {v.ffn.expert_width}")
            size = b.ffn.width if isinstance(b.ffn, MLP) else b.ffn.experts if isinstance(b.ffn, MoE) else 0
            cf.append(self.options.ffn[l].index(size) if size else 0)
        return self.hidden_grid.index(arch.hidden_size), tuple(ca), tuple(cf)

    def one_hot(self, arch_or_indices) -> Choices:
        h, ca, cf = self.indices_of(arch_or_indices) if isinstance(arch_or_indices, Architecture) else arch_or_indices
        L = self.num_layers
        A = max(1, max(map(len, self.options.attn)))
        F = max(1, max(map(len, self.options.ffn)))
        ph, pa, pf = torch.zeros(len(self.hidden_grid)), torch.zeros(L, A), torch.zeros(L, F)
        ph[h] = 1
        pa[torch.arange(L), torch.tensor(ca)] = 1
        pf[torch.arange(L), torch.tensor(cf)] = 1
        return Choices(ph, pa, pf)

    def architecture(self, h: int, ca: Sequence[int], cf: Sequence[int], name: str = "") -> Architecture:
        blocks = []
        for l, v in enumerate(self.cfg.arch.blocks):
            m, f = v.mixer, v.ffn
            if self.options.attn[l]:
                k = self.options.attn[l][ca[l]]
                m = replace(m, kv_heads=k) if k else None
            if self.options.ffn[l]:
                w = self.options.ffn[l][cf[l]]
                f = None if not w else replace(f, width=w) if isinstance(f, MLP) else replace(f, experts=w)
            blocks.append(Block(m, f))
        return self.cfg.arch.with_blocks(tuple(blocks), hidden_size=self.hidden_grid[h], name=name or self.cfg.arch.name)

    def masks(self, choices) -> HybridMasks:
        c = Choices.of(choices)
        ph, pa, pf = c.hidden, c.attn, c.ffn
        hidden = count = None
        if self.hidden_grid != (self.cfg.arch.hidden_size,):
            hidden, count = ph @ self._hid_ind, ph @ self._hid_n
        need_all = pa.requires_grad or pf.requires_grad  # straight-through: zero-weight options still count
        ffn, attn, moe = [], [], []
        for l, b in enumerate(self.cfg.arch.blocks):
            pools = self._pools[l]
            attn.append(None if pools is None else tuple(
                AttnOption(pa[l, o + 1], pool) for o, pool in enumerate(pools)
                if need_all or float(pa[l, o + 1]) != 0.0))
            opts, ind = self.options.ffn[l], self._ffn_ind[l]
            ffn.append(None if ind is None else pf[l, :ind.shape[0]] @ ind)
            moe.append(tuple((pf[l, o], e) for o, e in enumerate(opts) if e and (need_all or float(pf[l, o]) != 0.0))
                       if opts and isinstance(b.ffn, MoE) else None)
        return HybridMasks(hidden, count, tuple(ffn), tuple(attn), tuple(moe))

    def forward(self, input_ids, choices, return_hidden: bool = False, start=None, tap=None, params=None
                ) -> torch.Tensor:
        """``params``: other weights of the same names and shapes (router v2's adapted temporaries)."""
        return forward(self.params if params is None else params, self.cfg, input_ids, self.masks(choices), tap=tap, return_hidden=return_hidden,
                       start=start)

    __call__ = forward


__all__ = ["HybridSupernet"]
