"""The NemotronH build family: hybrid Mamba2 / attention / MLP / MoE parents, exported as NemotronH
(homogeneous result) or NemotronH-Puzzle (per-layer sizes).

The torch side is the hybrid one (``nn.hybrid``, ``nn.mamba2``, ``compress.hybrid_*``); this
module holds the checkpoint names, the forward's globals and the exported config.

**Export** (what vLLM 0.32's ``nemotron_h.py`` and transformers 5.19 load):

* every layer of a kind the same size and no layer removed: stock ``nemotron_h``
  (``NemotronHForCausalLM``, ``layers_block_type``), no remote code;
* otherwise ``nemotron_h_puzzle`` (``NemotronHPuzzleForCausalLM``, which vLLM maps to the same
  ``nemotron_h.py``): ``block_configs`` with one entry per kept layer (``block_type`` plus that
  layer's ``num_key_value_heads`` / ``intermediate_size`` / ``n_routed_experts`` /
  ``moe_intermediate_size``), removed layers dropped (the block list is the layer list), the
  global ``n_routed_experts`` the largest per-layer count (vLLM sizes expert weights by it), and
  the config class (vLLM calls its ``get_nemotron_h_config_for_layer``) plus a transformers
  model class shipped in the folder (``auto_map``, ``trust_remote_code=True``):
  ``modeling/configuration_nemotron_h_puzzle.py``, ``modeling/modeling_nemotron_h_puzzle.py``.

Mamba2 sizes stay global (vLLM builds every Mamba layer and the state cache from the global
config); grouped expert routing (``n_group > 1``) and latent MoE projections are refused at load:
removing experts would break the groups, and the forward has no latent projections.
"""

from __future__ import annotations

from dataclasses import replace

from autocompress.families import _checkpoint as ck
from autocompress.ir import MLP, Architecture, Attention, Block, Mamba2, MoE
from autocompress.nn.hybrid import HybridConfig, pn
from autocompress.nn.moe import Router

KIND = {Mamba2: "mamba", Attention: "attention", MLP: "mlp", MoE: "moe"}
HF_KIND = {"mamba": "linear_attention", "attention": "full_attention", "mlp": "mlp", "moe": "moe"}


def kind(b: Block) -> str:
    return KIND[type(b.mixer if b.mixer is not None else b.ffn)]


def hybrid_config(native: dict, arch: Architecture) -> HybridConfig:
    for key, why in (("moe_latent_size", "latent MoE projections are not in the functional forward"),
                     ("mlp_bias", "MLP biases are not in the functional forward"),
                     ("use_bias", "Mamba2 projection biases are not in the functional forward"),
                     ("attention_bias", "attention biases are not in the functional forward")):
        if native.get(key):
            raise NotImplementedError(f"{key} {native[key]!r}: {why}")
    if int(native.get("n_group", 1)) > 1:
        raise NotImplementedError(f"n_group {native['n_group']}: grouped expert routing (removing experts would "
                                  "unbalance the groups)")
    moe = next((b.ffn for b in arch.blocks if isinstance(b.ffn, MoE)), None)
    router = None if moe is None else Router("sigmoid", moe.top_k, bool(native.get("norm_topk_prob", True)),
                                             float(native.get("routed_scaling_factor", 1.0)))
    return HybridConfig(arch, float(native.get("layer_norm_epsilon", native.get("norm_eps", 1e-5))), None,
                        router=router, dt_min=float(native.get("time_step_min", 0.001)),
                        conv_bias=bool(native.get("use_conv_bias", True)), native=native)


def names(cfg: HybridConfig, prefix: str = "backbone") -> tuple[dict[str, str], dict[str, str]]:
    """(plain, experts) name maps (``_checkpoint``): transformers' saved layout (``backbone.*``, per
    expert), which vLLM loads; layers are numbered among the present ones (removed ones dropped)."""
    A = cfg.arch
    plain = {"embed": f"{prefix}.embeddings.weight", "norm_f": f"{prefix}.norm_f.weight"}
    if not A.tie_embeddings:
        plain["lm_head"] = "lm_head.weight"
    experts = {}
    kept = [l for l, b in enumerate(A.blocks) if b.mixer is not None or b.ffn is not None]
    for j, l in enumerate(kept):
        b = A.blocks[l]
        p = f"{prefix}.layers.{j}."
        plain[pn(l, "mixer_norm" if b.mixer is not None else "ffn_norm")] = p + "norm.weight"
        k, m = kind(b), p + "mixer."
        if k == "mamba":
            for n in ("in_proj", "out_proj", "norm"):
                plain[pn(l, "ssm_norm" if n == "norm" else n)] = f"{m}{n}.weight"
            plain[pn(l, "conv_w")] = m + "conv1d.weight"
            if cfg.conv_bias:
                plain[pn(l, "conv_b")] = m + "conv1d.bias"
            for n in ("A_log", "D", "dt_bias"):
                plain[pn(l, n)] = m + n
        elif k == "attention":
            for n in "qkvo":
                plain[pn(l, n)] = f"{m}{n}_proj.weight"
        elif k == "mlp":
            plain[pn(l, "up")], plain[pn(l, "down")] = m + "up_proj.weight", m + "down_proj.weight"
        else:
            plain[pn(l, "router")], plain[pn(l, "router_bias")] = m + "gate.weight", m + "gate.e_score_correction_bias"
            experts[pn(l, "e_up")] = m + "experts.{e}.up_proj.weight"
            experts[pn(l, "e_down")] = m + "experts.{e}.down_proj.weight"
            if b.ffn.shared_experts:
                plain[pn(l, "s_up")] = m + "shared_experts.up_proj.weight"
                plain[pn(l, "s_down")] = m + "shared_experts.down_proj.weight"
    return plain, experts


