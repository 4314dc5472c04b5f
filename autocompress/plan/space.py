"""The search space a contract allows: legal sizes per axis, derived (and explained) in one place.

Both the feasibility relaxation and the architecture search use it, so a starting point is
always a legal candidate of the search. Every rule carries its reason; ``SearchSpace.derivation``
lists them for the build log and the reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.families.registry import entry
from autocompress.ir import Architecture, Attention, Mamba2, MLP, MoE

DEFAULT_AXES = ("hidden", "kv_heads", "ffn", "depth", "attention")
HIDDEN_POINTS = 5  # the sweep solves one LP per point; five keep `acc check` well under two seconds


@dataclass(frozen=True)
class SearchSpace:
    hidden_grid: tuple[int, ...]  # global hidden sizes, descending (the parent's first)
    ffn_step: int  # FFN widths are multiples of this
    kv_choices: tuple[int, ...]  # legal KV-head counts (divisors of the query heads <= parent's)
    expert_choices: tuple[int, ...]  # legal routed-expert counts (MoE parents), else ()
    axes: tuple[str, ...]
    first_attention_fixed: bool  # vLLM DeciLM: layer 0's first executed sub-block must be attention
    min_keep: float  # at least this share of the parent's non-embedding parameters stays
    derivation: tuple[tuple[str, str, str], ...]  # (setting, value, why)
    # what the parent family's export format allows (``families.registry``); the defaults are those of
    # the Llama / DeciLM format, which also stand for a family ``acc build`` cannot compress
    uniform: bool = False  # one size per axis for every layer (whole layers removed or kept): the uniform grid
    mamba_heads: tuple[int, ...] = ()  # global Mamba2 head counts (descending, the parent's first)
    expert_widths: tuple[int, ...] = ()  # global expert widths (descending, the parent's first)
    kept_attention: tuple[int, ...] = ()  # layers whose attention must stay (NemotronH: the first one)

    def allows(self, axis: str) -> bool:
        return axis in self.axes


def _pow2_floor(x: float) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def default_axes(parent: Architecture) -> tuple[str, ...]:
    axes = list(DEFAULT_AXES)
    if any(isinstance(b.ffn, MoE) for b in parent.blocks):
        axes.append("experts")
    fam = entry(parent.family)
    if fam is not None and "mamba" in fam.global_sizes and any(isinstance(b.mixer, Mamba2) for b in parent.blocks):
        axes.append("mamba")
    return tuple(axes)


def _global_grid(full: int, step: int) -> tuple[int, ...]:
    """The parent's size, 3/4 and 1/2 of it, each a multiple of ``step`` (Minitron prunes Mamba heads
    and FFN widths by up to ~50%)."""
    pts = [full] + [max(step, round(full * f / step) * step) for f in (0.75, 0.5)]
    return tuple(sorted({p for p in pts if p <= full}, reverse=True))


def derive_space(parent: Architecture, engine: str, device_kind: str, axes: tuple[str, ...] | None = None,
                 min_keep: float = 0.25) -> SearchSpace:
    """Legal sizes for ``parent`` on this engine / device. Formulas and sources in the comments."""
    axes = tuple(axes) if axes else default_axes(parent)
    fam = entry(parent.family)  # what the family's export format allows (None: acc check only)
    if fam is not None:
        axes = tuple(a for a in axes if a not in fam.fixed_axes)
    why: list[tuple[str, str, str]] = []
    d = parent.hidden_size
    # Hidden: multiples of 64 (tensor-core tiles and vLLM's CPU kernels are 16/32/64-wide), down
    # to half the parent: Minitron prunes at most ~40% of the width before quality collapses and
    # the embedding table is shared by every candidate.
    h_step = 64 if d <= 4096 else 128
    if "hidden" in axes:
        # at most HIDDEN_POINTS sizes, evenly spaced on the grid of multiples of h_step
        legal = [x for x in range(d - d % h_step, d // 2 - 1, -h_step) if x >= max(h_step, d // 2) and x != d]
        stride = max(1, -(-len(legal) // (HIDDEN_POINTS - 1)))
        grid = (d,) + tuple(legal[stride - 1::stride])
    else:
        grid = (d,)
    why.append(("hidden grid", ", ".join(map(str, grid)),
                f"multiples of {h_step} from the parent's {d} down to {d // 2} (half: Minitron's width limit), "
                f"at most {HIDDEN_POINTS} points"))
    # FFN: the largest power of two <= I/16, clamped to 32..256: 16 choices per layer or more, and
    # GEMM tiles (64/128/256 on GPUs, 16-32 lanes on AVX2) stay full.
    widths = [b.ffn.width for b in parent.blocks if isinstance(b.ffn, MLP)]
    widths += [b.ffn.expert_width for b in parent.blocks if isinstance(b.ffn, MoE)]
    i_max = max(widths, default=256)
    ffn_step = min(256, max(32, _pow2_floor(i_max / 16)))
    why.append(("FFN width step", str(ffn_step), f"largest power of two <= {i_max}/16, clamped to 32..256"))
    # KV heads: divisors of the query heads (GQA groups must tile the heads), at most the parent's
    # (we can merge KV groups, not invent them).
    kv_parent = max((b.mixer.kv_heads for b in parent.blocks if isinstance(b.mixer, Attention)), default=0)
    kvs = tuple(k for k in range(1, kv_parent + 1) if parent.num_heads % k == 0) if "kv_heads" in axes else (
        (kv_parent,) if kv_parent else ())
    why.append(("KV-head choices", ", ".join(map(str, kvs)) or "-",
                f"divisors of {parent.num_heads} query heads up to the parent's {kv_parent}"))
    experts: tuple[int, ...] = ()
    moes = [b.ffn for b in parent.blocks if isinstance(b.ffn, MoE)]
    if moes:
        e_max, k = max(m.experts for m in moes), max(m.top_k for m in moes)
        step = max(1, e_max // 16)
        experts = tuple(sorted({e for e in range(e_max, k - 1, -step)} | {e_max}, reverse=True))
        why.append(("expert choices", ", ".join(map(str, experts)), f"steps of {step} from {e_max} down to top-k {k}"))
    if fam is not None and not fam.shared_writer:
        for axis, scope, reason in fam.limits:
            why.append((f"{fam.name}: {axis}", scope, reason))
    mamba_heads: tuple[int, ...] = ()
    m0 = next((b.mixer for b in parent.blocks if isinstance(b.mixer, Mamba2)), None)
    if fam is not None and m0 is not None and "mamba" in fam.global_sizes and "mamba" in axes:
        mamba_heads = _global_grid(m0.heads, m0.groups)
        why.append(("Mamba2 head choices", ", ".join(map(str, mamba_heads)),
                    f"multiples of the {m0.groups} groups from the parent's {m0.heads} down to half; one count "
                    "for every Mamba2 layer, ranked within each group"))
    expert_widths: tuple[int, ...] = ()
    if fam is not None and moes and "expert_width" in fam.global_sizes and "ffn" in axes:
        w0 = max(m.expert_width for m in moes)
        expert_widths = _global_grid(w0, min(ffn_step, w0))
        why.append(("expert width choices", ", ".join(map(str, expert_widths)),
                    f"multiples of the FFN step {min(ffn_step, w0)} from the parent's {w0} down to half; one width "
                    "for every expert of every MoE layer"))
    kept_attention: tuple[int, ...] = ()
    rule = fam.attention_kept(engine) if fam is not None else None
    if rule is not None and parent.attention_layers():
        every = rule.layers == "every"
        kept_attention = tuple(parent.attention_layers() if every else parent.attention_layers()[:1])
        why.append(("attention kept", "every layer" if every else f"layer {kept_attention[0]}", rule.why))
    first = engine == "vllm" and (fam is None or fam.shared_writer)
    if first:
        why.append(("layer 0 attention", "kept",
                    "vLLM's DeciLM loader crashes when layer 0's first executed sub-block is not attention"))
    why.append(("minimum kept", f"{min_keep:.0%} of non-embedding parameters",
                "below this distillation cannot recover quality at our token budgets (Minitron, Sheared-LLaMA)"))
    uniform = fam is not None and fam.uniform
    return SearchSpace(grid, ffn_step, kvs, experts, axes, first, min_keep, tuple(why), uniform, mamba_heads,
                       expert_widths, kept_attention)
