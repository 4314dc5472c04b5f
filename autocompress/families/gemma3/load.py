"""Reading a Gemma 3 checkpoint: its tensor names, the forward's globals, ``load``.

The parent loader the importance, teacher and parent-quality stages run. It is a module apart
from the family's (``families.gemma3.family``: export, ``FAMILY``) because those stages' cache keys hash
the code they run (``families.hybrid.hybrid_family``): an edit of the export or the search
must not re-run an hour of importance and teacher outputs.
"""

from __future__ import annotations

from autocompress.families import checkpoint as ck
from autocompress.ir import Architecture
from autocompress.families.gemma3.forward import gemma3_config, to_canonical_norms
from autocompress.nn.hybrid import HybridConfig, param_shapes, pn
from autocompress.parents.hf_config import architecture_from_config

_LAYER = {"mixer_norm": "input_layernorm", "post_mixer_norm": "post_attention_layernorm",
          "ffn_norm": "pre_feedforward_layernorm", "post_ffn_norm": "post_feedforward_layernorm",
          "q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
          "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm",
          "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def kept_layers(arch: Architecture) -> list[int]:
    return [l for l, b in enumerate(arch.blocks) if b.mixer is not None or b.ffn is not None]


def names(cfg: HybridConfig) -> dict[str, str]:
    """Canonical name -> checkpoint name of every tensor ``cfg.arch`` has (removed layers renumbered)."""
    have = param_shapes(cfg)
    plain = {"embed": "model.embed_tokens.weight", "norm_f": "model.norm.weight"}
    if not cfg.arch.tie_embeddings:
        plain["lm_head"] = "lm_head.weight"
    for j, l in enumerate(kept_layers(cfg.arch)):
        plain.update({pn(l, c): f"model.layers.{j}.{n}.weight" for c, n in _LAYER.items() if pn(l, c) in have})
    return plain


def load(folder):
    """(canonical fp32 params, norms as 1 + w; HybridConfig) of a Gemma 3 text folder."""
    native, tensors = ck.read_folder(folder)
    arch = architecture_from_config(native)
    cfg = gemma3_config(native, arch)
    if arch.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    return to_canonical_norms(ck.to_canonical(tensors, names(cfg), {}, {})), cfg
