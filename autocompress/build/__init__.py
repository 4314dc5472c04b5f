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
from dataclasses import dataclass, replace
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
              progress: bool = True, baseline: str | None = None) -> BuildResult:
    """Run every stage of ``acc build`` for ``spec_path`` (see the module docstring).

    ``baseline="uniform"``: also build the Minitron-style uniform model at the same budget (same
    importance, teacher outputs, bounds and distillation budget) into ``<output>-uniform`` and put
    its quality in the report, so any user can A/B the two strategies."""
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
    # the default mixture is 96% code by tokens: draw code and prose equally so prose quality is
    # distilled too (a user corpus of one kind simply uses that kind)
    train = D.mixed_dataset(corpus, folder, settings.seq_len, {"code": 0.5, "prose": 0.5}, "train",
                            skip_missing=True)
    heldout = {kind: D.token_dataset(corpus, folder, settings.seq_len, "heldout", kind)[: settings.eval_rows]
               for kind in ("code", "prose")}
    heldout = {k: v for k, v in heldout.items() if len(v)}
    g = torch.Generator().manual_seed(settings.seed)
    order = torch.randperm(len(train), generator=g)
    calib_rows = train[order[: settings.calib_rows]]
    train_rows = train[order[: settings.teacher_rows]]
    # stages that do not read the contract (importance, teacher outputs, the parent's quality) are
    # keyed without it, so builds of different specs in one work folder share them (issue 5's
    # benchmark builds four contracts on one parent); the search key adds the spec
    data_key = cache.key(parent.content_hash, k_data, __version__, str(settings.seed))
    # the search reads the contract and the calibration profile: a re-measured profile re-searches
    spec_key = cache.key(spec_bytes, Path(derived.profile.path).read_bytes() if derived.profile.path else b"")

    # ---- importance and the permuted (supernet) weights ----------------------------------------
    from safetensors.torch import load_file, save_file

    from autocompress.importance import IMPORTANCE_VERSION, ablation_influence, collect_importance
    from autocompress.supernet import permute

    def importance_stage(tmp: Path, partial: Path) -> dict:
        batches = [calib_rows[i:i + settings.batch, :-1] for i in range(0, len(calib_rows), settings.batch)]
        with torch.no_grad():
            stats = collect_importance(params, cfg, batches)
            few = batches[: max(1, settings.ablation_rows // settings.batch)]
            log(f"[importance] removal KL of each sub-block on {sum(len(b) for b in few)} sequences")
            attn_kl, ffn_kl = ablation_influence(
                params, cfg, few, lambda i, n: log(f"[importance] removal {i}/{n}") if i % 10 == 0 or i == n else None)
            stats = replace(stats, attention_removal=attn_kl, ffn_removal=ffn_kl)
        stats.to_json(tmp / "importance.json")
        permuted, _ = permute(params, cfg, stats)
        save_file({k: v.contiguous() for k, v in permuted.items()}, str(tmp / "permuted.safetensors"))
        return {"calibration_tokens": int(calib_rows[:, :-1].numel())}

    imp = timed("importance", lambda: run_stage(work, "importance", stage_key("importance", data_key, str(settings.calib_rows), str(settings.batch), str(settings.ablation_rows),
                                               f"v{IMPORTANCE_VERSION}"), importance_stage,
                                                log))
    permuted = load_file(str(imp.path / "permuted.safetensors"))
    # the measured importance sits where `acc check` of this spec looks for it next time, so the
    # feasibility report's starting point uses measured curves instead of the prior
    cache.atomic_write_bytes(work / "importance.json", (imp.path / "importance.json").read_bytes())

    # ---- teacher outputs (top-k), cached once for search and distillation ----------------------
    from autocompress.nn.llama import forward as llama_forward
    from autocompress.teacher import cache_teacher

    teacher_fn = lambda ids: llama_forward(params, cfg, ids)  # noqa: E731
    tkey = stage_key("teacher", data_key, str(settings.topk), str(settings.teacher_rows), str(settings.batch))
    n_chunks = -(-len(train_rows) // 64)
    log(f"[teacher] parent top-{settings.topk} outputs on {len(train_rows)} rows x {settings.seq_len} tokens "
        f"({n_chunks} chunks, resumable)")
    teacher = timed("teacher", lambda: cache_teacher(
        teacher_fn, train_rows, tkey, k=settings.topk, batch=settings.batch, cache_dir=work / f"teacher-{tkey}",
        on_chunk=lambda c, n: log(f"[teacher] chunk {c}/{n}")))
    held_teacher = {k: cache_teacher(teacher_fn, v, stage_key("held", data_key, k, str(settings.eval_rows), str(settings.topk)), k=settings.topk,
                                     batch=settings.batch, cache_dir=work / f"held-{k}-{tkey}")
                    for k, v in heldout.items()}

    # ---- per strategy: search -> extract -> distill -> export -> evaluate --------------------

    from autocompress.build.choose import choose_architecture, search_version
    from autocompress.build.evaluate import evaluate_build, evaluate_parent

    def parent_quality_stage(tmp: Path, partial: Path) -> dict:
        (tmp / "quality.json").write_text(json.dumps(evaluate_parent(params, cfg, heldout, folder, settings)))
        return {}

    pq = timed("evaluate (parent)", lambda: run_stage(
        work, "parent-quality", stage_key("parent-quality", data_key, str(settings.eval_rows)), parent_quality_stage,
        log))
    parent_quality = json.loads((pq.path / "quality.json").read_text())
    from autocompress.build.student import arch_from_json, distill_and_export

    def make(strat: BuildSettings, target: Path, tag: str) -> tuple[dict, object, dict, dict]:
        def search_stage(tmp: Path, partial: Path) -> dict:
            chosen = choose_architecture(spec, parent.architecture, derived, imp.path / "importance.json", permuted,
                                         cfg, teacher, train_rows, strat, log)
            (tmp / "architecture.json").write_text(json.dumps(chosen, indent=2))
            return {"strategy": strat.strategy}

        srch = timed(f"search{tag}", lambda: run_stage(
            work, f"search-{strat.strategy}", stage_key("search", spec_key, imp.key, tkey, json.dumps(strat.as_dict()),
                                                       *search_version(strat.strategy)),
            search_stage, log))
        chosen = json.loads((srch.path / "architecture.json").read_text())
        arch = arch_from_json(chosen["architecture"], parent.architecture)
        # distillation is keyed by what it reads (the architecture, the permuted weights, the
        # teacher outputs), not by the search that chose it: when autocompress's measured choice is
        # the uniform grid's point, both strategies share one distillation
        from autocompress.report.feasibility import _arch as arch_dict

        dkey = stage_key("student", imp.key, tkey, json.dumps(arch_dict(arch), sort_keys=True))
        result = timed(f"distill+export{tag}", lambda: distill_and_export(
            arch, permuted, cfg, teacher, train_rows, strat, folder, target, work, dkey, log, progress))
        quality = timed(f"evaluate{tag}", lambda: evaluate_build(parent_quality, target, heldout, held_teacher, folder,
                                                                 strat))
        return chosen, arch, result, quality

    chosen, arch, result, quality = make(settings, out, "")
    base_report = None
    if baseline and baseline != settings.strategy:
        b_out = out.parent / f"{out.name}-{baseline}"
        b_chosen, b_arch, b_result, b_quality = make(replace(settings, strategy=baseline), b_out, f" ({baseline})")
        from autocompress.feasibility.evaluate import evaluate
        from autocompress.report.feasibility import _arch, _evaluation

        b_pred = _evaluation(evaluate(b_arch, spec, derived.profile, derived.device, derived.limits))
        b_shape = _arch(b_arch, b_chosen["architecture"].get("importance_kept"))
        base_report = {"strategy": baseline, "output": str(b_out), "architecture": b_shape, "quality": b_quality,
                       "distill": b_result, "predicted": b_pred}
    from autocompress.report.build import write_build_report

    report = write_build_report(out, spec, spec_path, check.report, chosen, arch, parent, derived, settings, quality,
                                result, timings, time.perf_counter() - t_start, base_report)
    return BuildResult(out, report, tuple(stages))
