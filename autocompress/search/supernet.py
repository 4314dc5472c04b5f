"""The weight-sharing supernet: a masked forward over the permuted parent's weights.

Every candidate keeps a *prefix* of the permuted parent's channels, KV groups and hidden channels
(``permute``: FFN width w keeps channels [0, w), hidden d' keeps [0, d'), k KV heads pool the parent's).

**Choices** (``Choices``): probability vectors, soft (differentiable search) or one-hot (hard), laid out
exactly like the search's ``Router.probs`` and ``plan.options.LayerOptions``:

* ``hidden`` (G,): over ``space.hidden_grid`` (descending, the parent's size first);
* ``attn`` (L, A): per layer over ``options.attn[l]`` = (0 = removed, kv choice, ..., the parent's kv);
* ``ffn`` (L, F): per layer over ``options.ffn[l]`` = (0 = removed, width, ..., the parent's width).
  Columns beyond a layer's option count (padding) must be 0; a layer without that sub-block ignores its row.

**Masked forward** (``Supernet.forward``), through ``nn.llama.forward``'s ``Masks``:

* FFN: the full intermediate is computed once and multiplied by c = sum_o p_o [channel < w_o]; the output
  is linear in c, so this *is* the p-weighted mixture of the option FFNs (removed: c = 0).
* attention: Q, K, V are projected once; per KV option the keys / values are pooled (cheap einsum) and
  one SDPA runs; the head outputs are mixed with the option weights before the (linear) o_proj.
  Options whose weight is exactly 0 are skipped unless the weights need gradients.
* hidden: the residual stream is multiplied by m = sum_g p_g [channel < d_g] and RMSNorm divides by the
  expected count n = sum_g p_g d_g. For one-hot p this is exactly the model of width d_g (and equals the
  extracted student, ``autocompress.prune.extract``); for soft p it is a relaxation (not the mixture of the
  width options, which would need one forward each): smooth in p and exact at the vertices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.prune.permute import pool_matrix
from autocompress.nn.llama import LlamaConfig, Masks, AttnOption, forward
from autocompress.plan.options import layer_options


# ---- choices ---------------------------------------------------------------------------------------------
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
    """``Supernet(permuted_params, cfg, space)``; ``forward(input_ids, choices) -> logits``.

    The parameters are the parent's (permuted) and are never trained here; gradients flow to the
    choice probabilities (the caller leaves ``requires_grad`` off on the parameters), and to router
    v2's adapters when it passes adapted weights (``forward(..., params=)``).
    """

    def __init__(self, params: Mapping[str, torch.Tensor], cfg: LlamaConfig, space: Any,
                 options: Any | None = None):
        self.params, self.cfg = dict(params), cfg
        self.hidden_grid = tuple(space.hidden_grid)
        if max(self.hidden_grid) > cfg.hidden_size:
            raise ValueError(f"hidden grid {self.hidden_grid} exceeds the parent's {cfg.hidden_size}")
        self.options = options if options is not None else layer_options(cfg.architecture(), space)
        d = cfg.hidden_size
        self._hid_ind = (torch.arange(d)[None, :] < torch.tensor(self.hidden_grid)[:, None]).float()
        self._hid_n = torch.tensor(self.hidden_grid, dtype=torch.float32)
        self._ffn_ind = [None if not o else (torch.arange(W)[None, :] < torch.tensor(o)[:, None]).float()
                         for o, W in zip(self.options.ffn, cfg.ffn_widths)]
        self._pools = [
            None if not o else [None if k == K else pool_matrix(cfg.num_heads, K, k) for k in o[1:]]
            for o, K in zip(self.options.attn, cfg.kv_heads)
        ]
        # columns a layer does not have (padding up to the widest layer) must carry no weight
        self._n_attn = torch.tensor([len(o) for o in self.options.attn])
        self._n_ffn = torch.tensor([len(o) for o in self.options.ffn])

    @property
    def num_layers(self) -> int:
        return self.cfg.num_layers

    # ---- choices <-> architectures --------------------------------------------------------------------
    def indices_of(self, arch: Architecture) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(hidden index, attention option per layer, FFN option per layer) of a discrete architecture."""
        if arch.num_layers != self.num_layers:
            raise ValueError(f"{arch.num_layers} blocks, the parent has {self.num_layers}")
        h = self.hidden_grid.index(arch.hidden_size)
        ca, cf = [], []
        for l, b in enumerate(arch.blocks):
            ca.append(0 if b.attention is None else self.options.attn[l].index(b.attention.kv_heads))
            cf.append(0 if b.ffn is None else self.options.ffn[l].index(b.ffn.width))
        return h, tuple(ca), tuple(cf)

    def one_hot(self, arch_or_indices: Architecture | tuple) -> Choices:
        h, ca, cf = (self.indices_of(arch_or_indices) if isinstance(arch_or_indices, Architecture)
                     else arch_or_indices)
        L = self.num_layers
        A = max(1, max(map(len, self.options.attn)))
        Fm = max(1, max(map(len, self.options.ffn)))
        ph = torch.zeros(len(self.hidden_grid))
        ph[h] = 1
        pa, pf = torch.zeros(L, A), torch.zeros(L, Fm)
        pa[torch.arange(L), torch.tensor(ca)] = 1
        pf[torch.arange(L), torch.tensor(cf)] = 1
        return Choices(ph, pa, pf)

    def architecture(self, h: int, ca: Sequence[int], cf: Sequence[int], name: str = "") -> Architecture:
        """The discrete architecture of option indices (as ``search.Router.decode`` returns them)."""
        cfg, blocks = self.cfg, []
        for l in range(self.num_layers):
            a = self.options.attn[l][ca[l]] if self.options.attn[l] else 0
            w = self.options.ffn[l][cf[l]] if self.options.ffn[l] else 0
            blocks.append(Block(Attention(cfg.num_heads, a, cfg.head_dim, cfg.sliding_window) if a else None,
                                MLP(w, True, cfg.hidden_act) if w else None))
        return replace(cfg.architecture(name), hidden_size=self.hidden_grid[h], blocks=tuple(blocks))

    # ---- the masked forward ---------------------------------------------------------------------------
    def masks(self, choices: Choices | Sequence[torch.Tensor]) -> Masks:
        c = Choices.of(choices)
        ph, pa, pf = c.hidden, c.attn, c.ffn
        L = self.num_layers
        if ph.shape != (len(self.hidden_grid),) or pa.shape[0] != L or pf.shape[0] != L:
            raise ValueError(f"choices of shapes {tuple(ph.shape)}, {tuple(pa.shape)}, {tuple(pf.shape)}; "
                             f"expected ({len(self.hidden_grid)},), ({L}, A), ({L}, F)")
        for name, p, n in (("attn", pa, self._n_attn), ("ffn", pf, self._n_ffn)):
            pad = torch.arange(p.shape[1])[None, :] >= n.clamp_min(1)[:, None]
            if (p.detach()[pad] != 0).any():
                raise ValueError(f"{name} choices put weight on options a layer does not have (padding columns)")
        hidden = count = None
        if self.hidden_grid != (self.cfg.hidden_size,):
            hidden, count = ph @ self._hid_ind, ph @ self._hid_n
        ffn, attn = [], []
        for l in range(self.num_layers):
            ind = self._ffn_ind[l]
            ffn.append(None if ind is None else pf[l, :ind.shape[0]] @ ind)
            pools = self._pools[l]
            if pools is None:
                attn.append(None)
                continue
            need_all = pa.requires_grad  # straight-through: a 0-valued option still needs its output
            attn.append(tuple(AttnOption(pa[l, o + 1], pool) for o, pool in enumerate(pools)
                              if need_all or float(pa[l, o + 1]) != 0.0))
        return Masks(hidden, count, tuple(ffn), tuple(attn))

    def forward(self, input_ids: torch.Tensor, choices: Choices | Sequence[torch.Tensor],
                return_hidden: bool = False, start: tuple[int, torch.Tensor] | None = None, tap=None,
                params: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """``params``: other weights of the same names and shapes (router v2's adapted temporaries)."""
        return forward(self.params if params is None else params, self.cfg, input_ids, self.masks(choices), tap=tap, return_hidden=return_hidden,
                       start=start)

    __call__ = forward


__all__ = ["Choices", "Supernet"]
