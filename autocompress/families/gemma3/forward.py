"""The Gemma 3 text forward: ``nn.hybrid``'s decoder with Gemma's globals, equal to transformers'
``Gemma3ForCausalLM`` (5.19, ``models/gemma3/modeling_gemma3.py``) within 1e-4 (a test pins it).

What differs from Llama, and where it lives:

* **norms** ``y = x * rsqrt(mean(x^2) + eps) * (1 + w)`` (``Gemma3RMSNorm``, weights initialised at
  0): the canonical weights hold ``1 + w`` (``to_canonical_norms`` on load, ``from_canonical_norms``
  on export), so one RMSNorm (and one hidden-channel mask count) serves every family;
* **four norms per layer**: ``x += post_norm(mixer(pre_norm(x)))``, the same for the MLP
  (``Architecture.post_norms``: canonical ``post_mixer_norm`` / ``post_ffn_norm``), and **q/k head
  norms** before RoPE (``qk_norm``);
* **embedding scale** ``sqrt(hidden_size)`` (``Gemma3TextScaledWordEmbedding``);
* **two RoPE bases**: ``rope_parameters["full_attention"]`` (1e6 for 270M) on global layers,
  ``["sliding_attention"]`` (1e4) on sliding ones; sliding layers see their 512 previous tokens
  (``kv_idx > q_idx - window``: ``nn.hybrid.causal_attention``);
* **query scale** ``query_pre_attn_scalar ** -0.5`` (256 for 270M: equal to head_dim ** -0.5);
* **GELU-tanh** gated MLP; optional **final logit soft cap** ``tanh(l / c) * c`` (None for 270M);
  transformers 5.19 never applies ``attn_logit_softcapping``, so neither do we.

The masks are ``nn.hybrid.HybridMasks`` (hidden, FFN channels, attention options), so importance,
permutation, the supernet and extraction are the canonical ones (``families.gemma3.family``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from autocompress.ir import Architecture
from autocompress.nn.hybrid import HybridConfig, HybridMasks
from autocompress.nn.hybrid import forward as hybrid_forward

# canonical names (suffixes after ``L{l}.``) of the 1 + w norms, plus the final one ("norm_f")
NORMS = ("mixer_norm", "ffn_norm", "post_mixer_norm", "post_ffn_norm", "q_norm", "k_norm")


def _is_norm(name: str) -> bool:
    return name == "norm_f" or name.rpartition(".")[2] in NORMS


def to_canonical_norms(params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint norm weights ``w`` -> ``1 + w`` (everything else unchanged)."""
    return {k: (v + 1.0 if _is_norm(k) else v) for k, v in params.items()}


def from_canonical_norms(params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of ``to_canonical_norms``: what a Gemma 3 checkpoint stores."""
    return {k: (v - 1.0 if _is_norm(k) else v) for k, v in params.items()}


def _theta(rope: dict, kind: str, default: float) -> float:
    r = dict(rope.get(kind) or {})
    if r.get("rope_type", "default") != "default":
        raise NotImplementedError(f"Gemma 3 {kind} RoPE type {r['rope_type']!r}: the functional forward has "
                                  "the default, unscaled RoPE only")
    return float(r.get("rope_theta", default))


def gemma3_config(native: dict, arch: Architecture) -> HybridConfig:
    """The forward's globals from a ``gemma3_text`` config.json (transformers 5 ``rope_parameters``,
    or 4.x ``rope_theta`` / ``rope_local_base_freq``); class defaults where a key is absent."""
    if native.get("use_bidirectional_attention"):
        raise NotImplementedError("bidirectional Gemma 3 (an encoder) is not a decoder acc build compresses")
    rope = native.get("rope_parameters") or {}
    full = _theta(rope, "full_attention", float(native.get("rope_theta", 1e6)))
    local = _theta(rope, "sliding_attention", float(native.get("rope_local_base_freq", 1e4)))
    cap = native.get("final_logit_softcapping")
    return HybridConfig(arch, float(native.get("rms_norm_eps", 1e-6)), full, qk_norm=True,
                        embed_scale=float(native.get("hidden_size", arch.hidden_size)) ** 0.5,
                        rope_local_theta=local, query_scale=float(native.get("query_pre_attn_scalar", 256)) ** -0.5,
                        final_softcap=None if cap is None else float(cap), native=native)


def forward(params: Mapping[str, torch.Tensor], cfg: HybridConfig, input_ids: torch.Tensor,
            masks: HybridMasks | None = None, tap=None, return_hidden: bool = False, start=None) -> torch.Tensor:
    """Logits (B, T, V) of canonical Gemma 3 weights (norms as ``1 + w``); ``nn.hybrid.forward``."""
    return hybrid_forward(params, cfg, input_ids, masks, tap, return_hidden, start)


__all__ = ["NORMS", "forward", "from_canonical_norms", "gemma3_config", "to_canonical_norms"]
