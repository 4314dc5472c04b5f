"""Synthetic models for profiling: heterogeneous architectures derived from a parent, random weights.

Time and memory in an engine depend on shapes, not on weight values, so a profile (and the
fidelity benchmark) measures exported folders with seeded random weights: each is a real
checkpoint that stock vLLM loads, written by the same exporter as ``acc build`` (the shared writer,
``export.writer.export_architecture``: Llama format when homogeneous, DeciLM otherwise), with the
parent's tokenizer. ``variants`` draws a reproducible family of architectures around a parent:
hidden widths on the build's grid, removed whole layers, removed attention or FFN sub-blocks,
per-layer KV heads and FFN widths, so the calibration sees the same kinds of models the search
produces.

MoE and hybrid parents (Mixtral, Qwen-MoE, NemotronH) get variants from their own search space
(``plan.space``: global Mamba2 heads and expert width, experts, and per layer only where the
format allows it), written by their family's exporter (``families``) with random canonical weights.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from autocompress.cache import code_digest, key
from autocompress.export.writer import architecture_shapes, export_architecture
from autocompress.families.base import family_of
from autocompress.families.registry import uses_shared_writer
from autocompress.feasibility.variants import Variant, apply
from autocompress.ir import MLP, Architecture, Attention, Block, MoE
from autocompress.plan.options import layer_options
from autocompress.plan.space import derive_space


def _kv_choices(arch: Architecture) -> list[int]:
    a = next(b.attention for b in arch.blocks if b.attention is not None)
    return [k for k in range(1, a.kv_heads + 1) if arch.num_heads % k == 0]


def variant(parent: Architecture, rng: random.Random, name: str) -> Architecture:
    """One random heterogeneous architecture around ``parent`` (layer 0 keeps its attention:
    vLLM's DeciLM loader needs it, see ``space.py``)."""
    p0 = parent.blocks[0]
    width0 = p0.ffn.width
    hidden = rng.choice([h for h in (parent.hidden_size, parent.hidden_size - 64, parent.hidden_size - 128,
                                     parent.hidden_size - 192) if h >= parent.hidden_size // 2])
    depth = rng.choice((1.0, 1.0, 0.8, 0.6))
    n = max(4, round(parent.num_layers * depth))
    p_attn_off, p_ffn_off = rng.choice((0.0, 0.1, 0.25)), rng.choice((0.0, 0.05, 0.15))
    step = max(64, width0 // 8 // 64 * 64)
    widths = list(range(width0, width0 // 4 - 1, -step))
    kvs = _kv_choices(parent)
    uniform_layer = rng.random() < 0.25  # some homogeneous models (Llama format) too
    kv_u, w_u = rng.choice(kvs), rng.choice(widths)
    blocks = []
    for i in range(n):
        if uniform_layer:
            kv, w = kv_u, w_u
        else:
            kv = None if (i > 0 and rng.random() < p_attn_off) else rng.choice(kvs)
            w = None if rng.random() < p_ffn_off else rng.choice(widths)
        if kv is None and w is None:
            w = rng.choice(widths)
        att = None if kv is None else Attention(p0.attention.q_heads, kv, p0.attention.head_dim)
        blocks.append(Block(att, None if w is None else MLP(w, p0.ffn.gated, p0.ffn.activation)))
    return replace(parent, hidden_size=hidden, blocks=tuple(blocks), name=name)


def designed(parent: Architecture) -> list[Architecture]:
    """Architectures that differ from a reference in one property each, and resemble what the
    search emits: the causes of "heterogeneous costs more" measured apart.

    * ``uniform-w<W>``: every layer, full attention, FFN width W (GEMM width alone);
    * ``alternating``: the same FFN parameters as ``uniform-w<W>`` in two widths, W - d and W + d
      (distinct shapes alone, same sub-block count and bytes);
    * ``split``: half the layers' FFNs removed, the others twice as wide (sub-block count alone,
      same FFN parameters);
    * ``narrow-many``: every FFN at 64-448 channels, some attention removed, mixed KV heads: what
      the measured greedy returns under a tight latency bound;
    * ``shallow-wide``: the parameters of ``uniform-w<W>`` (the deep-narrow one) in fewer layers at
      the parent's full width, the rest removed (the paper's depth-vs-width effect).
    """
    p0 = parent.blocks[0]
    att, mlp = p0.attention, p0.ffn
    L, W = parent.num_layers, mlp.width
    kvs = _kv_choices(parent)
    half = W // 2 // 64 * 64
    d = half // 2 // 64 * 64

    def make(name, layers):
        blocks = tuple(Block(None if kv is None else Attention(att.q_heads, kv, att.head_dim),
                             None if w is None else MLP(w, mlp.gated, mlp.activation)) for kv, w in layers)
        return replace(parent, blocks=blocks, name=name)
    full_kv = att.kv_heads
    deep = make(f"uniform-w{half}", [(full_kv, half)] * L)
    per_narrow, per_full = deep.blocks[0].params(parent.hidden_size), parent.blocks[0].params(parent.hidden_size)
    n_wide = round(L * per_narrow / per_full)
    out = [deep,
           make("alternating", [(full_kv, half - d if i % 2 else half + d) for i in range(L)]),
           make("split", [(full_kv, None if i % 2 else 2 * half) for i in range(L)]),
           make("shallow-wide", [(full_kv, W)] * n_wide + [(None, None)] * (L - n_wide))]
    rng = random.Random(12)
    narrow = [(full_kv if i == 0 else (None if rng.random() < 0.15 else rng.choice(kvs)),
               rng.choice((64, 128, 192, 256, 320, 384, 448))) for i in range(L)]
    out.append(make("narrow-many", narrow))
    return out


def hybrid_variant(parent: Architecture, rng: random.Random, name: str) -> Architecture:
    """One random architecture of a MoE / hybrid parent's search space (``plan.space``)."""
    space = derive_space(parent, "vllm", "cpu")
    v = Variant(rng.choice(space.mamba_heads) if space.mamba_heads else None,
                rng.choice(space.expert_widths) if space.expert_widths else None)
    base = apply(parent, v)
    opts = layer_options(base, space)
    pick = [rng.randrange(1, len(o)) if o else 0 for o in opts.attn], [rng.randrange(1, len(o)) if o else 0 for o in opts.ffn]
    if space.uniform:  # one size per axis: every layer takes layer 0's choice
        pick = [pick[0][0] if o else 0 for o in opts.attn], [pick[1][0] if o else 0 for o in opts.ffn]
    blocks = []
    for l, b in enumerate(base.blocks):
        m, f = b.mixer, b.ffn
        if opts.attn[l]:
            m = replace(m, kv_heads=opts.attn[l][pick[0][l]])
        if opts.ffn[l]:
            size = opts.ffn[l][pick[1][l]]
            f = replace(f, experts=size) if isinstance(f, MoE) else replace(f, width=size)
        if not space.uniform and (m is None or opts.attn_removable[l]) and opts.ffn_removable[l] and rng.random() < 0.15:
            f = None  # a removed FFN layer (NemotronH: the whole layer)
        blocks.append(Block(m, f))
    if space.uniform and len(blocks) > 2 and rng.random() < 0.3:
        blocks[-1] = Block(None, None)  # a removed whole layer
    return replace(base, hidden_size=rng.choice(space.hidden_grid), blocks=tuple(blocks), name=name)


def variants(parent: Architecture, n: int, seed: int = 0) -> list[Architecture]:
    """``n`` architectures: the parent itself first, then seeded random variants."""
    rng = random.Random(seed)
    out = [replace(parent, name="parent")]
    make = variant if uses_shared_writer(parent.family) else hybrid_variant
    while len(out) < n:
        out.append(make(parent, rng, f"v{len(out):02d}"))
    return out


def arch_key(arch: Architecture) -> str:
    parts = [arch.family, arch.vocab_size, arch.hidden_size, arch.num_heads, arch.head_dim, arch.tie_embeddings]
    if not uses_shared_writer(arch.family):  # every size of every block (Mamba2 heads, experts, widths)
        parts.append(repr(arch.blocks))
    else:
        parts += [(b.attention.kv_heads if b.attention else 0, b.ffn.width if b.ffn else 0) for b in arch.blocks]
    return key("synth", repr(parts), code_digest("autocompress.calibrate.synth"))[:16]


def synthetic_folder(arch: Architecture, tokenizer_dir, root: Path, seed: int = 0) -> Path:
    """The exported folder of ``arch`` with random weights (cached under ``root`` by shape)."""
    import torch

    out = Path(root) / f"synth-{arch_key(arch)}"
    if (out / "config.json").is_file():
        return out
    if not uses_shared_writer(arch.family):
        return _hybrid_folder(arch, tokenizer_dir, out, seed)
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in architecture_shapes(arch).items():
        if name.endswith("norm.weight"):
            state[name] = torch.ones(shape)
        else:
            state[name] = torch.randn(shape, generator=g) * 0.02
    return export_architecture(out, arch, state, tokenizer_dir, overwrite=True)


def _hybrid_folder(arch: Architecture, parent_dir, out: Path, seed: int) -> Path:
    """A MoE / hybrid synthetic model: random canonical weights (``nn.hybrid.param_shapes``), written
    by the family's exporter with the parent folder's config (``parent_dir`` also gives the tokenizer)."""
    import torch

    from autocompress.nn.hybrid import param_shapes  # torch at import: kept off acc verify's path

    family = family_of(arch.family)
    cfg = family.config(parent_dir)
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in param_shapes(replace(cfg, arch=arch)).items():
        kind = name.rsplit(".", 1)[-1]
        state[name] = (torch.ones(shape) if kind.endswith("norm") or kind == "norm_f" else
                       -torch.rand(shape, generator=g) if kind == "A_log" else torch.randn(shape, generator=g) * 0.02)
    family.export(out, arch, state, parent_dir, {"cfg": cfg}, overwrite=True)
    return out
