"""Write checkpoint folders that stock transformers and stock vLLM load: DeciLM (heterogeneous) or Llama.

Every writer validates the tensors against the config (``decilm.expected_shapes``: names and
shapes as vLLM's loader will see them) before writing, fills a temporary sibling folder and renames
it into place at the end, so a failed export never leaves a half-written model behind, and marks
the folder as autocompress's (``manifest``): only a marked or empty folder is ever replaced.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autocompress.cache import atomic_dir, atomic_write_json
from autocompress.data.corpus import TOKENIZER_FILES as TOKENIZING_FILES
from autocompress.export.decilm import (check_decilm_servable, checked_tensors, decilm_config_from_architecture, expected_shapes, llama_config_from_architecture)
from autocompress.export.manifest import MANIFEST, manifest_dict, replaceable
from autocompress.ir import Architecture
from autocompress.modeling import register as modeling

if TYPE_CHECKING:
    import torch

#: Tokenizer files copied from ``tokenizer_dir`` when present: the ones tokenization depends on (one
#: table with the data stage, which hashes them) and the chat templates, which it does not.
TOKENIZER_FILES = TOKENIZING_FILES + ("chat_template.jinja", "chat_template.json")


def _copy_tokenizer(tokenizer_dir: str | os.PathLike, dest: Path) -> None:
    src = Path(tokenizer_dir)
    found = [n for n in TOKENIZER_FILES if (src / n).is_file()]
    if not found:
        raise FileNotFoundError(f"no tokenizer files in {src} (looked for {', '.join(TOKENIZER_FILES)})")
    for n in found:
        shutil.copy2(src / n, dest / n)
    # transformers picks the tokenizer class from tokenizer_config.json, else from the model config;
    # a DeciLM model config is remote code, so the tokenizer must name its (stock) class itself
    cfg_path = dest / "tokenizer_config.json"
    if cfg_path.is_file() and (dest / "tokenizer.json").is_file():
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        if not cfg.get("tokenizer_class"):
            cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
            atomic_write_json(cfg_path, cfg)


def _write_atomically(out_dir: str | os.PathLike, fill, overwrite: bool, spec_path=None, strategy=None) -> Path:
    """Fill a temporary sibling and rename it into place. An existing folder is replaced only with
    ``overwrite`` and only when it is empty or autocompress wrote it (``manifest.replaceable``):
    a folder holding anything else is the user's and is never deleted."""
    out = Path(out_dir).resolve()
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out} exists (pass overwrite=True to replace an earlier autocompress output)")
        ok, why = replaceable(out)
        if not ok:
            raise FileExistsError(f"refusing to replace {out}: {why}")
    with atomic_dir(out, replace=overwrite) as tmp:
        fill(tmp)
        atomic_write_json(tmp / MANIFEST, manifest_dict(out, spec_path, strategy))
    return out


def _export(out_dir, cfg: dict[str, Any], state_dict, tokenizer_dir, overwrite: bool, decilm: bool,
            spec_path=None, strategy=None) -> Path:
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    tensors = checked_tensors(cfg, state_dict)
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1:
        raise ValueError(f"mixed tensor dtypes {sorted(map(str, dtypes))}; cast the state_dict first")
    dtype = str(dtypes.pop()).removeprefix("torch.")

    if decilm:
        # transformers at import (the file ships inside every DeciLM checkpoint): loaded with torch, here
        from autocompress.modeling.configuration_decilm import DeciLMConfig

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

    return _write_atomically(out_dir, fill, overwrite, spec_path, strategy)


