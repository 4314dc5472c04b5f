"""The stages every strategy of one build shares: check, parent, data, importance (+ permutation),
teacher outputs (``prepare`` -> ``Prepared``). ``pipeline.run_build`` runs them once, then the
per-strategy stages; benchmarks use ``Prepared`` to run the search alone.

Under a launcher (``build.dist``) rank 0 fills the caches first (check, parent, tokens) and
the others read them; importance and teacher outputs are split over the ranks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from autocompress.build import dist
from autocompress.build.settings import BuildSettings, derive_build
from autocompress.build.stages import StageResult, run_stage, stage_key
from autocompress.check import CheckResult, check_contract
from autocompress.contract import Contract, as_contract
from autocompress.data.stage import BuildData, prepare_data
from autocompress.data.teacher import TeacherCache, cache_teacher
from autocompress.diagnostics import EXIT_INFEASIBLE, EXIT_NOT_FOUND, BuildError
from autocompress.export.gguf_convert import weights_folder
from autocompress.families.base import BuildFamily, family_of
from autocompress.lang.model import Spec
from autocompress.nn.hybrid import HybridConfig
from autocompress.parents.resolve import ParentInfo
from autocompress.plan.derive import Derived, derive
from autocompress.progress import Progress, as_progress


def parent_folder(contract: Contract, progress: Progress | None = None) -> Path:
    """The parent's safetensors folder: its own, or its GGUF's conversion (``BuildError`` for a
    bare config.json, which has no weights)."""
    spec, parent = contract.spec, contract.parent
    if not parent.has_weights:
        raise BuildError(f"{spec.parent.value}: a bare config.json has no weights; `acc build` needs a Hugging Face "
                         "folder, a .gguf file or a built-in alias (use `acc check` for feasibility only)")
    return weights_folder(spec.parent.value, parent, progress)


def check_verdict(check) -> None:
    verdict = check.report["verdict"]
    if verdict == "infeasible":
        raise BuildError("the contract is infeasible: no architecture in the search space meets it (see `acc check`)",
                         EXIT_INFEASIBLE)
    if verdict == "not_found":
        raise BuildError("no architecture was found that meets the contract, though infeasibility is not proved: "
                         f"{check.report.get('reason') or 'see `acc check`'}", EXIT_NOT_FOUND)


@dataclass
class Prepared:
    """What every strategy of one build shares, computed once (``prepare``): the contract as parsed
    and resolved (``contract``), the settings derived from it, and the shared stages' outputs (the
    parent's weights, the data, the importance and permuted weights, the teacher outputs) with the
    keys that later stages chain from. Benchmarks reuse it to run the search alone."""

    contract: Contract
    derived: Derived
    settings: BuildSettings
    check: CheckResult
    family: BuildFamily  # every family-specific call goes through it
    folder: Path  # the parent's safetensors folder (and tokenizer)
    params: dict[str, torch.Tensor]  # the parent's weights
    cfg: HybridConfig  # the family's config of them
    data: BuildData
    importance: StageResult
    permuted: dict[str, torch.Tensor]  # the parent's weights, permuted by importance
    teacher: TeacherCache  # top-k teacher outputs of the training rows
    held_teacher: dict[str, TeacherCache]  # of each kind of held-out rows
    teacher_key: str
    spec_key: str
    data_key: str
    work: Path
    progress: Progress
    timings: dict[str, float] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)

    @property
    def spec(self) -> Spec:
        return self.contract.spec

    @property
    def parent(self) -> ParentInfo:
        return self.contract.parent

    def timed(self, name: str, fn):
        t = time.perf_counter()
        r = fn()
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t
        if isinstance(r, StageResult):
            self.stages.append(r)
        return r


def prepare(contract: Contract | str, work: Path, progress: Progress | None = None) -> Prepared:
    """The shared stages: check, parent, data, importance (+ permutation), teacher outputs.
    ``contract``: the command's (``contract.load_contract``), or a spec file's path."""
    progress = as_progress(progress)
    log = progress.log
    contract = as_contract(contract)
    spec, base, parent = contract.spec, contract.base, contract.parent
    timings: dict[str, float] = {}
    t = time.perf_counter()
    check = dist.main_first(lambda: check_contract(contract))  # feasible before any weight is loaded
    timings["check"] = time.perf_counter() - t
    for line in check.damaged:  # a damaged cache entry was recomputed: say so, as for a stage
        log(line)
    check_verdict(check)
    derived = derive(spec, parent.architecture, base)
    settings = derive_build(spec)
    if settings.batch < dist.world():
        raise BuildError(f"distill batch {settings.batch} is smaller than the {dist.world()} processes: each needs at "
                         "least one row per step (raise `batch` in the spec's distill block, or use fewer processes)")
    for name, value, why in derived.rows + settings.rows:
        log(f"  {name:<28} {value:<24} {why}")
    torch.manual_seed(settings.seed)

    t = time.perf_counter()
    family = family_of(parent.architecture.family)  # the per-family seam (``families.base``)
    folder = dist.main_first(lambda: parent_folder(contract, progress))
    try:
        params, cfg = family.load(folder)
    except NotImplementedError as e:  # a config feature the family's forward lacks (RoPE scaling, biases...)
        raise BuildError(f"{spec.parent.value}: acc build cannot compress this {parent.architecture.family} parent: "
                         f"{e}") from None
    timings["parent"] = time.perf_counter() - t
    t = time.perf_counter()
    data = dist.main_first(lambda: prepare_data(spec, folder, settings, base, progress))
    timings["data"] = time.perf_counter() - t
    log(f"[data] {data.description}: {data.documents} documents")
    # stages that do not read the contract (importance, teacher outputs, the parent's quality) are
    # keyed without it, so builds of different specs in one work folder share them; the search key
    # adds the spec and the calibration profile (a re-measured profile re-searches)
    # the folder every stage reads is the parent's, or its GGUF's conversion: the converter's code
    # keys it too (the family's loader keys the stages that run it, ``families.base``)
    data_key = stage_key("data", ("autocompress.export.gguf_convert",), parent.content_hash, data.key)
    spec_key = stage_key("spec", (), contract.source.encode("utf-8"),
                         Path(derived.profile.path).read_bytes() if derived.profile.path else b"")

    def importance_stage(tmp: Path, partial: Path) -> dict:
        stats = family.importance(params, cfg, data.calibration, settings.batch, settings.ablation_rows, progress)
        if dist.is_main():  # under a launcher every rank measured its share; rank 0 writes
            stats.to_json(tmp / "importance.json")
            permuted, _ = family.permute(params, cfg, stats)
            save_file({k: v.contiguous() for k, v in permuted.items()}, str(tmp / "permuted.safetensors"))
        return {"calibration_tokens": int(data.calibration[:, :-1].numel())}

    ikey = stage_key("importance", family.code["importance"], data_key,
                     str(settings.calib_rows), str(settings.batch), str(settings.ablation_rows))
    t = time.perf_counter()
    imp = run_stage(work, "importance", ikey, importance_stage, log, collective=True)
    timings["importance"] = time.perf_counter() - t
    permuted = load_file(str(imp.path / "permuted.safetensors"))

    teacher_fn = lambda ids: family.forward(params, cfg, ids)  # noqa: E731
    code = family.code["teacher"]
    tkey = stage_key("teacher", code, data_key, str(settings.topk), str(settings.teacher_rows), str(settings.batch))
    t = time.perf_counter()
    with progress.task(f"teacher top-{settings.topk} ({len(data.train)} rows)", unit="chunk") as bar:
        def chunk(c, n):
            bar.state.total = n
            bar.advance()
        teacher = cache_teacher(teacher_fn, data.train, tkey, k=settings.topk, batch=settings.batch,
                                cache_dir=work / f"teacher-{tkey}", on_chunk=chunk)
    held = {k: cache_teacher(teacher_fn, v, stage_key("held", code, data_key, k, str(settings.eval_rows),
                                                      str(settings.topk)),
                             k=settings.topk, batch=settings.batch, cache_dir=work / f"held-{k}-{tkey}")
            for k, v in data.heldout.items()}
    timings["teacher"] = time.perf_counter() - t
    return Prepared(contract, derived, settings, check, family, folder, params, cfg, data, imp, permuted, teacher,
                    held, tkey, spec_key, data_key, work, progress, timings, [imp])
