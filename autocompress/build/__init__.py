"""``acc build``: the recipe from a contract to an exported, distilled model.

    check -> parent -> data -> importance (+ permutation) -> teacher -> search -> extract
          -> distill -> export -> evaluate -> report

Every stage is content-addressed (``stages.run_stage``): its key hashes the spec, the parent's
content hash, the data digest, the code version and the upstream keys, so a rerun after a crash
skips what is done and resumes distillation from its last checkpoint. The output folder is
written atomically by the exporter. Orchestration only: the tensor math lives in ``nn``,
``importance``, ``supernet``, ``search``, ``extract``, ``distill``, ``teacher`` and ``quality``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autocompress import __version__, cache
from autocompress.build.settings import BuildSettings, derive_build
from autocompress.build.stages import StageResult, run_stage, stage_key


@dataclass(frozen=True)
class BuildResult:
    output: Path
    report: dict
    stages: tuple[StageResult, ...]


class BuildError(Exception):
    """A build that cannot run (infeasible contract, parent without weights): exit code 1 or 2."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def _parent_folder(spec, parent, base_dir: str) -> Path:
    from autocompress.export.gguf_convert import convert_alias, convert_gguf

    if not parent.has_weights:
        raise BuildError(f"{spec.parent.value}: a bare config.json has no weights; `acc build` needs a Hugging Face "
                         "folder, a .gguf file or a built-in alias (use `acc check` for feasibility only)")
    if parent.kind == "alias":
        return convert_alias(spec.parent.value)
    if parent.kind == "gguf":
        return convert_gguf(parent.path)
    return Path(parent.path).parent


