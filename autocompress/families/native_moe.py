"""The native MoE build family: Mixtral, Qwen2-MoE, Qwen3-MoE, exported in their own formats.

The torch side is the hybrid one (``nn.hybrid`` forward, ``compress.hybrid_*``); this module
holds what is particular to these checkpoints: names, the forward's globals, the exported config.

What stock vLLM 0.32 serves (``mixtral.py``, ``qwen2_moe.py``, ``qwen3_moe.py``; research notes in
docs/decisions.md, 2026-12-01) decides the search space (``registry.NATIVE_MOE``): every layer is
built from the global expert count, expert width, top-k and KV heads, and there is no per-layer
no-op, so one size per axis for all layers; which experts a layer keeps is free.

Checkpoints are read in the per-expert layout transformers 5.19 ``save_pretrained`` writes by
default (``...experts.{e}.w1`` for Mixtral, ``...experts.{e}.gate_proj`` for Qwen) or in its
in-memory fused layout (``mlp.experts.gate_up_proj``), and always written per expert: vLLM rejects
a fused Mixtral checkpoint. A Qwen2-MoE shared expert is never pruned to zero (vLLM cannot load
the zero-size tensors transformers would write).
"""

from __future__ import annotations

from dataclasses import replace

from autocompress.families import _checkpoint as ck
from autocompress.ir import MLP, Architecture, MoE
from autocompress.nn.hybrid import HybridConfig, pn
from autocompress.nn.moe import Router

ARCHITECTURES = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


def _rope_theta(c: dict, default: float) -> float:
    rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise NotImplementedError(f"RoPE type {kind!r}: the functional forward has the default, unscaled RoPE only")
    return float(rope.get("rope_theta", c.get("rope_theta", default)))


def hybrid_config(native: dict, arch: Architecture) -> HybridConfig:
    mt = native["model_type"]
    if native.get("mlp_bias") or (mt != "qwen2_moe" and native.get("attention_bias")):
        raise NotImplementedError("MLP / output-projection biases are not in the functional forward")
    moe = next((b.ffn for b in arch.blocks if isinstance(b.ffn, MoE)), None)
    router = None if moe is None else Router("softmax", moe.top_k,
                                             True if mt == "mixtral" else bool(native.get("norm_topk_prob", False)))
    return HybridConfig(arch, float(native.get("rms_norm_eps", 1e-5 if mt == "mixtral" else 1e-6)),
                        _rope_theta(native, 1e6 if mt == "mixtral" else 10000.0),
                        attn_bias=mt == "qwen2_moe" and bool(native.get("qkv_bias", True)),
                        qk_norm=mt == "qwen3_moe", router=router, shared_gate=mt == "qwen2_moe", native=native)


def names(cfg: HybridConfig) -> tuple[dict[str, str], dict[str, str]]:
    """(plain, experts) name maps (``_checkpoint``) for ``cfg.arch`` in this family's layout."""
    mt, A = cfg.native["model_type"], cfg.arch
    plain = {"embed": "model.embed_tokens.weight", "norm_f": "model.norm.weight"}
    if not A.tie_embeddings:
        plain["lm_head"] = "lm_head.weight"
    experts = {}
    moe = "block_sparse_moe" if mt == "mixtral" else "mlp"
    e_names = {"e_gate": "w1", "e_up": "w3", "e_down": "w2"} if mt == "mixtral" else \
        {"e_gate": "gate_proj", "e_up": "up_proj", "e_down": "down_proj"}
    kept = [l for l, b in enumerate(A.blocks) if b.mixer is not None or b.ffn is not None]
    for j, l in enumerate(kept):  # a removed whole layer is absent: the others are renumbered
        b, p = A.blocks[l], f"model.layers.{j}."
        plain[pn(l, "mixer_norm")], plain[pn(l, "ffn_norm")] = p + "input_layernorm.weight", \
            p + "post_attention_layernorm.weight"
        for n in "qkvo":
            plain[pn(l, n)] = f"{p}self_attn.{n}_proj.weight"
        if cfg.attn_bias:
            for n in "qkv":
                plain[pn(l, f"{n}_bias")] = f"{p}self_attn.{n}_proj.bias"
        if cfg.qk_norm:
            plain[pn(l, "q_norm")], plain[pn(l, "k_norm")] = p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"
        if isinstance(b.ffn, MLP):
            for n in ("gate", "up", "down"):
                plain[pn(l, n)] = f"{p}mlp.{n}_proj.weight"
        elif isinstance(b.ffn, MoE):
            plain[pn(l, "router")] = f"{p}{moe}.gate.weight"
            for canon, n in e_names.items():
                experts[pn(l, canon)] = f"{p}{moe}.experts.{{e}}.{n}.weight"
            if b.ffn.shared_experts:
                for n in ("gate", "up", "down"):
                    plain[pn(l, f"s_{n}")] = f"{p}mlp.shared_expert.{n}_proj.weight"
                plain[pn(l, "s_router")] = p + "mlp.shared_expert_gate.weight"
    return plain, experts


def load(folder):
    """(canonical fp32 params, HybridConfig) of a Mixtral / Qwen2-MoE / Qwen3-MoE folder."""
    from autocompress.parents.hf_config import architecture_from_config

    native, tensors = ck.read_folder(folder)
    arch = architecture_from_config(native)
    cfg = hybrid_config(native, arch)
    plain, experts = names(cfg)
    counts = {k: next(b.ffn.experts for i, b in enumerate(arch.blocks) if k.startswith(f"L{i}."))
              for k in experts}
    fused = {}
    for l, b in enumerate(arch.blocks):
        if isinstance(b.ffn, MoE):  # transformers' in-memory layout: gate then up along dim 1
            p, I = f"model.layers.{l}.mlp.experts.", b.ffn.expert_width
            fused.update({pn(l, "e_gate"): (p + "gate_up_proj", 0, I), pn(l, "e_up"): (p + "gate_up_proj", I, I),
                          pn(l, "e_down"): (p + "down_proj", 0, arch.hidden_size)})
    if arch.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    if native["model_type"] == "mixtral":  # the fused layout also renames block_sparse_moe.gate -> mlp.gate
        tensors = {k.replace(".mlp.gate.", ".block_sparse_moe.gate."): v for k, v in tensors.items()}
    return ck.to_canonical(tensors, plain, experts, counts, fused), cfg


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
    from transformers import AutoConfig

    from autocompress.compress.hybrid_extract import canonical_state
    from autocompress.export.writer import write_checkpoint

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
    from autocompress.families._hybrid import config_of

    return config_of(folder, hybrid_config)


def _family():
    from autocompress.families._hybrid import hybrid_family

    return hybrid_family("native-moe", __name__, load, config, export)


FAMILY = _family()
