"""Content-hash caching and atomic writes.

Every stage result is stored under a key derived from the content of its inputs (spec bytes,
parent config / metadata, profile, settings) and of the code that computes it (``code_digest``:
the source of the stage's modules and everything they import from this package), never from
paths, times or a hand-bumped version. Files and folders are written under a temporary name in
the same folder and renamed into place (``atomic_write_bytes``, ``atomic_dir``), so an
interrupted run leaves either the old result or the new one, never half of one.

What was written is also checked when it is read back: a stage folder carries ``CHECKSUMS.json``
(the sha256 of each of its files, written last: ``write_checksums`` / ``corruption``; a cached
tensor file carries the digest of its tensors, ``data.checked``), so a file truncated by a full
disk or a killed copy, or altered by a bad sector, is found and recomputed instead of loaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

PACKAGE = Path(__file__).resolve().parent


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def key(*parts: str | bytes) -> str:
    """A stable key from ordered parts (callers add ``code_digest`` of the code that the result
    depends on)."""
    h = hashlib.sha256(b"autocompress-cache-2\0")
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_root() -> Path:
    """``$ACC_CACHE_DIR``, else ``$XDG_CACHE_HOME/autocompress``, else ``~/.cache/autocompress``."""
    env = os.environ.get("ACC_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "autocompress" if xdg else Path.home() / ".cache" / "autocompress"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, replace: bool = False) -> Iterator[Path]:
    """A temporary sibling folder that becomes ``final`` in one rename when the block ends.

    On an exception the temporary folder is removed and ``final`` is untouched. An existing
    ``final`` is replaced only with ``replace=True`` (moved aside, the new one renamed in, the old
    one deleted: a crash leaves the old or the new folder, plus at most a hidden ``.old-`` one);
    otherwise ``FileExistsError``. Callers decide what may be replaced (``build.output``).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        if final.exists() or final.is_symlink():
            if not replace:
                raise FileExistsError(f"{final} exists")
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.replace(final, old / final.name)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


CHECKSUMS = "CHECKSUMS.json"


