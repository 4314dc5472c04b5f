"""``acc build``: the recipe from a contract to an exported, distilled model.

    output check -> check -> parent -> data -> importance (+ permutation) -> teacher
        -> per strategy: search -> shortlist -> extract -> distill -> export -> evaluate -> accuracy -> report

The output folder is validated before anything else (``output``: no user file is ever replaced).
Every stage is content-addressed (``stages.run_stage``): its key hashes its inputs, the settings
that shape it and the source of the code it runs (``cache.code_digest``), so a rerun after a crash
or an unrelated edit skips what is done and resumes distillation from its last checkpoint, while
a change to a stage's code or settings re-runs that stage and everything downstream.
Orchestration only: the tensor math lives in the stage modules (``data``, ``importance``,
``permute``, ``teacher``, ``search``, ``shortlist``, ``extract``, ``distill``, ``evaluate``).

Under ``torchrun`` / ``srun`` / ``acc build --nproc N`` (``build.dist``) every rank runs this
recipe: importance, teacher outputs, the search's measured forwards and distillation (FSDP2,
``distill_dist``) are split over the ranks; rank 0 alone writes stage folders, the export, the
evaluation and the report, and the others wait for it.

Concurrent builds (``build.lock``): a build holds its output folder's lock (``lock.lock_path``:
nothing is written beside the spec, and the baseline's) from its start to its end, so a second build of the same spec
refuses at once with exit 2, naming the first's pid; builds of other specs sharing a work folder
or cache run side by side, each stage computed once under its own lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from safetensors.torch import load_file, save_file

from autocompress.build import dist, lock, preflight
from autocompress.build.choice import search, shortlist
from autocompress.build.output import plan_output
from autocompress.build.prepare import Prepared, parent_folder, prepare
from autocompress.build.settings import BuildSettings
from autocompress.build.stages import StageResult, crash_point, run_stage, stage_key
from autocompress.contract import Contract, as_contract
from autocompress.diagnostics import EXIT_OK, BuildError
from autocompress.evaluate.benchmarks.command import build_accuracy
from autocompress.evaluate.benchmarks.stage import model_digest
from autocompress.evaluate.heldout import compared, evaluate_parent, evaluate_student, humaneval_key
from autocompress.families.registry import require_buildable
from autocompress.feasibility.exact import evaluate
from autocompress.ir import Architecture, arch_to_dict
from autocompress.progress import Progress, as_progress
from autocompress.report.build import write_build_report
from autocompress.report.feasibility import arch_report, evaluation_dict
from autocompress.train.distill import DistillConfig, distill
from autocompress.train.distill_dist import distill_sharded


@dataclass(frozen=True)
class BuildResult:
    output: Path
    report: dict
    stages: tuple[StageResult, ...]


def plan_outputs(contract: Contract, baseline: str | None = None, force: bool = False) -> tuple[Path, Path | None]:
    """The output folders a build may write (``output.plan_output``; a ``SpecError`` at the
    ``output`` line otherwise): the spec's, and ``<output>-<baseline>``."""
    spec, path, source = contract.spec, contract.path, contract.source
    out_dir = os.path.join(contract.base, spec.output or f"out/{Path(path).stem}")
    out = plan_output(spec, path, out_dir, force, source).folder
    return out, plan_output(spec, path, f"{out}-{baseline}", force, source).folder if baseline else None


def run_build(contract: Contract | str, work_dir: str | None = None, progress: Progress | None = None,
              baseline: str | None = None, force: bool = False, no_calibrate: bool = False) -> BuildResult:
    """Run every stage of ``acc build`` for ``contract`` (see the module docstring): the command's,
    parsed and resolved once at its edge (``contract.load_contract``), or a spec file's path.

    ``baseline="uniform"``: also build the Minitron-style uniform model at the same budget (same
    importance, teacher outputs, bounds and distillation budget) into ``<output>-uniform`` and put
    its quality in the report, so any user can A/B the two strategies. ``force``: replace an
    earlier autocompress output of another spec, and compress even when the parent already meets
    the contract as measured (``preflight``). ``no_calibrate``: no calibration of this machine
    first, when it has no profile yet."""
    progress = as_progress(progress)
    t_start = time.perf_counter()
    contract = as_contract(contract)
    out, b_out = plan_outputs(contract, baseline, force)  # before any work
    with contextlib.ExitStack() as held:
        _lock_outputs(held, [out] + ([b_out] if b_out else []), progress)
        return _run_build(contract, out, b_out, work_dir, progress, baseline, force, no_calibrate, t_start)


def _lock_outputs(held: contextlib.ExitStack, outs: list[Path], progress: Progress) -> None:
    """Hold the lock of each output folder for the build (rank 0 for the job): ``LockBusy`` (exit 2,
    naming the holder's pid) on every rank when another build holds one."""
    busy = None
    if dist.is_main():
        try:
            for o in outs:
                held.enter_context(lock.hold(lock.lock_path(o), f"output {o}", progress.log))
        except lock.LockBusy as e:
            busy = e
    if dist.from_main(busy is not None):
        raise busy or lock.LockBusy(f"output {outs[0]} is locked by another build of the same spec", None)


