"""Mixtral, Qwen2-MoE and Qwen3-MoE ``config.json`` -> ``Architecture``, torch-free (``acc check`` reads it).

Defaults follow the transformers config classes (5.x), because a config.json only lists the values
that differ from them. What the IR does not carry is counted in ``notes``: Qwen2-MoE's q/k/v biases
and shared-expert gate, Qwen3-MoE's q/k norms (< 0.01% of the parameters).
"""

from __future__ import annotations

from autocompress.ir import MLP, Architecture, Attention, Block, MoE
from autocompress.parents import config_access as ca
from autocompress.parents.config_access import Cfg, ConfigError


def mixtral(c: Cfg, name: str) -> Architecture:
    hidden, heads, kv, hd = ca.heads(c)
    layers = c.int("num_hidden_layers")
    window = c.int("sliding_window") if c.has("sliding_window") else None
    windows = ca.layer_windows(c, layers, window, lambda i: True)
    experts = c.int("num_local_experts", 8)
    moe = MoE(experts, c.int("num_experts_per_tok", 2), c.int("intermediate_size"), 0, 0, True,
              ca.act(c, "hidden_act", "silu"))
    blocks = [Block(Attention(heads, kv, hd, windows[i]), moe) for i in range(layers)]
    return ca.arch(c, "mixtral", blocks, hidden, heads, hd, False, 4096 * 32, name, [])


def qwen_moe(c: Cfg, name: str) -> Architecture:
    """Qwen2-MoE / Qwen3-MoE: MoE where ``(i+1) % decoder_sparse_step == 0`` and i not in mlp_only_layers."""
    qwen3 = c.raw.get("model_type") == "qwen3_moe"
    hidden, heads, kv, hd = ca.heads(c, 128 if qwen3 else None)
    layers = c.int("num_hidden_layers")
    step = c.int("decoder_sparse_step", 1)
    dense_only = c.list("mlp_only_layers")
    if any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < layers for i in dense_only):
        raise ConfigError(f"{c.where}: 'mlp_only_layers' must list layer indices (0 to num_hidden_layers - 1)",
                          "mlp_only_layers")
    act = ca.act(c, "hidden_act", "silu")
    # transformers 5 writes Qwen3-MoE's count as num_local_experts (its attribute_map), 4.x as num_experts
    key = "num_experts" if c.has("num_experts") or not c.has("num_local_experts") else "num_local_experts"
    experts = c.int(key, 128 if qwen3 else 60)
    top_k = c.int("num_experts_per_tok", 8 if qwen3 else 4)
    width = c.int("moe_intermediate_size", 768 if qwen3 else 1408)
    shared_width = 0 if qwen3 else c.int("shared_expert_intermediate_size", 5632, minimum=0)
    moe = MoE(experts, top_k, width, 1 if shared_width else 0, shared_width, True, act)
    dense = MLP(c.int("intermediate_size"), True, act)
    window = c.int("sliding_window") if c.bool("use_sliding_window", False) and c.has("sliding_window") else None
    start = c.int("max_window_layers", layers, minimum=0)
    windows = ca.layer_windows(c, layers, window, lambda i: i >= start)
    blocks = [Block(Attention(heads, kv, hd, windows[i]),
                    moe if i not in dense_only and (i + 1) % step == 0 else dense) for i in range(layers)]
    notes = ["q/k RMSNorm (2 x head_dim per layer) not counted" if qwen3 else
             "q/k/v biases and the shared-expert gate (hidden per layer) not counted"]
    return ca.arch(c, c.raw["model_type"], blocks, hidden, heads, hd, False, 40960 if qwen3 else 32768, name, notes)
