"""Write checkpoints that stock transformers and stock vLLM load.

Two formats, both plain safetensors + ``config.json`` folders:

* **DeciLM** (``"model_type": "nemotron-nas"``, ``DeciLMForCausalLM``): per-layer KV heads and FFN widths,
  removable attention/FFN halves. vLLM serves it natively; transformers loads it through the two
  self-contained files in ``autocompress/modeling`` that we copy into the folder (``auto_map``,
  ``trust_remote_code=True``).
* **Llama** (``LlamaForCausalLM``): for a homogeneous result; needs no remote code at all.

Every writer validates the tensors against the config (names and shapes, as vLLM's loader will see them)
before writing, writes into a temporary sibling folder and renames it into place at the end, so a
failed export never leaves a half-written model behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..ir import MLP, Architecture, Attention

if TYPE_CHECKING:
    import torch

#: Tokenizer files copied from ``tokenizer_dir`` when present (fast, sentencepiece and BPE layouts).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)

_DEFAULT_GLOBALS: dict[str, Any] = {
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}


# ---- configs from the IR ------------------------------------------------------------------------
def _globals(arch: Architecture, overrides: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(overrides) - set(_DEFAULT_GLOBALS) - {"rope_parameters", "max_position_embeddings"}
    if unknown:
        raise TypeError(f"unknown Llama globals {sorted(unknown)}; allowed: {sorted(_DEFAULT_GLOBALS)}")
    g = {**_DEFAULT_GLOBALS, **overrides}
    rope = dict(g.pop("rope_parameters", None) or {"rope_type": "default"})
    rope.setdefault("rope_theta", g.pop("rope_theta"))
    return {
        "vocab_size": arch.vocab_size,
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "head_dim": arch.head_dim,
        "max_position_embeddings": g.pop("max_position_embeddings", arch.max_position),
        "tie_word_embeddings": arch.tie_embeddings,
        "rope_parameters": rope,
        **g,
    }


def _check_llama_like(arch: Architecture) -> str:
    """Both formats are Llama blocks: attention without sliding window, gated MLP, one activation."""
    acts = set()
    for i, b in enumerate(arch.blocks):
        if b.mixer is not None and not isinstance(b.mixer, Attention):
            raise ValueError(f"block {i}: {type(b.mixer).__name__} mixer cannot be exported as DeciLM/Llama")
        if b.attention is not None and b.attention.sliding_window is not None:
            raise ValueError(f"block {i}: sliding-window attention cannot be exported as DeciLM/Llama")
        if b.ffn is not None:
            if not isinstance(b.ffn, MLP) or not b.ffn.gated:
                raise ValueError(f"block {i}: only gated dense MLPs export as DeciLM/Llama, got {b.ffn}")
            acts.add(b.ffn.activation)
    if len(acts) > 1:
        raise ValueError(f"one activation for all MLPs is required, got {sorted(acts)}")
    return acts.pop() if acts else "silu"


def decilm_config_from_architecture(arch: Architecture, **llama_globals: Any) -> dict[str, Any]:
    """The DeciLM ``config.json`` content (without auto_map/architectures) for ``arch``.

    ``llama_globals``: rms_norm_eps, rope_theta or rope_parameters, hidden_act, attention_bias, mlp_bias,
    bos/eos/pad_token_id, max_position_embeddings (the IR does not carry them).
    """
    act = _check_llama_like(arch)
    llama_globals.setdefault("hidden_act", act)
    blocks = []
    for b in arch.blocks:
        att = b.attention
        blocks.append({
            "attention": {"no_op": att is None, "replace_with_linear": False,
                          "n_heads_in_group": None if att is None else arch.num_heads // att.kv_heads},
            "ffn": {"no_op": b.ffn is None, "replace_with_linear": False,
                    "intermediate_size": None if b.ffn is None else b.ffn.width},
        })
    cfg = _globals(arch, llama_globals)
    cfg.update(intermediate_size=None, num_key_value_heads=None, block_configs=blocks)
    check_decilm_servable(cfg)
    return cfg


def llama_config_from_architecture(arch: Architecture, **llama_globals: Any) -> dict[str, Any]:
    """The LlamaForCausalLM ``config.json`` content for a homogeneous, all-full ``arch``."""
    act = _check_llama_like(arch)
    b0 = arch.blocks[0]
    if not arch.is_homogeneous() or b0.attention is None or b0.ffn is None:
        raise ValueError("a Llama export needs identical blocks with attention and MLP; use the DeciLM format")
    llama_globals.setdefault("hidden_act", act)
    cfg = _globals(arch, llama_globals)
    cfg.update(intermediate_size=b0.ffn.width, num_key_value_heads=b0.attention.kv_heads)
    return cfg


def check_decilm_servable(cfg: Mapping[str, Any]) -> None:
    """Reject what stock vLLM 0.32 cannot serve (seen on CPU; facts.md).

    * the first sub-block that runs must be an attention: vLLM's DeciLM layer starts the residual stream in
      the attention half, and a real FFN before any attention dies with "too many values to unpack";
    * ``replace_with_linear`` crashes; at least one attention layer is needed for the KV-cache spec.
    """
    blocks = cfg["block_configs"]
    if len(blocks) != cfg["num_hidden_layers"]:
        raise ValueError(f"{len(blocks)} block configs for {cfg['num_hidden_layers']} layers")
    for i, b in enumerate(blocks):
        if b["attention"].get("replace_with_linear") or b["ffn"].get("replace_with_linear"):
            raise ValueError(f"block {i}: replace_with_linear is not served by vLLM")
        if not b["attention"]["no_op"]:
            break
        if not b["ffn"]["no_op"]:
            raise ValueError(
                f"block {i}: an FFN runs before any attention; vLLM 0.32 crashes on this "
                "(keep the first executed sub-block an attention)"
            )
    else:
        raise ValueError("no attention layer: vLLM cannot size a KV cache for this model")


# ---- tensors ------------------------------------------------------------------------------------
def expected_shapes(cfg: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a Llama or DeciLM checkpoint with this config (what vLLM loads)."""
    d, heads, v = cfg["hidden_size"], cfg["num_attention_heads"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or d // heads
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (v, d)
    blocks = cfg.get("block_configs")
    for i in range(cfg["num_hidden_layers"]):
        if blocks is None:
            kv, width = cfg.get("num_key_value_heads") or heads, cfg["intermediate_size"]
        else:
            a, f = blocks[i]["attention"], blocks[i]["ffn"]
            kv = None if a["no_op"] else heads // a["n_heads_in_group"]
            width = None if f["no_op"] else f.get("intermediate_size")
            if width is None and not f["no_op"]:
                from ..modeling.configuration_decilm import ffn_mult_to_intermediate_size

                width = ffn_mult_to_intermediate_size(f["ffn_mult"], d)
        p = f"model.layers.{i}."
        if kv is not None:
            shapes[p + "input_layernorm.weight"] = (d,)
            for name, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                shapes[f"{p}self_attn.{name}_proj.weight"] = (rows, d)
                if cfg.get("attention_bias"):
                    shapes[f"{p}self_attn.{name}_proj.bias"] = (rows,)
            shapes[p + "self_attn.o_proj.weight"] = (d, heads * hd)
            if cfg.get("attention_bias"):
                shapes[p + "self_attn.o_proj.bias"] = (d,)
        if width is not None:
            shapes[p + "post_attention_layernorm.weight"] = (d,)
            for name, shape in (("gate", (width, d)), ("up", (width, d)), ("down", (d, width))):
                shapes[f"{p}mlp.{name}_proj.weight"] = shape
                if cfg.get("mlp_bias"):
                    shapes[f"{p}mlp.{name}_proj.bias"] = shape[:1]
    return shapes


def _checked_tensors(cfg: Mapping[str, Any], state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    want = expected_shapes(cfg)
    given = dict(state_dict)
    if cfg.get("tie_word_embeddings"):
        given.pop("lm_head.weight", None)  # tied: the loader re-ties it to the embedding
    missing = sorted(set(want) - set(given))
    extra = sorted(set(given) - set(want))
    wrong = sorted(f"{k}: expected {want[k]}, got {tuple(given[k].shape)}"
                   for k in set(want) & set(given) if tuple(given[k].shape) != want[k])
    if missing or extra or wrong:
        lines = [f"missing {missing}"] * bool(missing) + [f"unexpected {extra}"] * bool(extra) + wrong
        raise ValueError("state_dict does not match the config:\n  " + "\n  ".join(lines))
    out, seen = {}, set()
    for k in sorted(given):
        t = given[k].detach().to("cpu").contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        out[k] = t.clone() if key in seen else t  # safetensors refuses shared storage
        seen.add(key)
    return out


# ---- writing ------------------------------------------------------------------------------------
def _copy_tokenizer(tokenizer_dir: str | os.PathLike, dest: Path) -> None:
    src = Path(tokenizer_dir)
    found = [n for n in TOKENIZER_FILES if (src / n).is_file()]
    if not found:
        raise FileNotFoundError(f"no tokenizer files in {src} (looked for {', '.join(TOKENIZER_FILES)})")
    for n in found:
        shutil.copy2(src / n, dest / n)


def _write_atomically(out_dir: str | os.PathLike, fill, overwrite: bool) -> Path:
    out = Path(out_dir).resolve()
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (pass overwrite=True to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        fill(tmp)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _export(out_dir, cfg: dict[str, Any], state_dict, tokenizer_dir, overwrite: bool, decilm: bool) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    tensors = _checked_tensors(cfg, state_dict)
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1:
        raise ValueError(f"mixed tensor dtypes {sorted(map(str, dtypes))}; cast the state_dict first")
    dtype = str(dtypes.pop()).removeprefix("torch.")

    if decilm:
        from .. import modeling
        from ..modeling.configuration_decilm import DeciLMConfig

        config = DeciLMConfig(**cfg)  # the copied class must accept what we write
        config.architectures = ["DeciLMForCausalLM"]
        config.auto_map = dict(modeling.DECILM_AUTO_MAP)
    else:
        from transformers import LlamaConfig

        config = LlamaConfig(**cfg)
        config.architectures = ["LlamaForCausalLM"]
    config.dtype = getattr(torch, dtype)

    def fill(tmp: Path) -> None:
        config.save_pretrained(tmp)
        GenerationConfig(
            bos_token_id=cfg.get("bos_token_id"), eos_token_id=cfg.get("eos_token_id"),
            pad_token_id=cfg.get("pad_token_id"),
        ).save_pretrained(tmp)
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if decilm:
            for name in modeling.DECILM_FILES:
                shutil.copy2(modeling.source_dir() / name, tmp / name)
        if tokenizer_dir is not None:
            _copy_tokenizer(tokenizer_dir, tmp)

    return _write_atomically(out_dir, fill, overwrite)


def _config_arg(config: Architecture | Mapping[str, Any], llama_globals: dict, build) -> dict[str, Any]:
    if isinstance(config, Architecture):
        return build(config, **llama_globals)
    if llama_globals:
        raise TypeError("Llama globals are only taken with an Architecture; put them in the config dict")
    return dict(config)


def export_decilm(
    out_dir: str | os.PathLike,
    config: Architecture | Mapping[str, Any],
    state_dict: Mapping[str, torch.Tensor],
    tokenizer_dir: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
    **llama_globals: Any,
) -> Path:
    """Write a DeciLM checkpoint folder; returns its path.

    ``config``: an ``Architecture`` (with ``llama_globals`` as for ``decilm_config_from_architecture``) or
    a DeciLM config dict. ``state_dict``: Llama parameter names, one dtype; tied ``lm_head`` may be absent.
    """
    cfg = _config_arg(config, llama_globals, decilm_config_from_architecture)
    check_decilm_servable(cfg)
    return _export(out_dir, cfg, state_dict, tokenizer_dir, overwrite, decilm=True)


def export_llama(
    out_dir: str | os.PathLike,
    config: Architecture | Mapping[str, Any],
    state_dict: Mapping[str, torch.Tensor],
    tokenizer_dir: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
    **llama_globals: Any,
) -> Path:
    """Write a plain LlamaForCausalLM checkpoint folder (homogeneous models); returns its path."""
    cfg = _config_arg(config, llama_globals, llama_config_from_architecture)
    return _export(out_dir, cfg, state_dict, tokenizer_dir, overwrite, decilm=False)


def llama_format(arch: Architecture) -> bool:
    """Whether ``export_architecture`` writes ``arch`` as plain Llama: every block the same full block,
    and a hidden size LlamaConfig accepts (a multiple of the head count)."""
    b0 = arch.blocks[0]
    return (arch.is_homogeneous() and b0.attention is not None and b0.ffn is not None
            and arch.hidden_size % arch.num_heads == 0)


def export_architecture(
    out_dir: str | os.PathLike,
    arch: Architecture,
    state_dict: Mapping[str, torch.Tensor],
    tokenizer_dir: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
    **llama_globals: Any,
) -> Path:
    """Llama when every block is the same full block, DeciLM otherwise (no remote code when possible).

    transformers' LlamaConfig rejects a hidden size that is not a multiple of the head count (a
    pruned hidden size such as 448 with 9 heads), so such a model is written as DeciLM too."""
    writer = export_llama if llama_format(arch) else export_decilm
    return writer(out_dir, arch, state_dict, tokenizer_dir, overwrite=overwrite, **llama_globals)
