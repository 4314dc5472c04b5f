"""Reading a Mixtral / Qwen2-MoE / Qwen3-MoE checkpoint: its tensor names, the forward's globals, ``load``.

The parent loader the importance, teacher and parent-quality stages run. It is a module apart
from the family's (``families.native_moe.family``: export, ``FAMILY``) because those stages' cache keys hash
the code they run (``families.hybrid.hybrid_family``): an edit of the export or the search
must not re-run an hour of importance and teacher outputs.
"""

from __future__ import annotations

from autocompress.families import checkpoint as ck
from autocompress.ir import MLP, Architecture, MoE
from autocompress.nn.hybrid import HybridConfig, pn
from autocompress.nn.moe import Router
from autocompress.parents.hf_config import architecture_from_config


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
    """(plain, experts) name maps (``families.checkpoint``) for ``cfg.arch`` in this family's layout."""
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
