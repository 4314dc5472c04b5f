"""Hugging Face ``config.json`` -> ``Architecture``, one small builder per ``model_type``.

``FAMILIES`` is the literal registry (style rule 8); a test checks every entry against a real
config in ``examples/configs``. Defaults follow the transformers config classes (5.x), because a
config.json only lists the values that differ from them: e.g. ``tie_word_embeddings`` defaults
to False for Llama/Qwen/Mixtral/NemotronH but True for Gemma3.

What the IR does not carry (counted in ``notes`` where it changes the parameter count): attention
and MLP biases (Qwen2 q/k/v bias), Qwen3's q/k norms, the
Qwen2-MoE shared-expert gate and the NemotronH router bias. Each is < 0.01% of the parameters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from autocompress.ir import MLP, Architecture, Attention, Block, MoE
from autocompress.parents import config_access as ca
from autocompress.parents.config_access import Cfg, ConfigError
from autocompress.parents.nemotron_h_config import nemotron_h


def _llama(c: Cfg, name: str) -> Architecture:
    """Llama / SmolLM2 / Mistral: attention + gated MLP in every layer."""
    hidden, heads, kv, hd = ca.heads(c)
    layers = c.int("num_hidden_layers")
    mistral = c.raw.get("model_type") == "mistral"
    window = None
    if mistral:  # MistralConfig defaults to a 4096 window; an explicit null turns it off
        window = c.int("sliding_window", 4096) if "sliding_window" not in c.raw or c.has("sliding_window") else None
    windows = ca.layer_windows(c, layers, window, lambda i: True)
    mlp = MLP(c.int("intermediate_size"), True, ca.act(c, "hidden_act", "silu"))
    blocks = [Block(Attention(heads, kv, hd, windows[i]), mlp) for i in range(layers)]
    notes = ["attention/MLP biases not modelled"] if c.bool("attention_bias", False) or c.bool("mlp_bias", False) else []
    return ca.arch(c, c.raw["model_type"], blocks, hidden, heads, hd, False, 131072 if mistral else 2048, name, notes)


def _qwen_dense(c: Cfg, name: str) -> Architecture:
    """Qwen2 / Qwen2.5 / Qwen3: Llama blocks; sliding window (if enabled) from max_window_layers on."""
    qwen3 = c.raw.get("model_type") == "qwen3"
    hidden, heads, kv, hd = ca.heads(c, 128 if qwen3 else None)
    layers = c.int("num_hidden_layers")
    window = c.int("sliding_window") if c.bool("use_sliding_window", False) and c.has("sliding_window") else None
    start = c.int("max_window_layers", 28, minimum=0)
    windows = ca.layer_windows(c, layers, window, lambda i: i >= start)
    mlp = MLP(c.int("intermediate_size"), True, ca.act(c, "hidden_act", "silu"))
    blocks = [Block(Attention(heads, kv, hd, windows[i]), mlp) for i in range(layers)]
    notes = ["q/k RMSNorm (2 x head_dim per layer) not counted" if qwen3 else
             "q/k/v projection biases (hidden + 2 x kv_heads x head_dim per layer) not counted"]
    return ca.arch(c, c.raw["model_type"], blocks, hidden, heads, hd, False, 40960 if qwen3 else 32768, name, notes)


def _mixtral(c: Cfg, name: str) -> Architecture:
    hidden, heads, kv, hd = ca.heads(c)
    layers = c.int("num_hidden_layers")
    window = c.int("sliding_window") if c.has("sliding_window") else None
    windows = ca.layer_windows(c, layers, window, lambda i: True)
    experts = c.int("num_local_experts", 8)
    moe = MoE(experts, c.int("num_experts_per_tok", 2), c.int("intermediate_size"), 0, 0, True,
              ca.act(c, "hidden_act", "silu"))
    blocks = [Block(Attention(heads, kv, hd, windows[i]), moe) for i in range(layers)]
    return ca.arch(c, "mixtral", blocks, hidden, heads, hd, False, 4096 * 32, name, [])


def _qwen_moe(c: Cfg, name: str) -> Architecture:
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


def _gemma3(c: Cfg, name: str) -> Architecture:
    """Gemma3 text: head_dim 256 by default; every ``sliding_window_pattern``-th layer is global.

    Query scaling (``query_pre_attn_scalar``), the embedding scale and the local RoPE base do not
    change shapes; the four norms per layer and the q/k head norms are counted (``post_norms``,
    ``qk_norm``), so the IR's count is the published one.
    """
    hidden, heads, kv, hd = ca.heads(c, 256)
    layers = c.int("num_hidden_layers")
    window = c.int("sliding_window", 4096)
    pattern = c.int("sliding_window_pattern", c.int("_sliding_window_pattern", 6))
    windows = ca.layer_windows(c, layers, window, lambda i: (i + 1) % pattern != 0)
    act = ca.act(c, "hidden_activation", "gelu_pytorch_tanh")
    per = _per_layer(c, layers)
    blocks = []
    for i in range(layers):
        o = per.get(i, {})
        skip = o.get("skip") or []
        width = o.get("intermediate_size", c.int("intermediate_size"))
        if not isinstance(width, int) or isinstance(width, bool) or width <= 0:
            raise ConfigError(f"{c.where}: per_layer_config[{i}].intermediate_size must be a positive integer",
                              "per_layer_config")
        blocks.append(Block(None if "self_attn" in skip else Attention(heads, kv, hd, windows[i]),
                            None if "mlp" in skip else MLP(width, True, act)))
    notes = [f"query_pre_attn_scalar {c.raw.get('query_pre_attn_scalar', 256)}"]
    a = ca.arch(c, "gemma3_text", blocks, hidden, heads, hd, True, 131072, name, notes)
    return replace(a, post_norms=True, qk_norm=True)


def _per_layer(c: Cfg, layers: int) -> dict[int, dict]:
    """transformers' heterogeneous ``per_layer_config`` (our Gemma 3 exports): layer -> overrides;
    only ``intermediate_size`` and ``skip`` (``self_attn`` / ``mlp``) are read, others refused."""
    raw = c.raw.get("per_layer_config") or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{c.where}: 'per_layer_config' must map layer indices to overrides", "per_layer_config")
    out = {}
    for k, o in raw.items():
        if not str(k).isdigit() or not 0 <= int(k) < layers or not isinstance(o, dict):
            raise ConfigError(f"{c.where}: 'per_layer_config' keys must be layer indices (0 to num_hidden_layers "
                              "- 1), each with a mapping of overrides", "per_layer_config")
        skip = o.get("skip") or []
        if set(o) - {"intermediate_size", "skip"} or not isinstance(skip, list) or any(
                s not in ("self_attn", "mlp") for s in skip):
            raise ConfigError(f"{c.where}: per_layer_config[{int(k)}] may set only intermediate_size and skip "
                              "(a list of self_attn, mlp)", "per_layer_config")
        out[int(k)] = o
    return out


def ffn_mult_to_intermediate_size(ffn_mult: float, hidden: int) -> int:
    """DeciLM rule: int(2 * ffn_mult * hidden / 3) rounded up to a multiple of 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // 256) * 256


