"""Resolve the spec's ``model`` reference to a ``ParentInfo``: the architecture IR, where it came
from, and a cheap content hash, without loading any weights.

Every user error (missing file, unknown alias, unsupported model_type, malformed config.json) is
a ``SpecError`` whose diagnostic points at the ``model`` line of the spec. The messages name the
key and what it must hold, never a value read from the file (``config_access``, ``gguf_meta``).

``confine`` (``acc check --confine DIR``): the path, and a folder's config.json, must resolve
inside DIR (``confine.Confinement``); what is read is then the resolved path, with no symlink
left in it. Built-in aliases are the package's files and are not confined.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from autocompress.diagnostics import Diagnostic, SpecError, did_you_mean, one_of
from autocompress.families.readers import CONFIG_READERS
from autocompress.ir import Architecture
from autocompress.parents.aliases import ALIASES
from autocompress.parents.confine import HINT as CONFINE_HINT
from autocompress.parents.confine import outside
from autocompress.parents.gguf_meta import GGUFError, architecture_from_gguf, read_gguf
from autocompress.parents.hf_config import ConfigError, architecture_from_config

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class ParentInfo:
    architecture: Architecture
    kind: str  # "alias" | "hf_dir" | "gguf" | "config" (as in ParentRef)
    path: Path  # the file read: config.json or the .gguf
    content_hash: str  # "sha256:<hex>" of config.json's bytes or of the GGUF header (never weights)
    description: str  # one line for logs and reports
    has_weights: bool  # False for a bare config.json: feasibility only, no build
    alias: str | None = None
    format: str = "hf"  # "hf" (config.json) | "gguf"


def _error(ref, message: str, hint: str = "", code: str = "parent", spec_path: str = "<spec>",
           source: str | None = None) -> SpecError:
    return SpecError([Diagnostic(ref.span, message, hint, code=code)], spec_path, source)


def resolve_parent(ref, base_dir: str | Path = ".", *, spec_path: str = "<spec>",
                   source: str | None = None, confine=None) -> ParentInfo:
    """``ref`` is a ``spec.ParentRef``; relative paths are taken from ``base_dir`` (the spec's folder).

    ``spec_path``/``source`` only serve the rendering of a raised ``SpecError``. ``confine``: a
    ``confine.Confinement`` that every path read must resolve inside, or None.
    """
    fail = lambda msg, hint="", code="parent": _error(ref, msg, hint, code, spec_path, source)  # noqa: E731
    if ref.kind == "alias":
        alias = ALIASES.get(ref.value)
        if alias is None:
            raise fail(f"unknown model alias '{ref.value}': built-in aliases are {one_of(ALIASES)}",
                       did_you_mean(ref.value, ALIASES) or "or give a local HF folder, config.json or .gguf path",
                       "unknown-alias")
        path = alias.locate()
        if path is None:
            raise fail(f"model alias '{alias.name}' needs the package '{alias.distribution}', which is not "
                       "installed", f"install it with: {alias.install}", "alias-not-installed")
        info = _from_gguf(path, fail) if alias.kind == "gguf" else _from_hf_dir(path, fail)
        desc = f"{alias.name} (built-in alias, {alias.distribution}: {path.name}): {info.architecture.summary()}"
        return ParentInfo(info.architecture, "alias", path, info.content_hash, desc, True, alias.name, info.format)

    if confine is not None:
        real = confine.resolve(ref.value, Path(base_dir).absolute())
        if real is None:
            d = outside(ref.span, "parent model", ref.value)
            raise SpecError([d], spec_path, source)
        path = Path(real)
    else:
        path = Path(ref.value).expanduser()
        if not path.is_absolute():
            path = Path(base_dir) / path
    if not path.exists():
        raise fail(f"parent model '{ref.value}' not found (looked for {path})",
                   "give an existing HF model folder, config.json or .gguf file; paths are relative to the spec",
                   "parent-missing")
    if path.is_dir():
        info = _from_hf_dir(path, fail, confine)
    elif path.suffix.lower() == ".gguf":
        info = _from_gguf(path, fail)
    else:
        info = _from_config(path, fail, has_weights=False)
    kind = ref.kind if ref.kind in ("hf_dir", "gguf", "config") else "config"
    return ParentInfo(info.architecture, kind, info.path, info.content_hash,
                      f"{ref.value}: {info.architecture.summary()}", info.has_weights, None, info.format)


def _from_hf_dir(path: Path, fail, confine=None) -> ParentInfo:
    config = path / "config.json"
    if confine is not None:
        real = confine.resolve(str(config))
        if real is None:
            raise fail("the parent model folder's config.json is outside the --confine folder", CONFINE_HINT,
                       "confined")
        config = Path(real)
    if not config.is_file():
        raise fail(f"'{path}' has no config.json", "a Hugging Face model folder holds config.json next to the "
                   "weights", "parent-missing")
    has_weights = any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir())
    return _from_config(config, fail, has_weights)


def _from_config(path: Path, fail, has_weights: bool) -> ParentInfo:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise fail(f"cannot read {path.name}: {e.strerror}", "", "parent-config") from None
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as e:  # the position and what the parser expected, no text of the file
        raise fail(f"{path.name} is not valid JSON: {e}", "", "parent-config") from None
    except UnicodeDecodeError:
        raise fail(f"{path.name} is not valid JSON: it is not UTF-8 text", "", "parent-config") from None
    default_name = path.parent.name if path.name == "config.json" else path.stem
    name = (config.get("_name_or_path") if isinstance(config, dict) else None) or default_name
    try:
        arch = architecture_from_config(config, str(name), where=path.name)
    except ConfigError as e:
        hint = e.hint
        if e.key == "model_type" and isinstance(config, dict) and isinstance(config.get("model_type"), str):
            hint = did_you_mean(config["model_type"], CONFIG_READERS) or "autocompress reads the families listed"
        raise fail(str(e), hint, "parent-config") from None
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    return ParentInfo(arch, "config", path, digest, arch.summary(), has_weights, None, "hf")


def _from_gguf(path: Path, fail) -> ParentInfo:
    try:
        header = read_gguf(path)
        arch = architecture_from_gguf(header, name=path.stem)
    except OSError as e:
        raise fail(f"cannot read {path.name}: {e.strerror}", "", "parent-gguf") from None
    except GGUFError as e:
        raise fail(f"{path.name}: {e}", "", "parent-gguf") from None
    except ValueError:  # an IR invariant, whose text quotes the sizes
        raise fail(f"{path.name}: the sizes in its metadata do not make a valid architecture (every size positive, "
                   "KV heads dividing query heads, at least one layer)", "", "parent-gguf") from None
    return ParentInfo(arch, "gguf", path, "sha256:" + header.sha256, arch.summary(), True, None, "gguf")
