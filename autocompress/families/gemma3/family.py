"""The Gemma 3 build family (``gemma3_text`` parents: Gemma 3 270M / 1B and the text towers).

The torch side is the canonical one (``nn.hybrid`` with the globals of ``families.gemma3.forward``,
``prune.*``); this module holds the exported config and the export.

**Export** (what transformers 5.19 and stock vLLM 0.32 load):

* every kept layer the same (one MLP width, no half-removed layer): stock ``Gemma3ForCausalLM``,
  no remote code (vLLM's native ``gemma3.py``);
* otherwise stock ``gemma3_text`` config with transformers' ``per_layer_config`` (per-layer
  ``intermediate_size``, ``skip: ["mlp"]`` / ``["self_attn"]``) and our thin subclasses of the stock
  classes shipped in the folder (``modeling/modeling_gemma3_hetero.py``, ``auto_map``,
  ``trust_remote_code=True``), which vLLM serves through its Transformers backend. vLLM's native
  ``gemma3.py`` has no per-layer field (``AmbiguousGlobalPerLayerAttributeError``), and its
  Transformers backend needs attention in every layer, so ``engine vllm`` builds never remove
  attention (``registry.GEMMA3``, the build log says why).

Removed whole layers are dropped and ``layer_types`` re-indexed. A narrower hidden size changes
the embedding scale ``sqrt(hidden_size)`` of the exported model, so the export multiplies the
(tied) embedding by ``sqrt(d_parent / d)`` and divides the final norm's ``1 + w`` by it: the
scaled embedding and the logits stay the student's. The parent's Gemma Terms of Use
(``GEMMA_TERMS.html``) and ``NOTICE`` travel with every export.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from transformers import Gemma3TextConfig

from autocompress.export.writer import write_checkpoint
from autocompress.families import checkpoint as ck
from autocompress.families.gemma3.load import kept_layers, load, names
from autocompress.families.hybrid import config_of, hybrid_family
from autocompress.ir import MLP, Architecture
from autocompress.modeling import register as modeling
from autocompress.families.gemma3.forward import from_canonical_norms, gemma3_config
from autocompress.nn.hybrid import HybridConfig
from autocompress.prune.extract import canonical_state

TERMS_FILES = ("GEMMA_TERMS.html", "NOTICE")


def native_config(cfg: HybridConfig, arch: Architecture) -> tuple[dict, bool]:
    """(the exported config.json content, whether it needs per-layer fields and our model class)."""
    c = {k: v for k, v in cfg.native.items()
         if k not in ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures", "auto_map",
                      "per_layer_config")}
    idx = kept_layers(arch)
    kept = [arch.blocks[l] for l in idx]
    types = c.get("layer_types")
    if not (isinstance(types, list) and len(types) == arch.num_layers):
        types = ["sliding_attention" if b.attention and b.attention.sliding_window else "full_attention"
                 for b in cfg.arch.blocks]
    kvs = {b.attention.kv_heads for b in kept if b.attention}
    if len(kvs) > 1:
        raise ValueError("Gemma 3 exports one KV-head count for all layers")
    widths = [b.ffn.width if isinstance(b.ffn, MLP) else None for b in kept]
    parent_width = next(b.ffn.width for b in cfg.arch.blocks if isinstance(b.ffn, MLP))
    c.update(hidden_size=arch.hidden_size, num_hidden_layers=len(kept), head_dim=arch.head_dim,
             num_attention_heads=arch.num_heads, num_key_value_heads=kvs.pop() if kvs else 1,
             layer_types=[types[l] for l in idx], tie_word_embeddings=arch.tie_embeddings,
             query_pre_attn_scalar=cfg.native.get("query_pre_attn_scalar", 256))
    c.pop("sliding_window_pattern", None)
    c.pop("_sliding_window_pattern", None)  # layer_types says it; a pattern would contradict dropped layers
    hetero = len(set(widths)) > 1 or any(b.mixer is None or b.ffn is None for b in kept)
    if not hetero:
        c["intermediate_size"] = widths[0]
        return c, False
    c["intermediate_size"] = parent_width
    per = {}
    for j, b in enumerate(kept):
        skip = [n for n, sub in (("self_attn", b.mixer), ("mlp", b.ffn)) if sub is None]
        per[j] = {"intermediate_size": b.ffn.width if isinstance(b.ffn, MLP) else parent_width}
        if skip:
            per[j]["skip"] = skip
    c["per_layer_config"] = per
    return c, True


def checkpoint_tensors(canon: dict, cfg: HybridConfig, scfg: HybridConfig) -> dict:
    """Checkpoint tensors of the student ``scfg`` (canonical, 1 + w norms) of the parent ``cfg``."""
    canon = dict(canon)
    d0, d = int(cfg.native.get("hidden_size", cfg.arch.hidden_size)), scfg.arch.hidden_size
    if d != d0:  # the exported model scales its embedding by sqrt(d), the student by sqrt(d0)
        s = (d0 / d) ** 0.5
        canon["embed"] = canon["embed"] * s
        canon["norm_f"] = canon["norm_f"] / s
        if "lm_head" in canon:
            canon["lm_head"] = canon["lm_head"] / s
    return ck.from_canonical(from_canonical_norms(canon), names(scfg), {})


def export(out, arch, state, tokenizer_dir, extras, overwrite=True, spec_path=None, strategy=None) -> str:
    """Write the student as stock Gemma 3 or heterogeneous Gemma 3 (module docstring), atomically."""
    parent: HybridConfig = extras["cfg"]
    scfg = replace(parent, arch=arch)
    tensors = checkpoint_tensors(canonical_state(state, scfg), parent, scfg)
    c, hetero = native_config(parent, arch)
    c.pop("model_type", None)
    config = Gemma3TextConfig(**c)
    files, notes = _terms(tokenizer_dir)
    if hetero:
        config.architectures = [modeling.GEMMA3_ARCHITECTURE]
        config.auto_map = dict(modeling.GEMMA3_AUTO_MAP)
        files += tuple(modeling.source_dir() / n for n in modeling.GEMMA3_FILES)
    else:
        config.architectures = ["Gemma3ForCausalLM"]
    try:
        write_checkpoint(out, config, tensors, tokenizer_dir, extra_files=files, overwrite=overwrite,
                         spec_path=spec_path, strategy=strategy)
    finally:
        if notes is not None:
            notes.cleanup()
    return "gemma3_hetero" if hetero else "gemma3_text"


def _terms(parent_dir) -> tuple[tuple[Path, ...], object]:
    """The parent's licence file, and its NOTICE marked as modified (Gemma Terms of Use section 3.1:
    modified files carry a prominent notice), as files to copy in; plus the temporary folder."""
    src = Path(parent_dir) if parent_dir else None
    if src is None or not (src / TERMS_FILES[0]).is_file():
        return (), None
    tmp = tempfile.TemporaryDirectory(prefix="acc-notice-")
    notice = (src / "NOTICE").read_text() if (src / "NOTICE").is_file() else ""
    (Path(tmp.name) / "NOTICE").write_text(notice.rstrip() + "\n\nModified by autocompress: pruned (the shapes in "
                                          "config.json) and distilled from the model above.\n")
    return (src / TERMS_FILES[0], Path(tmp.name) / "NOTICE"), tmp


def config(folder) -> HybridConfig:
    return config_of(folder, gemma3_config)


# its exports load through evaluate.heldout.load_exported, like every family's
FAMILY = hybrid_family("gemma3", load, config, export)
