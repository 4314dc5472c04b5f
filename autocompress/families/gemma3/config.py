"""Gemma 3 text ``config.json`` and GGUF metadata -> ``Architecture``, torch-free (``acc check`` reads it).

Defaults follow transformers' ``Gemma3TextConfig`` (5.x), because a config.json only lists the
values that differ from them: head_dim 256, a 4096-token sliding window, every
``sliding_window_pattern``-th layer global, and tied embeddings (True here, unlike the other
families). Our heterogeneous exports add transformers' ``per_layer_config`` (``per_layer``).
"""

from __future__ import annotations

from dataclasses import replace

from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.parents import config_access as ca
from autocompress.parents.config_access import Cfg, ConfigError

# Every 6th layer is global, the others slide: transformers' default ``sliding_window_pattern``, and
# what llama.cpp hard-codes for its ``gemma3`` architecture (GGUF metadata has no key for it).
WINDOW_PATTERN = 6
MODEL_TYPE = "gemma3_text"  # what a GGUF ``gemma3`` file becomes: the model_type of the converted folder
ACTIVATION = "gelu_pytorch_tanh"  # transformers' name, as config.json writes it


def gemma3(c: Cfg, name: str) -> Architecture:
    """Gemma3 text: head_dim 256 by default; every ``sliding_window_pattern``-th layer is global.

    Query scaling (``query_pre_attn_scalar``), the embedding scale and the local RoPE base do not
    change shapes; the four norms per layer and the q/k head norms are counted (``post_norms``,
    ``qk_norm``), so the IR's count is the published one.
    """
    hidden, heads, kv, hd = ca.heads(c, 256)
    layers = c.int("num_hidden_layers")
    window = c.int("sliding_window", 4096)
    pattern = c.int("sliding_window_pattern", c.int("_sliding_window_pattern", WINDOW_PATTERN))
    windows = ca.layer_windows(c, layers, window, lambda i: (i + 1) % pattern != 0)
    act = ca.act(c, "hidden_activation", ACTIVATION)
    per = per_layer(c, layers)
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
    a = ca.arch(c, MODEL_TYPE, blocks, hidden, heads, hd, True, 131072, name, notes)
    return replace(a, post_norms=True, qk_norm=True)


def per_layer(c: Cfg, layers: int) -> dict[int, dict]:
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


def from_gguf(arch: Architecture, window: int | None) -> Architecture:
    """llama.cpp's ``gemma3``: the generic Llama-block reading (``parents.gguf_meta``) with Gemma 3's
    activation, its sliding layers (``WINDOW_PATTERN``), the four norms per layer and the q/k head
    norms, under the family of the converted folder's config.json."""
    blocks = tuple(Block(replace(b.mixer, sliding_window=int(window) if window and (i + 1) % WINDOW_PATTERN else None),
                         replace(b.ffn, activation=ACTIVATION)) for i, b in enumerate(arch.blocks))
    return replace(arch, family=MODEL_TYPE, blocks=blocks, post_norms=True, qk_norm=True)
