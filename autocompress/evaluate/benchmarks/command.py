"""``acc eval MODEL_DIR``: a model folder and its parent on the eight benchmarks.

The parent is ``--parent`` (a Hugging Face folder, a .gguf file or a built-in alias), else the
one named by the spec in the folder's ``autocompress-manifest.json`` (an ``acc build`` output),
else none (the model alone, no retained share). Both go through the cached accuracy stage
(``benchmarks.stage``) in ``<cache>/accuracy`` (keyed by content, so a second ``acc eval`` of the
same parent costs nothing). HumanEval's log-likelihood is measured beside; the held-out
perplexities come from the build report when the folder has one (they need the build's data).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from autocompress import cache
from autocompress.evaluate.benchmarks import data
from autocompress.evaluate.benchmarks.stage import model_digest, retained, run_accuracy
from autocompress.evaluate.benchmarks.tasks import TASKS
from autocompress.evaluate.heldout import humaneval, load_exported
from autocompress.export.gguf_convert import weights_folder
from autocompress.diagnostics import SpecError
from autocompress.export.manifest import MANIFEST, manifest_spec, read_manifest
from autocompress.lang.api import load_spec
from autocompress.lang.model import ParentRef
from autocompress.parents.aliases import ALIASES
from autocompress.parents.resolve import resolve_parent


class EvalInputError(Exception):
    """A bad ``acc eval`` argument; the message says what was expected."""


def _resolved(ref: ParentRef, base: str, what: str):
    """``resolve_parent``, its error as one ``EvalInputError`` line naming ``what``."""
    try:
        return resolve_parent(ref, base)
    except SpecError as err:
        raise EvalInputError(f"{what}: {err.diagnostics[0].message}") from None


def parent_of(model_dir: Path, parent: str | None):
    """(the parent's ``ParentInfo``, its name as given, how it was found) or (None, None, None):
    cheap (config files only), so a bad argument is answered before any weight is loaded."""
    if parent is None:
        man = model_dir / MANIFEST
        if not man.exists():
            return None, None, None
        if read_manifest(model_dir) is None:
            raise EvalInputError(f"{man}: not a readable autocompress manifest (expected JSON naming the spec); "
                                 "pass --parent")
        spec_path = manifest_spec(model_dir)
        if spec_path is None or not spec_path.is_file():
            name = spec_path.name if spec_path is not None else "no spec"
            raise EvalInputError(f"{man}: names {name}, which is not a file here; pass --parent")
        try:
            spec = load_spec(str(spec_path))
        except SpecError as err:
            raise EvalInputError(f"{spec_path}: the spec {man.name} names is invalid "
                                 f"({err.diagnostics[0].message}); pass --parent") from None
        info = _resolved(spec.parent, str(spec_path.parent), f"{spec_path} (the parent of the spec {man.name} names)")
        return info, spec.parent.value, f"the build's spec ({spec_path.name}): {spec.parent.value}"
    kind = "alias" if parent in ALIASES else "gguf" if parent.endswith(".gguf") else "hf_dir"
    info = _resolved(ParentRef(kind, parent), ".", f"--parent {parent}")
    if not info.has_weights:
        raise EvalInputError(f"--parent {parent}: no weights (no .safetensors file); expected a model folder, a .gguf "
                             "file or an alias")
    return info, parent, f"--parent {parent}"


def _humaneval(folder: Path, load) -> dict | None:
    key = cache.key(model_digest(folder), cache.code_digest("autocompress.evaluate.heldout"))[:20]
    path = cache.cache_root() / "accuracy" / f"humaneval-{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    with torch.no_grad():
        he = humaneval(load(folder), folder)
    if he is not None:
        cache.atomic_write_json(path, he)
    return he


def run_eval(model_dir: str, parent: str | None = None, full: bool = False, tasks: list[str] | None = None,
             work: str | None = None, progress=None) -> dict:
    """The accuracy report of ``model_dir`` (and its parent): a dict for ``report.accuracy``."""
    folder = Path(model_dir)
    if not folder.is_dir():
        raise EvalInputError(f"{model_dir}: {'a file' if folder.exists() else 'no such folder'}; expected a model "
                             "folder (config.json and .safetensors weights)")
    if not (folder / "config.json").is_file():
        raise EvalInputError(f"{model_dir}: not a model folder (no config.json)")
    unknown = [t for t in tasks or () if t not in TASKS]
    if unknown:
        raise EvalInputError(f"--tasks: unknown {', '.join(unknown)}; allowed: {', '.join(TASKS)}")
    data.data_root()  # EvalDataMissing (with the install command) before any weight is loaded
    # config files only: a bad model or parent is answered before any weight is loaded
    model = _resolved(ParentRef("hf_dir", str(folder.resolve())), ".", f"{folder / 'config.json'}")
    if not model.has_weights:
        raise EvalInputError(f"{model_dir}: no weights (no .safetensors file); expected a model folder")
    pinfo, pvalue, how = parent_of(folder, parent)
    if pinfo is not None and pinfo.architecture.vocab_size != model.architecture.vocab_size:
        raise EvalInputError(f"{model_dir}: a model with a {model.architecture.vocab_size}-token vocabulary, its parent "
                             f"({how}) has {pinfo.architecture.vocab_size}: not a model of that parent")
    pfolder = weights_folder(pvalue, pinfo) if pinfo is not None else None
    root = Path(work) if work else cache.cache_root() / "accuracy"
    out = {"model": folder.name, "parent_source": how, "full": full}
    out["student"] = run_accuracy(folder, root, load_exported, tasks, full, progress=progress)
    out["student"]["humaneval"] = _humaneval(folder, load_exported)
    if pfolder is not None:
        out["parent"] = run_accuracy(pfolder, root, load_exported, tasks, full, progress=progress)
        out["parent"]["humaneval"] = _humaneval(pfolder, load_exported)
        out["retained"] = retained(out["parent"], out["student"])
    rep = folder / "autocompress-report.json"
    if rep.exists():  # the held-out perplexities the build measured (its data, its rows)
        try:
            q = json.loads(rep.read_text(encoding="utf-8")).get("quality") or {}
        except (ValueError, AttributeError):
            raise EvalInputError(f"{rep}: not a readable build report (expected JSON)") from None
        out["heldout"] = {k: {"parent_ppl": q["parent"][k]["ppl"], "student_ppl": v["ppl"]}
                          for k, v in (q.get("student") or {}).items()}
    return out


def build_accuracy(parent_folder: Path, student_folder: Path, work: Path, progress=None) -> dict:
    """The build's accuracy stage: the parent and the exported student on the subsamples, and the
    retained share; ``{"skipped": why}`` when the data is not installed (the build goes on)."""
    try:
        data.data_root()
    except data.EvalDataMissing as err:
        if progress is not None:
            progress.log(f"[accuracy] not measured: {err}")
        return {"skipped": str(err)}
    parent = run_accuracy(Path(parent_folder), work, load_exported, progress=progress)
    student = run_accuracy(Path(student_folder), work, load_exported, progress=progress)
    return {"parent": parent, "student": student, "retained": retained(parent, student)}
