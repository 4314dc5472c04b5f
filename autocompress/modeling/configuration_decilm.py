"""Configuration of the DeciLM ("nemotron-nas") format: a Llama with one block config per layer.

Self-contained on purpose: this file is copied next to ``config.json`` in every exported
checkpoint and loaded with ``trust_remote_code=True`` by processes that never import
autocompress (stock transformers, stock vLLM). It may import only torch-free transformers API.

Format (vLLM ``model_executor/models/nemotron_nas.py``; NVIDIA's DeciLM checkpoints)::

    "block_configs": [
      {"attention": {"no_op": false, "replace_with_linear": false, "n_heads_in_group": 4},
       "ffn":       {"no_op": false, "replace_with_linear": false, "intermediate_size": 1536}},
      ...]

* KV heads of a layer = ``num_attention_heads // n_heads_in_group``; query heads and head_dim are global.
* FFN width: explicit ``intermediate_size``, or ``ffn_mult`` -> ``int(2 * ffn_mult * hidden / 3)`` rounded
  up to a multiple of 256 (vLLM ``_ffn_mult_to_intermediate_size``).
* ``no_op``: the sub-block and its pre-norm are absent; the residual passes through.

vLLM reads the block configs as attributes (``config.block_configs[i].attention.no_op``) and tests
``hasattr(block.ffn, "ffn_mult")`` to choose between the two width keys, so each sub-config is a
namespace holding exactly the keys of the JSON (no defaulted ``ffn_mult = None``). ``to_dict`` turns them
back into plain dicts for ``config.json``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from transformers import PretrainedConfig


def ffn_mult_to_intermediate_size(ffn_mult: float, hidden_size: int) -> int:
    """DeciLM's width rule (vLLM ``_ffn_mult_to_intermediate_size``): 2/3 * mult * d, up to a multiple of 256."""
    n = int(2 * ffn_mult * hidden_size / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


def _block_to_namespace(block: Any) -> SimpleNamespace:
    if isinstance(block, SimpleNamespace):
        block = _block_to_dict(block)
    if not isinstance(block, dict) or not {"attention", "ffn"} <= set(block):
        raise ValueError(f"a block config needs 'attention' and 'ffn' entries, got {block!r}")
    attention = {"no_op": False, "replace_with_linear": False, **block["attention"]}
    ffn = {"no_op": False, "replace_with_linear": False, **block["ffn"]}
    rest = {k: v for k, v in block.items() if k not in ("attention", "ffn")}
    return SimpleNamespace(attention=SimpleNamespace(**attention), ffn=SimpleNamespace(**ffn), **rest)


def _block_to_dict(block: Any) -> dict:
    if isinstance(block, dict):
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in block.items()}
    return {k: (dict(vars(v)) if isinstance(v, SimpleNamespace) else v) for k, v in vars(block).items()}


class DeciLMConfig(PretrainedConfig):
    """Llama globals plus ``block_configs`` (one per layer). See the module docstring."""

    model_type = "nemotron-nas"
    keys_to_ignore_at_inference = ["past_key_values"]

    vocab_size: int = 32000
    hidden_size: int = 4096
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    head_dim: int | None = None
    # Per-layer in this format: null at the top level (the block configs carry them).
    intermediate_size: int | None = None
    num_key_value_heads: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    tie_word_embeddings: bool = False
    rope_parameters: dict | None = None
    attention_bias: bool = False
    attention_dropout: float = 0.0
    mlp_bias: bool = False
    block_configs: list | None = None

    def __post_init__(self, **kwargs):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.block_configs is None:
            # A plain Llama-shaped default (MHA, 4x FFN) so that DeciLMConfig() works.
            self.block_configs = [
                {"attention": {"n_heads_in_group": 1}, "ffn": {"intermediate_size": 4 * self.hidden_size}}
            ] * self.num_hidden_layers
        self.block_configs = [_block_to_namespace(b) for b in self.block_configs]
        super().__post_init__(**kwargs)
        if len(self.block_configs) != self.num_hidden_layers:
            raise ValueError(
                f"block_configs has {len(self.block_configs)} entries, num_hidden_layers is {self.num_hidden_layers}"
            )
        for i, b in enumerate(self.block_configs):
            if b.attention.replace_with_linear or b.ffn.replace_with_linear:
                raise ValueError(f"block {i}: replace_with_linear is not supported (vLLM crashes on it)")
            if not b.attention.no_op and self.num_attention_heads % b.attention.n_heads_in_group:
                raise ValueError(
                    f"block {i}: n_heads_in_group {b.attention.n_heads_in_group} must divide "
                    f"num_attention_heads {self.num_attention_heads}"
                )

    # ---- per-layer sizes -----------------------------------------------------------------
    def num_kv_heads(self, layer: int) -> int | None:
        """KV heads of ``layer``, or None where its attention is a no-op."""
        att = self.block_configs[layer].attention
        return None if att.no_op else self.num_attention_heads // att.n_heads_in_group

    def ffn_width(self, layer: int) -> int | None:
        """FFN width of ``layer``, or None where its FFN is a no-op."""
        ffn = self.block_configs[layer].ffn
        if ffn.no_op:
            return None
        if getattr(ffn, "ffn_mult", None) is not None:
            return ffn_mult_to_intermediate_size(ffn.ffn_mult, self.hidden_size)
        return ffn.intermediate_size

    # ---- serialisation: namespaces back to the plain JSON dicts ----------------------------
    def to_dict(self) -> dict[str, Any]:
        blocks = self.__dict__.get("block_configs")
        out = super().to_dict()
        if blocks is not None:
            out["block_configs"] = [_block_to_dict(b) for b in blocks]
        return out


__all__ = ["DeciLMConfig", "ffn_mult_to_intermediate_size"]
