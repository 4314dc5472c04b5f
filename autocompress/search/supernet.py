"""The weight-sharing supernet: ``nn.hybrid.forward`` under masks over the permuted parent's weights.

Every candidate keeps a *prefix* of the permuted parent's channels, KV groups, experts and hidden
channels (``prune.permute``: FFN width w keeps channels [0, w), hidden d' keeps [0, d'), k KV heads
pool the parent's, e experts keep the first e).

**Choices** (``Choices``): probability vectors, soft (differentiable search) or one-hot (hard), laid out
exactly like the search's router probabilities and ``plan.options.LayerOptions``:

* ``hidden`` (G,): over ``space.hidden_grid`` (descending, the parent's size first);
* ``attn`` (L, A): per layer over ``options.attn[l]`` = (0 = removed, kv choice, ..., the parent's kv);
* ``ffn`` (L, F): per layer over ``options.ffn[l]`` = (0 = removed, width or expert count, ..., the
  parent's). Columns beyond a layer's option count (padding) must be 0; a layer without that
  sub-block ignores its row.

The global sizes the format keeps equal in every layer (Mamba2 heads, expert width: the *variant*,
``feasibility.variants``) are not soft choices: the supernet is built for one variant and slices
them once (``prune.extract.extract`` with the variant's sizes), so every architecture it decodes
has the variant's global sizes.

**Masked forward** (``nn.hybrid.HybridMasks``):

* FFN: the full intermediate is computed once and multiplied by c = sum_o p_o [channel < w_o]; the output
  is linear in c, so this *is* the p-weighted mixture of the option FFNs (removed: c = 0).
* attention: Q, K, V are projected once; per KV option the keys / values are pooled (cheap einsum) and
  one SDPA runs; the head outputs are mixed with the option weights before the (linear) ``o``.
  Options whose weight is exactly 0 are skipped unless the weights need gradients.
* MoE: option o keeps the first k_o experts; the routing weights of the options are mixed
  (``nn.moe.mixed_route``), which is the probability-weighted mixture of the option layers.
* hidden: the residual stream is multiplied by m = sum_g p_g [channel < d_g] and RMSNorm divides by the
  expected count n = sum_g p_g d_g. For one-hot p this is exactly the model of width d_g (and equals the
  extracted student, ``prune.extract``); for soft p it is a relaxation (not the mixture of the
  width options, which would need one forward each): smooth in p and exact at the vertices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from autocompress.ir import MLP, Architecture, Attention, Block, MoE
from autocompress.nn.hybrid import AttnOption, HybridConfig, HybridMasks, forward
from autocompress.plan.options import layer_options
from autocompress.prune.extract import extract
from autocompress.prune.permute import pool_matrix


@dataclass(frozen=True)
class Choices:
    """Probability vectors over the options (module docstring); one-hot for a discrete architecture."""

    hidden: torch.Tensor  # (G,)
    attn: torch.Tensor  # (L, A)
    ffn: torch.Tensor  # (L, F)

    @classmethod
    def of(cls, choices: "Choices | Sequence[torch.Tensor]") -> "Choices":
        return choices if isinstance(choices, Choices) else cls(*choices)


class Supernet:
    """``Supernet(permuted, cfg, space, variant)``; ``forward(input_ids, choices) -> logits``.

    The parameters are the parent's (permuted) and are never trained here; gradients flow to the
    choice probabilities (the caller leaves ``requires_grad`` off on the parameters), and to router
    v2's adapters when it passes adapted weights (``forward(..., params=)``).
    """

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
        # columns a layer does not have (padding up to the widest layer) must carry no weight
        self._n_attn = torch.tensor([len(o) for o in self.options.attn])
        self._n_ffn = torch.tensor([len(o) for o in self.options.ffn])

    @property
    def num_layers(self) -> int:
        return self.cfg.num_layers

    def indices_of(self, arch: Architecture) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(hidden index, attention option per layer, FFN option per layer) of a discrete architecture."""
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
        """The discrete architecture of option indices (as the router decodes them)."""
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
        L = self.num_layers
        if ph.shape != (len(self.hidden_grid),) or pa.shape[0] != L or pf.shape[0] != L:
            raise ValueError(f"choices of shapes {tuple(ph.shape)}, {tuple(pa.shape)}, {tuple(pf.shape)}; "
                             f"expected ({len(self.hidden_grid)},), ({L}, A), ({L}, F)")
        for kind, p, n in (("attn", pa, self._n_attn), ("ffn", pf, self._n_ffn)):
            pad = torch.arange(p.shape[1])[None, :] >= n.clamp_min(1)[:, None]
            if (p.detach()[pad] != 0).any():
                raise ValueError(f"{kind} choices put weight on options a layer does not have (padding columns)")
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
        return forward(self.params if params is None else params, self.cfg, input_ids, self.masks(choices), tap=tap,
                       return_hidden=return_hidden, start=start)

    __call__ = forward


__all__ = ["Choices", "Supernet"]
