"""Global sizes: Mamba2 heads and expert width, one value for every layer, swept as variants.

vLLM's NemotronH builds every Mamba2 layer (and its state cache) from the global config, and the
native MoE formats have one expert width; so these sizes are not per-layer variables of the
relaxation but *variants* of the parent: the parent with every Mamba2 layer at h heads and every
expert at width w (``SearchSpace.mamba_heads`` x ``expert_widths``). Each variant is assessed
like a parent (``assess``, its importance weights scaled by the variant's kept share,
``Importance.for_variant``, so scores compare across variants), and the most important feasible
start wins.

The sweep is coordinate-wise, not the full grid: the Mamba2 head counts at the parent's expert
width, then the expert widths at the best head count (at most 1 + 2 + 2 assessments instead of
9; each is a whole feasibility check). The verdict is still sound: every cost grows with every
size, so if the smallest variant is proved infeasible, every variant is; a contract no variant
meets is *infeasible* only when that proof holds, and *not found* otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autocompress.feasibility import assess as _assess  # by module: tests patch assess.assess
from autocompress.feasibility.assess import Feasibility
from autocompress.ir import Architecture, Block, Mamba2, MoE


@dataclass(frozen=True)
class Variant:
    mamba_heads: int | None  # None: the parent has no Mamba2 layer
    expert_width: int | None  # None: no MoE layer

    def label(self) -> str:
        parts = [f"mamba {self.mamba_heads} heads"] * (self.mamba_heads is not None)
        parts += [f"expert width {self.expert_width}"] * (self.expert_width is not None)
        return ", ".join(parts) or "the parent's"


def parent_variant(parent: Architecture) -> Variant:
    m = next((b.mixer for b in parent.blocks if isinstance(b.mixer, Mamba2)), None)
    f = next((b.ffn for b in parent.blocks if isinstance(b.ffn, MoE)), None)
    return Variant(m.heads if m else None, f.expert_width if f else None)


def apply(parent: Architecture, v: Variant) -> Architecture:
    """``parent`` with every Mamba2 layer at ``v.mamba_heads`` and every expert at ``v.expert_width``."""
    blocks = []
    for b in parent.blocks:
        m, f = b.mixer, b.ffn
        if isinstance(m, Mamba2) and v.mamba_heads is not None:
            m = replace(m, heads=v.mamba_heads)
        if isinstance(f, MoE) and v.expert_width is not None:
            f = replace(f, expert_width=v.expert_width)
        blocks.append(Block(m, f))
    return parent.with_blocks(tuple(blocks))


def variant_of(arch: Architecture) -> Variant:
    return parent_variant(arch)


@dataclass(frozen=True)
class Swept:
    feasibility: Feasibility  # the chosen variant's (parent costs and uniform baseline: see ``assess_variants``)
    variant: Variant
    parent: Architecture  # the chosen variant applied to the parent: what the search compresses
    rows: tuple[dict, ...]  # every variant tried: sizes, verdict, importance kept (JSON for the report)
    tried: tuple[tuple[Variant, Feasibility], ...] = ()


def assess_variants(spec, parent: Architecture, profile, device, space, importance, limits=None,
                    diagnose: bool = True) -> Swept:
    """The feasibility of the best variant (module docstring); a parent without global sizes to
    sweep is assessed as ``assess`` would, unchanged."""
    full = parent_variant(parent)
    heads = space.mamba_heads or ((full.mamba_heads,) if full.mamba_heads else (None,))
    widths = space.expert_widths or ((full.expert_width,) if full.expert_width else (None,))
    if len(heads) == 1 and len(widths) == 1:
        return Swept(_assess.assess(spec, parent, profile, device, space, importance, limits, diagnose), full, parent,
                     ())
    tried: dict[Variant, Feasibility] = {}

    def run(v: Variant, diag: bool = False) -> Feasibility:
        if v not in tried or (diag and not tried[v].diagnosis and tried[v].verdict == "infeasible"):
            vp = apply(parent, v)
            tried[v] = _assess.assess(spec, vp, profile, device, space, importance.for_variant(parent, vp), limits,
                                      diag)
        return tried[v]

    def score(v: Variant) -> float:
        f = tried[v]
        return f.start.importance if f.start is not None else -1.0

    if run(full).verdict == "infeasible" and tried[full].diagnosis and all(
            d.basis == "engine" for d in tried[full].diagnosis):  # an engine limit: no size changes it
        return Swept(tried[full], full, parent, (), tuple(tried.items()))
    for h in heads[1:]:
        run(Variant(h, full.expert_width))
    best_h = max((v for v in tried), key=lambda v: (score(v), v == full)).mamba_heads
    for w in widths[1:]:
        run(Variant(best_h, w))
    best = max(tried, key=lambda v: (score(v), v == full))
    if tried[best].start is None:  # nothing found: only the smallest variant can prove it for all
        best = Variant(min(heads) if full.mamba_heads else None, min(widths) if full.expert_width else None)
        run(best, diagnose)
    chosen, base = tried[best], tried[full]
    uniforms = [f.uniform for f in tried.values() if f.uniform is not None]
    uniform = max(uniforms, key=lambda c: c.importance) if uniforms else None
    reason = chosen.reason
    if chosen.verdict == "infeasible" and best != full:
        reason = f"{reason} (even with {best.label()}, the smallest global sizes)"
    feas = replace(chosen, parent=base.parent, uniform=uniform, reason=reason,
                   seconds=sum(f.seconds for f in tried.values()))
    rows = tuple({"mamba_heads": v.mamba_heads, "expert_width": v.expert_width, "verdict": f.verdict,
                  "importance_kept": f.start.importance if f.start else None, "chosen": v == best}
                 for v, f in tried.items())
    return Swept(feas, best, apply(parent, best), rows, tuple(tried.items()))


__all__ = ["Swept", "Variant", "apply", "assess_variants", "parent_variant", "variant_of"]