def _run_build(contract: Contract, out: Path, b_out: Path | None, work_dir: str | None, progress: Progress,
               baseline: str | None, force: bool, no_calibrate: bool, t_start: float) -> BuildResult:
    spec, spec_path, base = contract.spec, contract.path, contract.base
    # before any work: exit 2 at the model line
    require_buildable(spec, contract.parent.architecture.family, spec_path, contract.source)
    work = Path(work_dir) if work_dir else out.parent / f".{out.name}.acc"
    _preflight(contract, work, progress, force, no_calibrate)
    p = prepare(contract, work, progress)

    def parent_quality_stage(tmp: Path, partial: Path) -> dict:
        q = evaluate_parent(p.params, p.cfg, p.data.heldout, p.folder, p.settings, p.family.forward, progress)
        (tmp / "quality.json").write_text(json.dumps(q))
        return {}

    pkey = stage_key("parent-quality", ("autocompress.evaluate.heldout", *p.family.code["teacher"][1:]), p.data_key,
                     str(p.settings.eval_rows))
    pq = p.timed("evaluate (parent)", lambda: run_stage(p.work, "parent-quality", pkey, parent_quality_stage,
                                                        progress.log))
    parent_quality = json.loads((pq.path / "quality.json").read_text())

    def make(strat: BuildSettings, target: Path) -> tuple[dict, Architecture, dict, dict]:
        tag = "" if strat.strategy == p.settings.strategy else f" ({strat.strategy})"
        chosen, arch = shortlist(p, strat, search(p, strat))
        # distillation is keyed by what it reads (the architecture, the permuted weights, the
        # teacher outputs), not by the search that chose it: when autocompress's measured choice is
        # the uniform grid's point, both strategies share one distillation
        dkey = stage_key("student", (), p.importance.key, p.teacher_key, json.dumps(arch_to_dict(arch), sort_keys=True))
        st, extras = p.timed(f"distill{tag}", lambda: _distill(p, arch, strat, dkey))
        p.stages.append(st)
        fmt = p.timed(f"export{tag}", lambda: dist.main_only(lambda: _export(p, arch, st.path, extras, target,
                                                                             strat.strategy)))
        quality = p.timed(f"evaluate{tag}", lambda: _evaluate(p, parent_quality, target, strat))
        # the eight benchmarks, cached stages: every rank enters the stage (run_stage's collectives);
        # rank 0 alone scores, the others wait
        acc = p.timed(f"accuracy{tag}", lambda: build_accuracy(p.folder, target, p.work, progress))
        quality["accuracy"] = acc
        return chosen, arch, {**st.summary, "format": fmt}, quality

    chosen, arch, result, quality = make(p.settings, out)
    base_report = None
    if baseline and baseline != p.settings.strategy:
        b_chosen, b_arch, b_result, b_quality = make(replace(p.settings, strategy=baseline), b_out)
        b_pred = evaluation_dict(evaluate(b_arch, spec, p.derived.profile, p.derived.device, p.derived.limits))
        base_report = {"strategy": baseline, "output": os.path.relpath(b_out, base),
                       "architecture": arch_report(b_arch, b_chosen["architecture"].get("importance_kept")),
                       "quality": b_quality, "distill": b_result, "predicted": b_pred,
                       "how": b_chosen.get("how"), "refine": b_chosen.get("refine"),  # its measured candidates
                       "shortlist": b_chosen.get("shortlist")}
    report = dist.main_only(lambda: write_build_report(
        out, spec, spec_path, p.check.report, chosen, arch, p.parent, p.derived, p.settings, quality, result,
        p.timings, time.perf_counter() - t_start, base_report))
    return BuildResult(out, report, tuple(p.stages))  # report: None on ranks other than 0


def _evaluate(p: Prepared, parent_quality: dict, target: Path, strat: BuildSettings) -> dict:
    """The evaluate stage of one strategy: the exported student on the held-out rows and HumanEval.

    Keyed by the exported folder's content (what is measured is what ships, so an edit of the
    search, distillation or export that leaves the weights as they were re-uses it), the data, the
    code of the evaluation and of the held-out teacher outputs (KL's reference), and the settings
    the measurement reads. Every rank computes the key after the export's barrier; rank 0 measures."""
    def evaluate_stage(tmp: Path, partial: Path) -> dict:
        q = evaluate_student(target, p.data.heldout, p.held_teacher, p.folder, strat, p.family.load_exported,
                             p.progress)
        (tmp / "quality.json").write_text(json.dumps(q))
        return {}

    key = stage_key("evaluate", ("autocompress.evaluate.heldout", *p.family.code["teacher"]), model_digest(target),
                    p.data_key, str(strat.eval_rows), str(strat.batch), str(strat.topk), humaneval_key())
    st = run_stage(p.work, f"evaluate-{strat.strategy}", key, evaluate_stage, p.progress.log)
    return compared(parent_quality, json.loads((st.path / "quality.json").read_text()), p.data.heldout_sets,
                    p.data.heldout_missing)