def write_checkpoint(out_dir, config, tensors: Mapping[str, torch.Tensor], tokenizer_dir=None, *,
                     extra_files: tuple = (), overwrite: bool = False, spec_path=None, strategy=None) -> Path:
    """Write a checkpoint folder of any family atomically and mark it (``manifest``): ``config`` (a
    transformers config object, saved with ``save_pretrained``), ``tensors`` (checkpoint names, one
    dtype, already checked by the caller against its format), ``extra_files`` (paths copied in, e.g.
    the remote code of ``auto_map``) and the tokenizer. Used by the hybrid and MoE families."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig

    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) != 1:
        raise ValueError(f"mixed tensor dtypes {sorted(map(str, dtypes))}; cast the state_dict first")
    config.dtype = dtypes.pop()
    out, seen = {}, set()
    for k in sorted(tensors):
        t = tensors[k].detach().to("cpu").contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset())
        out[k] = t.clone() if key in seen else t  # safetensors refuses shared storage
        seen.add(key)

    def fill(tmp: Path) -> None:
        config.save_pretrained(tmp)
        GenerationConfig(bos_token_id=getattr(config, "bos_token_id", None),
                         eos_token_id=getattr(config, "eos_token_id", None),
                         pad_token_id=getattr(config, "pad_token_id", None)).save_pretrained(tmp)
        save_file(out, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for f in extra_files:
            shutil.copy2(f, tmp / Path(f).name)
        if tokenizer_dir is not None:
            _copy_tokenizer(tokenizer_dir, tmp)

    return _write_atomically(out_dir, fill, overwrite, spec_path, strategy)


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
    spec_path: str | os.PathLike | None = None,
    strategy: str | None = None,
    **llama_globals: Any,
) -> Path:
    """Write a DeciLM checkpoint folder; returns its path.

    ``config``: an ``Architecture`` (with ``llama_globals`` as for ``decilm_config_from_architecture``) or
    a DeciLM config dict. ``state_dict``: Llama parameter names, one dtype; tied ``lm_head`` may be absent.
    """
    cfg = _config_arg(config, llama_globals, decilm_config_from_architecture)
    check_decilm_servable(cfg)
    return _export(out_dir, cfg, state_dict, tokenizer_dir, overwrite, True, spec_path, strategy)


def export_llama(
    out_dir: str | os.PathLike,
    config: Architecture | Mapping[str, Any],
    state_dict: Mapping[str, torch.Tensor],
    tokenizer_dir: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
    spec_path: str | os.PathLike | None = None,
    strategy: str | None = None,
    **llama_globals: Any,
) -> Path:
    """Write a plain LlamaForCausalLM checkpoint folder (homogeneous models); returns its path."""
    cfg = _config_arg(config, llama_globals, llama_config_from_architecture)
    return _export(out_dir, cfg, state_dict, tokenizer_dir, overwrite, False, spec_path, strategy)


def llama_format(arch: Architecture) -> bool:
    """Whether ``export_architecture`` writes ``arch`` as plain Llama: every block the same full block,
    and a hidden size LlamaConfig accepts (a multiple of the head count)."""
    b0 = arch.blocks[0]
    return (arch.is_homogeneous() and b0.attention is not None and b0.ffn is not None
            and arch.hidden_size % arch.num_heads == 0)


def architecture_shapes(arch: Architecture) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor ``export_architecture`` takes for ``arch``, in the format it
    picks (``llama_format``): what a model with random weights (``calibrate.synth``) must hold."""
    build = llama_config_from_architecture if llama_format(arch) else decilm_config_from_architecture
    return expected_shapes(build(arch))


def export_architecture(
    out_dir: str | os.PathLike,
    arch: Architecture,
    state_dict: Mapping[str, torch.Tensor],
    tokenizer_dir: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
    spec_path: str | os.PathLike | None = None,
    strategy: str | None = None,
    **llama_globals: Any,
) -> Path:
    """Llama when every block is the same full block, DeciLM otherwise (no remote code when possible).

    transformers' LlamaConfig rejects a hidden size that is not a multiple of the head count (a
    pruned hidden size such as 448 with 9 heads), so such a model is written as DeciLM too."""
    writer = export_llama if llama_format(arch) else export_decilm
    return writer(out_dir, arch, state_dict, tokenizer_dir, overwrite=overwrite, spec_path=spec_path, strategy=strategy,
                  **llama_globals)