def run_build(spec_path: str, work_dir: str | None = None, log: Callable[[str], None] = print,
              progress: bool = True, stop_after_stage: str | None = None) -> BuildResult:
    """Run every stage of ``acc build`` for ``spec_path`` (see the module docstring)."""
    import torch

    from autocompress.check import run_check
    from autocompress.derive import derive
    from autocompress.parents import resolve_parent
    from autocompress.spec import load_spec

    t_start = time.perf_counter()
    spec = load_spec(spec_path)
    base = os.path.dirname(os.path.abspath(spec_path))
    out = Path(base) / (spec.output or f"out/{Path(spec_path).stem}")
    work = Path(work_dir) if work_dir else out.parent / f".{out.name}.acc"
    spec_bytes = Path(spec_path).read_bytes()
    timings: dict[str, float] = {}
    stages: list[StageResult] = []

    def timed(name, fn):
        t = time.perf_counter()
        r = fn()
        timings[name] = time.perf_counter() - t
        if isinstance(r, StageResult):
            stages.append(r)
        return r

    # ---- check: the contract must be feasible before any weight is loaded ------------------------
    check = timed("check", lambda: run_check(spec_path))
    if check.report["verdict"] != "feasible":
        raise BuildError("the contract is infeasible (see `acc check`); nothing to build", exit_code=1)
    parent = resolve_parent(spec.parent, base)
    derived = derive(spec, parent.architecture, base)
    settings = derive_build(spec)
    for name, value, why in derived.rows + settings.rows:
        log(f"  {name:<28} {value:<24} {why}")
    torch.manual_seed(settings.seed)

    # ---- parent weights and data --------------------------------------------------------------
    from autocompress import data as D
    from autocompress.nn.llama import load_llama

    folder = timed("parent", lambda: _parent_folder(spec, parent, base))
    params, cfg = load_llama(folder)
    corpus = D.load_corpus(spec.distill.data if spec.distill and spec.distill.data else None, base)
    k_data = cache.key("data", corpus.digest, D.tokenizer_digest(folder), str(settings.seq_len))
    log(f"[data] {corpus.description}: {len(corpus.docs)} documents")
    train = D.mixed_dataset(corpus, folder, settings.seq_len, {"code": 0.5, "prose": 0.5}, "train")
    heldout = {kind: D.token_dataset(corpus, folder, settings.seq_len, "heldout", kind)[: settings.eval_rows]
               for kind in ("code", "prose")}
    heldout = {k: v for k, v in heldout.items() if len(v)}
    g = torch.Generator().manual_seed(settings.seed)
    order = torch.randperm(len(train), generator=g)
    calib_rows = train[order[: settings.calib_rows]]
    train_rows = train[order[: settings.teacher_rows]]
    base_key = cache.key(spec_bytes, parent.content_hash, k_data, __version__)

    # ---- importance and the permuted (supernet) weights ----------------------------------------
    from safetensors.torch import load_file, save_file

    from autocompress.importance import collect_importance
    from autocompress.supernet import permute

    def importance_stage(tmp: Path, partial: Path) -> dict:
        batches = [calib_rows[i:i + settings.batch, :-1] for i in range(0, len(calib_rows), settings.batch)]
        with torch.no_grad():
            stats = collect_importance(params, cfg, batches)
        stats.to_json(tmp / "importance.json")
        permuted, _ = permute(params, cfg, stats)
        save_file({k: v.contiguous() for k, v in permuted.items()}, str(tmp / "permuted.safetensors"))
        return {"calibration_tokens": int(calib_rows[:, :-1].numel())}

    imp = timed("importance", lambda: run_stage(work, "importance", stage_key("importance", base_key), importance_stage,
                                                log))
    permuted = load_file(str(imp.path / "permuted.safetensors"))
    # the prefix order lives in the output folder too: `acc check` on this spec uses it next time
    (out.parent / f".{out.name}.acc").mkdir(parents=True, exist_ok=True)

    # ---- teacher outputs (top-k), cached once for search and distillation ----------------------
    from autocompress.nn.llama import forward as llama_forward
    from autocompress.teacher import cache_teacher

    teacher_fn = lambda ids: llama_forward(params, cfg, ids)  # noqa: E731
    tkey = stage_key("teacher", base_key, str(settings.topk))
    teacher = timed("teacher", lambda: cache_teacher(teacher_fn, train_rows, tkey, k=settings.topk,
                                                      batch=settings.batch, cache_dir=work / f"teacher-{tkey}"))
    held_teacher = {k: cache_teacher(teacher_fn, v, stage_key("held", base_key, k), k=settings.topk,
                                     batch=settings.batch, cache_dir=work / f"held-{k}-{tkey}")
                    for k, v in heldout.items()}

    # ---- search: the starting point from cvxpy with measured importance, then the router -------
    from autocompress.build.choose import choose_architecture

    def search_stage(tmp: Path, partial: Path) -> dict:
        chosen = choose_architecture(spec, parent.architecture, derived, imp.path / "importance.json", permuted, cfg,
                                     teacher, train_rows, settings, log)
        (tmp / "architecture.json").write_text(json.dumps(chosen, indent=2))
        return {"strategy": settings.strategy}

    srch = timed("search", lambda: run_stage(work, f"search-{settings.strategy}",
                                             stage_key("search", imp.key, tkey, json.dumps(settings.as_dict())),
                                             search_stage, log))
    chosen = json.loads((srch.path / "architecture.json").read_text())
    if stop_after_stage == "search":
        return BuildResult(out, chosen, tuple(stages))

    # ---- extract, distill, export ------------------------------------------------------------
    from autocompress.build.student import arch_from_json, distill_and_export

    arch = arch_from_json(chosen["architecture"], parent.architecture)
    result = timed("distill+export", lambda: distill_and_export(
        arch, permuted, cfg, teacher, train_rows, settings, folder, out, work, srch.key, log, progress))
    # ---- evaluate and report -------------------------------------------------------------------
    from autocompress.build.evaluate import evaluate_build

    quality = timed("evaluate", lambda: evaluate_build(params, cfg, out, heldout, held_teacher, folder, settings))
    from autocompress.report.build import write_build_report

    report = write_build_report(out, spec, spec_path, check.report, chosen, arch, parent, derived, settings, quality,
                                result, timings, time.perf_counter() - t_start)
    return BuildResult(out, report, tuple(stages))
