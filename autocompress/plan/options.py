"""The per-layer options of the search space: one source for every stage that indexes them.

The relaxation's variable bounds (``feasibility.metrics``), the search's cost tables
(``search.tables``), the router's masks, the refinement's moves and the supernet's masked
forward all read option ``c`` of layer ``l`` from here, so an option index decodes to the same
sub-block everywhere. Index 0 is "removed"; the last option is the parent's own size.

* attention: (0, each legal KV-head count up to the parent's, ascending);
* FFN: (0, each multiple of the FFN step up to the parent's width, the parent's width last);
  a MoE layer: (0, each legal routed-expert count up to the parent's, ascending);
* a layer without that sub-block in the parent has no options (``()``); Mamba2 mixers have none
  (their heads are global: ``feasibility.variants``).

Removability (``attn_removable`` / ``ffn_removable``): a sub-block may be removed when the axes
allow it (attention: the ``attention`` or ``depth`` axis; FFN: ``ffn`` or ``depth``), except
layer 0's attention under vLLM (``SearchSpace.first_attention_fixed``: vLLM's DeciLM loader
needs the first executed sub-block to be an attention) and the attention NemotronH keeps
(``SearchSpace.kept_attention``). In a uniform space (Mixtral, Qwen-MoE) a half-removed layer is
legal for the relaxation (a lower bound) but never a candidate: the uniform grid removes whole layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.ir import MLP, Architecture, Attention, MoE
from autocompress.plan.space import SearchSpace


@dataclass(frozen=True)
class LayerOptions:
    attn: tuple[tuple[int, ...], ...]  # per layer: (0, KV heads, ...); () when the parent has no attention there
    ffn: tuple[tuple[int, ...], ...]  # per layer: (0, width or experts, ...); () without an FFN there
    attn_removable: tuple[bool, ...]
    ffn_removable: tuple[bool, ...]

    @property
    def num_layers(self) -> int:
        return len(self.attn)


def attention_removable(space: SearchSpace, layer: int) -> bool:
    if (layer == 0 and space.first_attention_fixed) or layer in space.kept_attention:
        return False
    return space.allows("attention") or space.allows("depth")


def ffn_removable(space: SearchSpace) -> bool:
    return space.allows("ffn") or space.allows("depth")


def ffn_widths(width: int, space: SearchSpace) -> tuple[int, ...]:
    """Legal kept widths of an FFN of ``width`` channels: multiples of the step, the full width last."""
    if not space.allows("ffn"):
        return (width,)
    step = min(space.ffn_step, width)
    widths = tuple(range(step, width + 1, step))
    return widths if widths[-1] == width else widths + (width,)


def kv_options(kv_heads: int, space: SearchSpace) -> tuple[int, ...]:
    return tuple(k for k in sorted(space.kv_choices or (kv_heads,)) if k <= kv_heads)


def expert_options(moe: MoE, space: SearchSpace) -> tuple[int, ...]:
    """Legal routed-expert counts of a MoE layer, ascending, the parent's last (at least top-k)."""
    if not space.allows("experts"):
        return (moe.experts,)
    return tuple(sorted({e for e in space.expert_choices if moe.top_k <= e <= moe.experts} | {moe.experts}))


def layer_options(parent: Architecture, space: SearchSpace) -> LayerOptions:
    attn, ffn, ra, rf = [], [], [], []
    for l, b in enumerate(parent.blocks):
        if isinstance(b.mixer, Attention):
            attn.append((0,) + kv_options(b.mixer.kv_heads, space))
            ra.append(attention_removable(space, l))
        else:
            attn.append(())
            ra.append(False)
        if isinstance(b.ffn, MLP):
            ffn.append((0,) + ffn_widths(b.ffn.width, space))
            rf.append(ffn_removable(space))
        elif isinstance(b.ffn, MoE):
            ffn.append((0,) + expert_options(b.ffn, space))
            rf.append(ffn_removable(space))
        else:
            ffn.append(())
            rf.append(False)
    return LayerOptions(tuple(attn), tuple(ffn), tuple(ra), tuple(rf))