def write_checksums(folder: str | os.PathLike) -> None:
    """Record the sha256 of every file under ``folder`` in ``<folder>/CHECKSUMS.json`` (call it last)."""
    folder = Path(folder)
    sums = {p.relative_to(folder).as_posix(): sha256_file(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != CHECKSUMS}
    atomic_write_json(folder / CHECKSUMS, {"sha256": sums})


def corruption(folder: str | os.PathLike) -> str | None:
    """What is wrong with a folder ``write_checksums`` sealed (``"<file>: checksum mismatch"``,
    ``"<file>: missing"``, ...), or None when every recorded file is there with its checksum."""
    folder = Path(folder)
    try:
        sums = json.loads((folder / CHECKSUMS).read_text())["sha256"]
        if not isinstance(sums, dict):
            raise ValueError
    except FileNotFoundError:
        return f"{CHECKSUMS}: missing"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{CHECKSUMS}: unreadable"
    for name, digest in sums.items():
        p = folder / name
        try:
            if sha256_file(p) != digest:
                return f"{name}: checksum mismatch"
        except FileNotFoundError:
            return f"{name}: missing"
        except OSError as e:
            return f"{name}: unreadable ({e.strerror or e})"
    return None


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def fingerprint(path: str | os.PathLike) -> str:
    """Content hash for small files; size + mtime for large ones (a 100 MB GGUF would cost 0.2 s
    per check to hash; its header's content hash is part of the key anyway)."""
    st = os.stat(path)
    if st.st_size > (1 << 20):
        return f"stat:{st.st_size}:{st.st_mtime_ns}"
    return sha256_file(path)


class JsonCache:
    """A folder of ``<key>.json`` entries. Entries record the files they depend on with their
    hashes, so a hit is only served while those files are unchanged, and the sha256 of their deps
    and value together (``_entry_digest``), so a damaged entry (truncated, a flipped byte, an
    unreadable file) is a miss that ``lookup`` names, never a wrong hit; the caller recomputes and
    ``put`` overwrites it. Entries are written atomically under unique temporary names: processes
    sharing the folder never see half of one."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def path(self, k: str) -> Path:
        return self.folder / f"{k}.json"

    def lookup(self, k: str) -> tuple[Any | None, str | None]:
        """``(value, None)`` on a hit; ``(None, None)`` on a plain miss (no entry, or a file it
        depends on changed); ``(None, why)`` when the entry is there but damaged: ``"unreadable
        (<reason>)"``, ``"not JSON"``, ``"not a cache entry"`` or ``"checksum mismatch"``."""
        p = self.path(k)
        try:
            text = p.read_bytes()
        except FileNotFoundError:
            return None, None
        except OSError as e:
            return None, f"unreadable ({e.strerror or e})"
        try:
            entry = json.loads(text)
        except ValueError:  # truncated, or a flipped byte that breaks the syntax (UnicodeDecodeError too)
            return None, "not JSON"
        if not (isinstance(entry, dict) and isinstance(entry.get("deps"), dict) and "value" in entry):
            return None, "not a cache entry"
        deps, value = entry["deps"], entry["value"]
        if entry.get("sha256") != _entry_digest(deps, value):
            return None, "checksum mismatch"
        for dep, digest in deps.items():
            try:
                if fingerprint(dep) != digest:
                    return None, None
            except OSError:
                return None, None
        return value, None

    def get(self, k: str) -> Any | None:
        """The value stored under ``k``, or None (a miss, damaged entries included)."""
        return self.lookup(k)[0]

    def put(self, k: str, value: Any, deps: Iterable[str] = ()) -> None:
        fingerprints = {str(d): fingerprint(d) for d in deps}
        entry = {"deps": fingerprints, "value": value, "sha256": _entry_digest(fingerprints, value)}
        try:
            atomic_write_json(self.path(k), entry)
        except OSError:
            pass  # a read-only cache folder must never fail a check


def _entry_digest(deps: dict, value: Any) -> str:
    """The sha256 of a ``JsonCache`` entry's deps and value in canonical JSON: it changes with any
    byte of either that still parses (a dependency's name or hash included)."""
    return sha256_bytes(json.dumps({"deps": deps, "value": value}, sort_keys=True).encode())


# ---- code digests ----------------------------------------------------------------------------------
# What a module imports from this package, read from its source text (a regex, not ``ast``: the
# whole package reads in ~5 ms against ~180 ms to parse, and ``acc check`` computes the digest on
# every call). Function-local imports count too, and so do module names in strings (engine
# adapters, ``python -m`` workers): over-inclusion only costs a re-run.
_FROM = re.compile(r"^[ \t]*from[ \t]+(autocompress(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+(autocompress(?:\.\w+)*)", re.M)
_STRING = re.compile(r"[\"'](autocompress(?:\.\w+)+)[\"']")
# Data files that shape results, per module that reads them (module names relative to the package,
# so this table is not read as imports of those modules).
DATA_FILES = {
    "_resources": ("grammar/acspec.lark", "specs/*.json"),
    "lang.tables": ("autocompress/lang/acspec.lalr.json",),
    "cost.profile": ("autocompress/cost/profiles/*.json",),
}


def _module_file(name: str, root: Path) -> Path | None:
    parts = name.split(".")[1:]
    if not parts:
        return root / "__init__.py"
    for p in (root.joinpath(*parts[:-1], parts[-1] + ".py"), root.joinpath(*parts, "__init__.py")):
        if p.is_file():
            return p
    return None


def _imports(path: Path, root: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found = set(_IMPORT.findall(text)) | set(_STRING.findall(text))
    for mod, names in _FROM.findall(text):
        found.add(mod)
        for n in re.findall(r"\w+", names.split("#")[0]):
            found.add(f"{mod}.{n}")  # ``from autocompress.lang import ast``: a submodule
    return {m for m in found if _module_file(m, root) is not None}


@functools.lru_cache(maxsize=None)
def _closure(modules: tuple[str, ...], root: Path) -> tuple[str, ...]:
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        path = _module_file(m, root)
        if path is None:
            raise ModuleNotFoundError(f"code_digest: no module {m} under {root}")
        seen.add(m)
        parts = m.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # packages run their __init__
        todo += sorted(_imports(path, root) - seen)
    return tuple(sorted(seen))


@functools.lru_cache(maxsize=None)
def code_digest(*modules: str, root: str | None = None) -> str:
    """sha256 of the source of ``modules`` and of every autocompress module they import, directly or
    not, plus the data files those modules read (``DATA_FILES``). A change to any of them changes
    the digest; an unchanged tree gives the same digest on every machine."""
    pkg = Path(root) if root else PACKAGE
    h = hashlib.sha256()
    for m in _closure(tuple(sorted(modules)), pkg):
        h.update(f"{m}\0".encode() + _module_file(m, pkg).read_bytes() + b"\0")
        for pattern in DATA_FILES.get(m.partition(".")[2], ()):
            base = pkg.parent
            for f in sorted(base.glob(pattern)) or sorted((pkg / "_data").glob(pattern)):  # a wheel
                h.update(f"{f.name}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()


def code_modules(*modules: str) -> tuple[str, ...]:
    """The modules ``code_digest`` hashes for ``modules`` (for tests and ``--explain`` output)."""
    return _closure(tuple(sorted(modules)), PACKAGE)
