"""Per-block op coefficient tables for the feasibility relaxation: every op's FLOPs and bytes with
their slopes in each per-layer size (``block_op_table``). The ops are affine in these sizes, so
the relaxation (``feasibility.metrics``) turns each op's roofline time into linear rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.cost.roofline import (Numerics, Op, Pass, attention_ops, charged_bytes, mamba_ops, mlp_ops, moe_ops,
                                        op_time)
from autocompress.ir import MLP, Architecture, Attention, Block, Mamba2, MoE

@dataclass(frozen=True)
class OpCoefficients:
    """flops(x) = flops + sum_v dflops[v] * (x_v - at[v]); same for the op's charged bytes
    (``roofline.charged_bytes``). ``part``: mixer | ffn."""

    op: Op
    part: str
    dflops: tuple[tuple[str, float], ...]
    dbytes: tuple[tuple[str, float], ...]
    exact: bool  # False when a slope is a tangent of a concave term (MoE experts touched)


@dataclass(frozen=True)
class BlockOpTable:
    block_index: int
    sizes: tuple[tuple[str, float], ...]  # the variables and their current values
    rows: tuple[OpCoefficients, ...]
    times: tuple[float, ...]  # op_time of each row at the current sizes

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(r.op for r in self.rows)


def _sub_block_fns(arch: Architecture, block: Block, p: Pass, nb: Numerics):
    """[(part, {var: value}, fn(**vars) -> ops)] for the present sub-blocks of a block."""
    d = arch.hidden_size
    out = []
    m, f = block.mixer, block.ffn
    if isinstance(m, Attention):
        out.append(("mixer", {"kv_heads": m.kv_heads},
                    lambda kv_heads, m=m: attention_ops(d, m.q_heads, kv_heads, m.head_dim, m.sliding_window, p, nb,
                                                        arch.post_norms)))
    elif isinstance(m, Mamba2):
        out.append(("mixer", {"mamba_heads": m.heads},
                    lambda mamba_heads, m=m: mamba_ops(d, mamba_heads, m.head_dim, m.state_size, m.groups,
                                                       m.conv_kernel, p, nb)))
    if isinstance(f, MLP):
        out.append(("ffn", {"ffn_width": f.width}, lambda ffn_width, f=f: mlp_ops(d, ffn_width, f.gated, p, nb,
                                                                                  arch.post_norms)))
    elif isinstance(f, MoE):
        out.append(("ffn", {"experts": f.experts, "expert_width": f.expert_width},
                    lambda experts, expert_width, f=f: moe_ops(d, experts, f.top_k, expert_width, f.shared_experts,
                                                               f.shared_width, f.gated, p, nb)))
    return out


def block_op_table(arch: Architecture, block_index: int, p: Pass, device, profile,
                   nb: Numerics = Numerics()) -> BlockOpTable:
    """Ops of one block with their slopes in each per-layer size, for the feasibility relaxation.

    Slopes are exact differences (the ops are affine in these sizes), except the MoE expert
    count, whose slope is the tangent of the concave distinct-experts term (``exact=False``).
    Removing a sub-block (``part``) removes its rows.
    """
    block = arch.blocks[block_index]
    rows, sizes = [], []
    for part, vars_, fn in _sub_block_fns(arch, block, p, nb):
        sizes += list(vars_.items())
        base = fn(**vars_)
        slopes_f = {op.name: {} for op in base}
        slopes_b = {op.name: {} for op in base}
        inexact = set()
        for v, x in vars_.items():
            if v == "experts":  # central difference: tangent of the concave term
                h = 1e-3 * x
                lo, hi = fn(**{**vars_, v: x - h}), fn(**{**vars_, v: x + h})
                step = 2 * h
            else:
                lo, hi, step = base, fn(**{**vars_, v: x + 1}), 1.0
            for o_lo, o_hi in zip(lo, hi):
                slopes_f[o_lo.name][v] = (o_hi.flops - o_lo.flops) / step
                # charged bytes (shared-prefix re-reads at the profile's share): what the time pays for
                slopes_b[o_lo.name][v] = (charged_bytes(o_hi, profile) - charged_bytes(o_lo, profile)) / step
                if v == "experts" and o_lo.name == "moe.experts":
                    inexact.add(o_lo.name)
        for op in base:
            rows.append(OpCoefficients(op, part, tuple(slopes_f[op.name].items()), tuple(slopes_b[op.name].items()),
                                       op.name not in inexact))
    times = tuple(op_time(r.op, device, profile, nb.weight) for r in rows)
    return BlockOpTable(block_index, tuple(sizes), tuple(rows), times)
