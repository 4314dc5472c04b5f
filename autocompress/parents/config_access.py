"""Typed, checked access to a Hugging Face ``config.json`` (``Cfg``) and the helpers every family's
reader (``families/<name>/config.py``) shares: heads, sliding windows, activation names, the final IR. Every
failure is a ``ConfigError`` naming the offending key and what it must hold, never the value found:
the file is the user's (or, for a spec from a pull request, anyone's), and a message that quoted it
would carry its contents into a review comment.
"""

from __future__ import annotations

from typing import Any, Callable

from autocompress.ir import Architecture, Block

class ConfigError(ValueError):
    """A config.json we cannot turn into an architecture. ``key`` names the offending key."""

    def __init__(self, message: str, key: str = "", hint: str = ""):
        super().__init__(message)
        self.key = key
        self.hint = hint


class Cfg:
    """Typed, checked access to a config dict; every failure names the key."""

    def __init__(self, raw: dict[str, Any], where: str = "config.json"):
        self.raw = raw
        self.where = where

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.raw.get(key)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.where}: missing required key '{key}'", key)
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{self.where}: '{key}' must be an integer >= {minimum}", key)
        return value

    def float(self, key: str, default: float | None = None) -> float:
        value = self.raw.get(key)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.where}: missing required key '{key}'", key)
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{self.where}: '{key}' must be a positive number", key)
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where}: '{key}' must be true or false", key)
        return value

    def str(self, key: str, default: str) -> str:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ConfigError(f"{self.where}: '{key}' must be a string", key)
        return value

    def list(self, key: str, default: list | None = None) -> list:
        value = self.raw.get(key)
        if value is None:
            return [] if default is None else default
        if not isinstance(value, list):
            raise ConfigError(f"{self.where}: '{key}' must be a list", key)
        return value

    def dict(self, key: str) -> dict:
        value = self.raw.get(key)
        if not isinstance(value, dict):
            raise ConfigError(f"{self.where}: '{key}' must be an object", key)
        return value


# ---- shared pieces ----------------------------------------------------------------------------

def heads(c: Cfg, default_head_dim: int | None = None) -> tuple[int, int, int, int]:
    """(hidden, q heads, kv heads, head_dim); head_dim explicit (Qwen3, Gemma3, Mistral-Nemo) or d/H."""
    hidden = c.int("hidden_size")
    heads = c.int("num_attention_heads")
    kv = c.int("num_key_value_heads", heads)
    if c.has("head_dim"):
        head_dim = c.int("head_dim")
    elif default_head_dim is not None:
        head_dim = default_head_dim
    else:
        if hidden % heads:
            raise ConfigError(f"{c.where}: hidden_size must be a multiple of num_attention_heads when no head_dim "
                              "is given", "head_dim")
        head_dim = hidden // heads
    if heads % kv:
        raise ConfigError(f"{c.where}: num_key_value_heads must divide num_attention_heads", "num_key_value_heads")
    return hidden, heads, kv, head_dim


def layer_windows(c: Cfg, layers: int, window: int | None, sliding: Callable[[int], bool]) -> list[int | None]:
    """Per-layer sliding window: an explicit ``layer_types`` list wins over the family's rule."""
    types = c.list("layer_types")
    if types:
        if len(types) != layers:
            raise ConfigError(f"{c.where}: 'layer_types' must have one entry per layer (num_hidden_layers)",
                              "layer_types")
        if any(t not in ("full_attention", "sliding_attention") for t in types):
            raise ConfigError(f"{c.where}: 'layer_types' may hold only full_attention and sliding_attention",
                              "layer_types")
        return [window if t == "sliding_attention" and window else None for t in types]
    return [window if window and sliding(i) else None for i in range(layers)]


def arch(c: Cfg, family: str, blocks: list[Block], hidden: int, heads: int, head_dim: int,
          tie_default: bool, max_pos_default: int, name: str, notes: list[str]) -> Architecture:
    return Architecture(
        family=family,
        vocab_size=c.int("vocab_size"),
        hidden_size=hidden,
        num_heads=heads,
        head_dim=head_dim,
        tie_embeddings=c.bool("tie_word_embeddings", tie_default),
        blocks=tuple(blocks),
        max_position=c.int("max_position_embeddings", max_pos_default),
        name=name,
        notes=tuple(notes),
    )


def act(c: Cfg, key: str, default: str) -> str:
    return c.str(key, default)

