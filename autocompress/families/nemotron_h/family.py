"""The NemotronH build family: hybrid Mamba2 / attention / MLP / MoE parents, exported as NemotronH
(homogeneous result) or NemotronH-Puzzle (per-layer sizes).

The torch side is the canonical one (``nn.hybrid``, ``nn.mamba2``, ``prune.*``); this
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

from transformers import NemotronHConfig

from autocompress.export.writer import write_checkpoint
from autocompress.families import checkpoint as ck
from autocompress.families.hybrid import config_of, hybrid_family
from autocompress.families.nemotron_h.load import HF_KIND, hybrid_config, kind, load, names
from autocompress.ir import Architecture
from autocompress.modeling import register as modeling
from autocompress.modeling.configuration_nemotron_h_puzzle import NemotronHPuzzleConfig
from autocompress.nn.hybrid import HybridConfig
from autocompress.prune.extract import canonical_state


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
    parent: HybridConfig = extras["cfg"]
    scfg = replace(parent, arch=arch)
    canon = canonical_state(state, scfg)
    plain, experts = names(scfg)
    tensors = ck.from_canonical(canon, plain, experts)
    tensors = {k: (v[:, None, :] if k.endswith("conv1d.weight") else v) for k, v in tensors.items()}
    c, puzzle = puzzle_config(parent, arch)
    if puzzle:
        config = NemotronHPuzzleConfig(**c)
        config.architectures = ["NemotronHPuzzleForCausalLM"]
        config.auto_map = dict(modeling.PUZZLE_AUTO_MAP)
        files = tuple(modeling.source_dir() / n for n in modeling.PUZZLE_FILES)
    else:
        config, files = NemotronHConfig(**c), ()
        config.architectures = ["NemotronHForCausalLM"]
    write_checkpoint(out, config, tensors, tokenizer_dir, extra_files=files, overwrite=overwrite,
                     spec_path=spec_path, strategy=strategy)
    return "nemotron_h_puzzle" if puzzle else "nemotron_h"


def config(folder) -> HybridConfig:
    return config_of(folder, hybrid_config)


FAMILY = hybrid_family("nemotron_h", load, config, export)
