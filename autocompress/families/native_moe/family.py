"""The native MoE build family: Mixtral, Qwen2-MoE, Qwen3-MoE, exported in their own formats.

The torch side is the canonical one (``nn.hybrid`` forward, ``prune.*``, ``families.hybrid``); this
module holds what is particular to these checkpoints: names, the forward's globals, the exported config.

What stock vLLM 0.32 serves (``mixtral.py``, ``qwen2_moe.py``, ``qwen3_moe.py``) decides the
search space (``registry.NATIVE_MOE``): every layer is built from the global expert count, expert
width, top-k and KV heads, and there is no per-layer no-op, so one size per axis for all layers;
which experts a layer keeps is free.

Checkpoints are read in the per-expert layout transformers 5.19 ``save_pretrained`` writes by
default (``...experts.{e}.w1`` for Mixtral, ``...experts.{e}.gate_proj`` for Qwen) or in its
in-memory fused layout (``mlp.experts.gate_up_proj``), and always written per expert: vLLM rejects
a fused Mixtral checkpoint. A Qwen2-MoE shared expert is never pruned to zero (vLLM cannot load
the zero-size tensors transformers would write).
"""

from __future__ import annotations

from dataclasses import replace

from transformers import AutoConfig

from autocompress.export.writer import write_checkpoint
from autocompress.families import checkpoint as ck
from autocompress.families.hybrid import config_of, hybrid_family
from autocompress.families.native_moe.load import hybrid_config, load, names
from autocompress.ir import MLP, Architecture, MoE
from autocompress.nn.hybrid import HybridConfig
from autocompress.prune.extract import canonical_state

ARCHITECTURES = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


def native_config(cfg: HybridConfig, arch: Architecture) -> dict:
    """The exported ``config.json`` content: the parent's, with the pruned global sizes."""
    mt = cfg.native["model_type"]
    c = {k: v for k, v in cfg.native.items()
         if k not in ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures", "auto_map")}
    idx = [l for l, b in enumerate(arch.blocks) if b.mixer is not None or b.ffn is not None]
    kept = [arch.blocks[l] for l in idx]
    if isinstance(c.get("layer_types"), list) and len(c["layer_types"]) == arch.num_layers:
        c["layer_types"] = [c["layer_types"][l] for l in idx]
    att = next(b.attention for b in kept if b.attention)
    c.update(hidden_size=arch.hidden_size, num_key_value_heads=att.kv_heads, head_dim=arch.head_dim,
             num_hidden_layers=len(kept), tie_word_embeddings=arch.tie_embeddings)
    moes = {b.ffn for b in kept if isinstance(b.ffn, MoE)}
    mlps = {b.ffn.width for b in kept if isinstance(b.ffn, MLP)}
    kvs = {b.attention.kv_heads for b in kept if b.attention}
    if len(moes) > 1 or len(mlps) > 1 or len(kvs) > 1 or any(b.mixer is None or b.ffn is None for b in kept):
        raise ValueError(f"{mt} has one expert count, expert width, dense width and KV-head count for all "
                         "layers and no half-removed layer; this architecture differs per layer")
    if mt != "mixtral":  # which kept layers are dense, by their new index
        c.update(decoder_sparse_step=1, mlp_only_layers=[j for j, b in enumerate(kept) if isinstance(b.ffn, MLP)])
    if moes:
        m = moes.pop()
        if mt == "mixtral":
            c.update(num_local_experts=m.experts, intermediate_size=m.expert_width)
        else:
            c.pop("num_local_experts", None)
            c.update(num_experts=m.experts, moe_intermediate_size=m.expert_width)
    if mlps:
        c["intermediate_size"] = mlps.pop()
    return c


def export(out, arch, state, tokenizer_dir, extras, overwrite=True, spec_path=None, strategy=None) -> str:
    """Write the student in the parent's own format (per-expert tensors), atomically."""
    parent: HybridConfig = extras["cfg"]
    scfg = replace(parent, arch=arch)
    canon = canonical_state(state, scfg)
    plain, experts = names(scfg)
    c = native_config(parent, arch)
    config = AutoConfig.for_model(c.pop("model_type"), **c)
    config.architectures = [ARCHITECTURES[parent.native["model_type"]]]
    write_checkpoint(out, config, ck.from_canonical(canon, plain, experts), tokenizer_dir, overwrite=overwrite,
                     spec_path=spec_path, strategy=strategy)
    return parent.native["model_type"]


def config(folder) -> HybridConfig:
    return config_of(folder, hybrid_config)


FAMILY = hybrid_family("native-moe", load, config, export)