def load(folder):
    """(canonical fp32 params, HybridConfig) of a NemotronH or NemotronH-Puzzle folder (per-expert or
    fused experts, ``backbone.*`` or ``model.*`` names)."""
    from autocompress.parents.hf_config import architecture_from_config

    native, tensors = ck.read_folder(folder)
    arch = architecture_from_config(native)
    cfg = hybrid_config(native, arch)
    if any(k.startswith("model.") for k in tensors):  # transformers' in-memory names
        tensors = {("backbone." + k[6:] if k.startswith("model.") else k): v for k, v in tensors.items()}
    tensors = {k: (v.squeeze(1) if k.endswith("conv1d.weight") else v) for k, v in tensors.items()}
    if arch.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    plain, experts = names(cfg)
    counts = {k: cfg.arch.blocks[int(k[1:].split(".")[0])].ffn.experts for k in experts}
    stacked = {k: v.replace(".{e}.", ".").removesuffix(".weight") for k, v in experts.items()}  # experts.up_proj
    fused = {k: (n, 0, tensors[n].shape[1]) for k, n in stacked.items() if n in tensors}
    return ck.to_canonical(tensors, plain, experts, counts, fused), cfg


def _json_floats(v):
    """transformers writes inf as ``{"__float__": "Infinity"}`` in config.json (``time_step_limit``)."""
    if isinstance(v, dict) and set(v) == {"__float__"}:
        return float(v["__float__"])
    return [_json_floats(x) for x in v] if isinstance(v, list) else v


def puzzle_config(cfg: HybridConfig, arch: Architecture) -> tuple[dict, bool]:
    """(exported config.json content, whether it needs the Puzzle format)."""
    c = {k: _json_floats(v) for k, v in cfg.native.items() if k not in (
        "_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures", "auto_map",
        "hybrid_override_pattern", "num_hidden_layers", "layers_block_type", "block_configs", "model_type")}
    kept = [b for b in arch.blocks if b.mixer is not None or b.ffn is not None]
    by = {k: [b for b in kept if kind(b) == k] for k in ("mamba", "attention", "mlp", "moe")}
    sizes = {"attention": {b.mixer.kv_heads for b in by["attention"]}, "mlp": {b.ffn.width for b in by["mlp"]},
             "moe": {(b.ffn.experts, b.ffn.expert_width) for b in by["moe"]}}
    puzzle = len(kept) < arch.num_layers or any(len(s) > 1 for s in sizes.values())
    c["hidden_size"] = arch.hidden_size
    if by["mamba"]:
        c["mamba_num_heads"] = by["mamba"][0].mixer.heads
    if by["attention"]:
        c["num_key_value_heads"] = max(sizes["attention"])
    if by["mlp"]:
        c["intermediate_size"] = max(sizes["mlp"])
    if by["moe"]:  # vLLM sizes the expert weights by the largest count (nemotron_h.py _get_max_n_routed_experts)
        c["n_routed_experts"] = max(e for e, _ in sizes["moe"])
        c["moe_intermediate_size"] = max(w for _, w in sizes["moe"])
    if not puzzle:
        c["layers_block_type"] = [HF_KIND[kind(b)] for b in kept]
        return c, False
    blocks = []
    for b in kept:
        k = kind(b)
        entry = {"block_type": k}
        if k == "attention":
            entry["num_key_value_heads"] = b.mixer.kv_heads
        elif k == "mlp":
            entry["intermediate_size"] = b.ffn.width
        elif k == "moe":
            entry.update(n_routed_experts=b.ffn.experts, moe_intermediate_size=b.ffn.expert_width)
        blocks.append(entry)
    c["block_configs"] = blocks
    return c, True


def export(out, arch, state, tokenizer_dir, extras, overwrite=True, spec_path=None, strategy=None) -> str:
    """Write the student as NemotronH or NemotronH-Puzzle (module docstring), atomically."""
    from autocompress.compress.hybrid_extract import canonical_state
    from autocompress.export.writer import write_checkpoint
    from autocompress.modeling import register as modeling

    parent: HybridConfig = extras["cfg"]
    scfg = replace(parent, arch=arch)
    canon = canonical_state(state, scfg)
    plain, experts = names(scfg)
    tensors = ck.from_canonical(canon, plain, experts)
    tensors = {k: (v[:, None, :] if k.endswith("conv1d.weight") else v) for k, v in tensors.items()}
    c, puzzle = puzzle_config(parent, arch)
    if puzzle:
        from autocompress.modeling.configuration_nemotron_h_puzzle import NemotronHPuzzleConfig

        config = NemotronHPuzzleConfig(**c)
        config.architectures = ["NemotronHPuzzleForCausalLM"]
        config.auto_map = dict(modeling.PUZZLE_AUTO_MAP)
        files = tuple(modeling.source_dir() / n for n in modeling.PUZZLE_FILES)
    else:
        from transformers import NemotronHConfig

        config, files = NemotronHConfig(**c), ()
        config.architectures = ["NemotronHForCausalLM"]
    write_checkpoint(out, config, tensors, tokenizer_dir, extra_files=files, overwrite=overwrite,
                     spec_path=spec_path, strategy=strategy)
    return "nemotron_h_puzzle" if puzzle else "nemotron_h"


def config(folder) -> HybridConfig:
    from autocompress.families._hybrid import config_of

    return config_of(folder, hybrid_config)


def _family():
    from autocompress.families._hybrid import hybrid_family

    return hybrid_family("nemotron_h", __name__, load, config, export)


FAMILY = _family()
