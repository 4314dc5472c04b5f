"""NemotronH and NemotronH-Puzzle ``config.json`` -> ``Architecture``, torch-free (``acc check`` reads it).

Three ways a NemotronH config states its layers, all read here:

* transformers >= 5 (``save_pretrained``): ``layers_block_type``, a list of ``linear_attention``
  (Mamba2), ``full_attention``, ``mlp`` and ``moe`` (the legacy names ``mamba`` / ``attention``
  are remapped, as ``transformers.configuration_utils.remap_legacy_layer_types`` does); no
  ``num_hidden_layers`` and no ``hybrid_override_pattern``. transformers takes the list's length
  as the layer count and ignores a disagreeing ``num_hidden_layers``; so do we.
* public checkpoints (transformers 4.x): ``hybrid_override_pattern``, one character per layer
  (``M`` Mamba2, ``*`` attention, ``-`` MLP, ``E`` MoE) and ``num_hidden_layers``.
* NemotronH-Puzzle (``model_type: nemotron_h_puzzle``, what ``acc build`` exports for a
  heterogeneous result): ``block_configs``, one object per layer with ``block_type``
  (``mamba`` / ``attention`` / ``mlp`` / ``moe``) and that layer's overrides of the global keys
  (vLLM's ``nemotron_h.py`` reads them through the config's ``get_nemotron_h_config_for_layer``).
  Mamba sizes are global in vLLM 0.32 (the state cache is shaped from the global config), so a
  per-layer Mamba override is refused rather than silently ignored.

MLP and MoE experts are non-gated (relu2); MoE layers have shared experts.
"""

from __future__ import annotations

from autocompress.ir import MLP, Architecture, Attention, Block, Mamba2, MoE
from autocompress.parents import config_access as ca
from autocompress.parents.config_access import Cfg, ConfigError

PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
LAYER_TYPES = {"linear_attention": "mamba", "mamba": "mamba", "full_attention": "attention",
               "attention": "attention", "mlp": "mlp", "moe": "moe"}
MAMBA_KEYS = ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel")


def layer_kinds(c: Cfg) -> list[str]:
    """The kind of every layer (``mamba`` / ``attention`` / ``mlp`` / ``moe``), from whichever key
    the config uses (module docstring)."""
    if c.raw.get("model_type") == "nemotron_h_puzzle" and c.has("block_configs"):
        out = []
        for i, bc in enumerate(c.list("block_configs")):
            kind = bc.get("block_type") if isinstance(bc, dict) else None
            if kind not in ("mamba", "attention", "mlp", "moe"):
                raise ConfigError(f"{c.where}: block_configs[{i}].block_type may be mamba, attention, mlp or moe",
                                  "block_configs")
            out.append(kind)
        if not out:
            raise ConfigError(f"{c.where}: 'block_configs' must list one block per layer", "block_configs")
        return out
    if c.has("layers_block_type"):
        types = c.list("layers_block_type")
        if not types or any(not isinstance(t, str) or t not in LAYER_TYPES for t in types):
            raise ConfigError(f"{c.where}: 'layers_block_type' must be a non-empty list of linear_attention (or "
                              "mamba), full_attention (or attention), mlp and moe", "layers_block_type")
        return [LAYER_TYPES[t] for t in types]
    layers = c.int("num_hidden_layers")
    pattern = c.str("hybrid_override_pattern", "")
    if len(pattern) != layers:
        raise ConfigError(f"{c.where}: 'hybrid_override_pattern' must have one character per layer "
                          "(num_hidden_layers)", "hybrid_override_pattern")
    if set(pattern) - set(PATTERN):
        raise ConfigError(f"{c.where}: 'hybrid_override_pattern' may hold only M (Mamba2), * (attention), "
                          "- (MLP) and E (MoE)", "hybrid_override_pattern")
    return [PATTERN[ch] for ch in pattern]


def _overrides(c: Cfg, n: int) -> list[Cfg]:
    """Per layer: the global config with that layer's ``block_configs`` overrides (Puzzle)."""
    blocks = c.list("block_configs") if c.raw.get("model_type") == "nemotron_h_puzzle" else []
    out = []
    for i in range(n):
        over = {k: v for k, v in (blocks[i] if i < len(blocks) else {}).items() if k != "block_type"}
        fixed = sorted(k for k in over if k in MAMBA_KEYS and over[k] != c.raw.get(k))
        if fixed:
            raise ConfigError(f"{c.where}: block_configs[{i}] overrides {', '.join(fixed)}; Mamba2 sizes are global "
                              "in vLLM's NemotronH (the state cache is shaped from the global config)", "block_configs")
        out.append(Cfg({**c.raw, **over}, f"{c.where}: block_configs[{i}]" if over else c.where))
    return out


def head_dim(c: Cfg, hidden: int, heads: int) -> int:
    if c.has("head_dim"):
        return c.int("head_dim")
    if c.has("attention_head_dim"):
        return c.int("attention_head_dim")
    return hidden // heads


def nemotron_h(c: Cfg, name: str) -> Architecture:
    """NemotronH / NemotronH-Puzzle: one mixer or FFN per layer (module docstring)."""
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    hd = head_dim(c, hidden, heads)
    kinds = layer_kinds(c)
    act = ca.act(c, "mlp_hidden_act", "relu2")
    blocks = []
    for kind, lc in zip(kinds, _overrides(c, len(kinds))):
        if kind == "mamba":
            mamba = Mamba2(c.int("mamba_num_heads"), c.int("mamba_head_dim"), c.int("ssm_state_size"),
                           c.int("n_groups", 8), c.int("conv_kernel", 4))
            blocks.append(Block(mamba, None))
        elif kind == "attention":
            if lc.int("num_attention_heads") != heads or head_dim(lc, hidden, heads) != hd:
                raise ConfigError(f"{lc.where}: query heads and head_dim must be the global ones", "block_configs")
            window = lc.int("sliding_window") if lc.has("sliding_window") else None
            kv = lc.int("num_key_value_heads", heads)
            if heads % kv:
                raise ConfigError(f"{lc.where}: num_key_value_heads must divide num_attention_heads",
                                  "num_key_value_heads")
            blocks.append(Block(Attention(heads, kv, hd, window), None))
        elif kind == "mlp":
            blocks.append(Block(None, MLP(lc.int("intermediate_size"), False, act)))
        else:
            shared = lc.int("n_shared_experts", 1, minimum=0)
            blocks.append(Block(None, MoE(lc.int("n_routed_experts"), lc.int("num_experts_per_tok"),
                                          lc.int("moe_intermediate_size"), shared,
                                          lc.int("moe_shared_expert_intermediate_size") if shared else 0,
                                          False, act)))
    notes = ["router score-correction bias (experts per MoE layer) not counted"] if "moe" in kinds else []
    return ca.arch(c, "nemotron_h", blocks, hidden, heads, hd, False, 4096, name, notes)
