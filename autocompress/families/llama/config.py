"""Llama-block ``config.json`` and GGUF metadata -> ``Architecture``, torch-free (``acc check`` reads it).

Read here: Llama / SmolLM2 / Mistral (``llama``, ``mistral``), DeciLM (``nemotron-nas``: per-block
KV heads and FFN widths, removable halves), and the Qwen2 / Qwen2.5 / Qwen3 dense models
(``qwen2``, ``qwen3``). The Qwen dense models are Llama blocks plus q/k/v biases (Qwen2) or q/k
head norms (Qwen3), read with the same helpers; ``acc build`` does not compress them yet
(``registry.NOT_BUILT``: the Llama forward lacks exactly those two pieces), so when it does they
join this family rather than found one of their own.

Defaults follow the transformers config classes (5.x), because a config.json only lists the
values that differ from them (``tie_word_embeddings`` is False for all of these). What the IR does
not carry is counted in ``notes``: Qwen2's q/k/v biases and Qwen3's q/k norms (< 0.01% of the
parameters).
"""

from __future__ import annotations

from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.parents import config_access as ca
from autocompress.parents.config_access import Cfg, ConfigError


def llama(c: Cfg, name: str) -> Architecture:
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


def qwen_dense(c: Cfg, name: str) -> Architecture:
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


def ffn_mult_to_intermediate_size(ffn_mult: float, hidden: int) -> int:
    """DeciLM rule: int(2 * ffn_mult * hidden / 3) rounded up to a multiple of 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // 256) * 256


def decilm(c: Cfg, name: str) -> Architecture:
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


def from_gguf(arch: Architecture, window: int | None) -> Architecture:
    """llama.cpp's ``llama``, ``qwen2`` and ``qwen3`` architectures are plain Llama blocks: the
    generic reading (``parents.gguf_meta``) is the whole architecture; the family is llama.cpp's
    name, which is also the ``model_type`` of the converted folder's config.json."""
    return arch