def _preflight(contract: Contract, work: Path, progress: Progress, force: bool, no_calibrate: bool) -> None:
    """Host CPU: this machine's profile first, then the parent against the contract (``preflight``)."""
    spec, parent = contract.spec, contract.parent
    if not preflight.applies(spec):
        return

    def on_main() -> bool:  # calibration and engine runs: one process, the others wait for its answer
        preflight.calibrate_if_needed(spec, contract.base, no_calibrate, progress, parent.architecture)
        if not parent.has_weights:
            return False  # prepare() says why a bare config cannot be built
        folder = parent_folder(contract, progress)
        check = preflight.measure_parent(spec, parent.architecture, folder, work, progress)
        for line in check.lines():
            progress.log(line)
        return check.meets
    if dist.from_main(bool(dist.main_only(on_main))) and not force:
        raise BuildError("the parent already meets every bound of the contract, as measured on this machine: nothing "
                         "to compress (--force compresses anyway)", EXIT_OK)


def _distill(p: Prepared, arch: Architecture, settings: BuildSettings, upstream_key: str) -> tuple[StageResult, dict]:
    """The distill stage: the student extracted from the parent's permuted weights (by its family,
    ``families.base``), distilled with ``settings`` (checkpoints in the stage's ``.partial``
    folder: a killed build resumes from the last one)."""
    family, teacher, train_rows, progress = p.family, p.teacher, p.data.train, p.progress
    permuted, cfg, work = p.permuted, p.cfg, p.work
    state, extras = family.extract(permuted, cfg, arch)
    dcfg = DistillConfig(steps=settings.distill_steps, batch=settings.batch, lr=settings.lr, seed=settings.seed,
                         ckpt_every=max(1, min(20, settings.distill_steps // 3)))

    recipe = _recipe()
    ranks = f", {dist.world()} process{'es' if dist.world() > 1 else ''} (FSDP2)" if dist.active() else ""

    def distill_stage(tmp: Path, partial: Path) -> dict:
        model = family.student(arch, state, extras)
        progress.log(f"[distill] {settings.distill_steps} steps x {settings.batch} x {settings.seq_len} tokens, "
                     f"lr {settings.lr}{ranks}")
        if any(partial.iterdir()):
            progress.log(f"[distill] resuming from the last checkpoint in {partial.name}")
        crash = os.environ.get("ACC_CRASH_AT", "")
        if crash.startswith("distill:"):  # fault injection (stages.crash_point): die after checkpoint N
            recipe(model, teacher, train_rows, dcfg, ckpt_dir=partial, progress=progress,
                   stop_after=int(crash.split(":")[1]))
            crash_point(crash)
            model = family.student(arch, state, extras)  # ranks that live on (ACC_CRASH_RANK) start over
        res, sd = recipe(model, teacher, train_rows, dcfg, ckpt_dir=partial, progress=progress)
        if extras.get("tie_word_embeddings", arch.tie_embeddings):
            sd.pop("lm_head.weight", None)
        if dist.is_main():
            save_file(sd, str(tmp / "student.safetensors"))
        summary = {"steps": res.steps, "tokens": res.tokens, "seconds": round(res.seconds, 1),
                   "first_loss": res.losses[0] if res.losses else None,
                   "last_loss": res.losses[-1] if res.losses else None, "resumed_from": res.resumed_from}
        (tmp / "distill.json").write_text(json.dumps({**summary, "losses": res.losses}, indent=1))
        return summary

    code = tuple(family.code["distill"]) + ("autocompress.train.distill_dist",)
    key = stage_key("distill", code, upstream_key, json.dumps(asdict(dcfg), default=str, sort_keys=True))
    st = run_stage(work, "distill", key, distill_stage, progress.log, collective=True)
    return st, extras


def _recipe():
    """``(model, teacher, rows, cfg, **kw) -> (result, full state dict)``: the single-process recipe,
    or under a launcher the FSDP2 one (``distill_dist``; the state dict on rank 0 only)."""
    if dist.active():
        return distill_sharded
    def single(model, *args, **kw):
        res = distill(model, *args, **kw)
        return res, {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    return single


def _export(p: Prepared, arch: Architecture, stage: Path, extras: dict, out: Path, strategy: str) -> str:
    """Write the distilled student to ``out`` in its family's format (validated by
    ``output.plan_output`` at the start: absent, empty, or an earlier autocompress output it may
    replace), with the parent's tokenizer. Returns the format."""
    trained = load_file(str(stage / "student.safetensors"))
    fmt = p.family.export(out, arch, trained, p.folder, extras, overwrite=True, spec_path=p.contract.path,
                          strategy=strategy)
    p.progress.log(f"[export] {out} ({fmt})")
    return fmt