def _decilm(c: Cfg, name: str) -> Architecture:
    """DeciLM / nemotron-nas: global query heads and head_dim, per-block KV heads and FFN width."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    hd = c.int("head_dim") if c.has("head_dim") else hidden // heads
    block_cfgs = c.list("block_configs")
    if not block_cfgs:
        raise ConfigError(f"{c.where}: 'block_configs' must be a non-empty list (one entry per layer)",
                          "block_configs")
    if c.has("num_hidden_layers") and c.int("num_hidden_layers") != len(block_cfgs):
        raise ConfigError(f"{c.where}: 'block_configs' must have one entry per layer (num_hidden_layers)",
                          "block_configs")
    act = ca.act(c, "hidden_act", "silu")
    blocks = []
    for i, bc in enumerate(block_cfgs):
        where = f"{c.where}: block_configs[{i}]"
        if not isinstance(bc, dict):
            raise ConfigError(f"{where} must be an object", "block_configs")
        attn = Cfg(bc.get("attention") or {}, f"{where}.attention")
        ffn = Cfg(bc.get("ffn") or {}, f"{where}.ffn")
        for sub in (attn, ffn):
            if sub.bool("replace_with_linear", False):
                raise ConfigError(f"{sub.where}: replace_with_linear is not supported (the IR has no linear "
                                  "replacement block, and vLLM crashes on it)", "replace_with_linear")
        mixer = None
        if not attn.bool("no_op", False):
            group = attn.int("n_heads_in_group")
            if heads % group:
                raise ConfigError(f"{attn.where}: n_heads_in_group must divide num_attention_heads",
                                  "n_heads_in_group")
            window = attn.int("window_length") if attn.has("window_length") else None
            mixer = Attention(heads, heads // group, hd, window)
        mlp = None
        if not ffn.bool("no_op", False):
            if ffn.has("intermediate_size"):
                width = ffn.int("intermediate_size")
            else:
                width = ffn_mult_to_intermediate_size(ffn.float("ffn_mult"), hidden)
            mlp = MLP(width, True, act)
        blocks.append(Block(mixer, mlp))
    return ca.arch(c, "nemotron-nas", blocks, hidden, heads, hd, False, 2048, name, [])


Builder = Callable[[Cfg, str], Architecture]

# model_type -> builder. Keep in step with examples/configs (tests/parents/test_families.py).
FAMILIES: dict[str, Builder] = {
    "llama": _llama,
    "mistral": _llama,
    "qwen2": _qwen_dense,
    "qwen3": _qwen_dense,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "gemma3_text": _gemma3,
    "nemotron_h": nemotron_h,
    "nemotron_h_puzzle": nemotron_h,  # what acc build exports for a heterogeneous NemotronH
    "nemotron-nas": _decilm,
}


def architecture_from_config(config: dict[str, Any], name: str = "", where: str = "config.json") -> Architecture:
    """Build the IR from a parsed config.json. Raises ``ConfigError`` naming the bad key."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: must be a JSON object")
    model_type = config.get("model_type")
    supported = ", ".join(sorted(FAMILIES))
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{where}: missing 'model_type' (supported: {supported})", "model_type")
    builder = FAMILIES.get(model_type)
    if builder is None:
        raise ConfigError(f"{where}: unsupported model_type; supported: {supported}", "model_type")
    try:
        return builder(Cfg(config, where), name or str(config.get("_name_or_path") or ""))
    except ConfigError:
        raise
    except ValueError as e:  # an IR invariant (e.g. kv heads must divide q heads); its text quotes the sizes
        raise ConfigError(f"{where}: the sizes it gives do not make a valid {model_type} architecture (every size "
                          "positive, KV heads dividing query heads, at least one layer)") from e
    except (TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError) as e:  # a value of the wrong shape
        raise ConfigError(f"{where}: cannot be read as a {model_type} config: a key holds a value of the wrong "
                          "type or shape") from e
