"""Distinct GEMM shapes in the LP's variables: the count a point of the relaxation has, and what a
shape costs in normalized memory where the profile prices shapes (vllm-cpu,
``cost.memory.gemm_shapes``). ``rounding`` adds the difference to the relaxation's values, which
charge the parent's count (docs/cost-model.md)."""

from __future__ import annotations

import numpy as np

from autocompress.feasibility.arrays import numeric
from autocompress.feasibility.metrics import A, G, K, W, Relaxation
from autocompress.ir import MLP, Attention


def shape_price(relax: Relaxation) -> float:
    """Normalized memory per distinct GEMM shape (0 where the profile prices none), with the
    safety margin's fraction the exact model applies to all non-KV memory."""
    mt = relax.profile.memory
    if not mt.gemm_shape_bytes or "memory" not in numeric(relax)["names"]:
        return 0.0
    return (1 + mt.margin_fraction) * mt.gemm_shape_bytes / relax.mem_limit


def shape_count(relax: Relaxation, x: np.ndarray) -> int:
    """The distinct shapes x's compressible sub-blocks have (a QKV shape per KV-head count, one
    output projection, up and down per FFN width); the rest of the model is the parent's in every
    point, so differences of this count are differences of ``gemm_shapes``."""
    L, blocks = relax.L, relax.parent.blocks
    kv = {round(float(x[K * L + l])) for l in range(L) if isinstance(blocks[l].mixer, Attention) and x[A * L + l]}
    widths = {round(float(x[W * L + l])) for l in range(L) if isinstance(blocks[l].ffn, MLP) and x[G * L + l]}
    return len(kv) + bool(kv) + 2 * len(widths)
