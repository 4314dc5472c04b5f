"""``acc profile``: measure the target engine, fit the cost model's calibration, write a profile.

    variants of the parent (synth) -> one engine process per model (measure, worker)
        -> fit on the calibration models (fit) -> error on held-out models -> profile JSON

The written profile (``specs/profile.schema.json``, ``source: measured``) carries its measured
error on models the fit never saw (``known_error``), which every report quotes next to its
predictions. A spec names it with ``profile "path"`` in its target; the profile shipped in
``autocompress/cost/profiles/cpu-vllm-measured.json`` was made by this command on the development host
and is the built-in choice for ``hardware cpu`` + ``engine vllm``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from dataclasses import dataclass, replace
from pathlib import Path

from autocompress.cache import atomic_write_text, cache_root
from autocompress.calibrate import calibration, fit
from autocompress.calibrate.margin import safety_margin
from autocompress.catalog.hardware import resolve_device
from autocompress.cost.machine import own_profile_path, parent_tag, this_machine
from autocompress.cost.profile import PROFILE_DIR, Profile, load_profile
from autocompress.diagnostics import SpecError
from autocompress.export.gguf_convert import convert_alias, convert_gguf
from autocompress.families.registry import engine_gap
from autocompress.lang.model import ParentRef, Target
from autocompress.measure import presence
from autocompress.measure.worker import peak_memory
from autocompress.parents.resolve import resolve_parent
from autocompress.progress import as_progress


class ProfileRunError(RuntimeError):
    """The target cannot be profiled here (hardware or engine absent)."""


@dataclass(frozen=True)
class ProfileRun:
    path: Path
    profile: dict
    calibration: int
    heldout: int


def run_profile(hardware: str, engine: str, out: str | os.PathLike | None = None, model: str = "smollm2-135m",
                precision: str | None = None, threads: int | None = None, quick: bool = False,
                root: str | os.PathLike | None = None, log=print, progress=None) -> ProfileRun:
    """Measure, fit and write a profile. ``out`` None: where ``acc check``, ``build`` and ``verify``
    look first (``cost.machine.own_profile_path``): for ``hardware cpu`` this machine's profile in the
    cache, for a catalog GPU that part's, by name, in the same folder. ``progress`` (an
    ``autocompress.progress.Progress``; else ``log`` gets the log lines): one task over the engine
    runs, and per run the engine start and each workload (``measure.events``)."""
    progress = as_progress(progress if progress is not None else log)
    log = progress.log
    try:
        device = resolve_device(hardware)
    except KeyError as exc:
        raise ProfileRunError(str(exc.args[0])) from None
    ok, why = presence.hardware_present(device)
    if not ok:
        raise ProfileRunError(f"cannot profile {hardware} here: {why}")
    ok, why = presence.engine_available(engine)
    if not ok:
        raise ProfileRunError(f"cannot profile engine {engine}: {why}")
    precision = precision or ("fp32" if device.kind == "cpu" else "bf16")
    if device.kind == "cpu":
        threads = threads or os.cpu_count()  # explicit, so measurements are keyed by the thread count used
    target = Target(hardware, engine, precision, precision)
    if out is not None and Path(out).is_dir():
        raise ProfileRunError(f"--out {out}: a folder; expected the profile file to write (a .json path)")
    kind = "gguf" if model.endswith(".gguf") else ("alias" if "/" not in model and not os.path.isdir(model) else "hf_dir")
    try:
        parent = resolve_parent(ParentRef(kind, model), os.getcwd())
    except SpecError as err:  # one line naming the argument, not a spec's located error
        raise ProfileRunError(f"--model {model}: {err.diagnostics[0].message}") from None
    if not parent.has_weights:
        raise ProfileRunError(f"--model {model}: no weights (no .safetensors file); expected a model folder, a "
                              ".gguf file or an alias")
    if out is None:  # where check/build/verify look first: this machine's, or this catalog GPU's, for this parent
        out = own_profile_path(device.kind, device.name, engine, parent=parent.architecture)
    tok = tokenizer_dir(kind, model, parent, progress)
    gap = engine_gap(parent.architecture, engine, device.kind)
    if gap:
        raise ProfileRunError(f"cannot profile {model} with {engine} on {hardware}: {gap}")
    cal, held = calibration.calibration_sets(parent.architecture, quick)
    root = Path(root) if root else Path(cache_root()) / "profiling"
    log(f"[profile] {len(cal)} calibration + {len(held)} held-out models, each measured between two runs of the "
        f"parent (interleaved: the host's drift cancels in ratios){' , quick' if quick else ''}")
    inter, limits, wls = calibration.measure_sets(cal + held, target, tok, root, threads, quick,
                                                  passes=1 if quick else 2, log=log, progress=progress)
    rows = calibration.normalized_rows(inter, cal + held, limits, wls)
    calib, heldout = rows[:len(cal)], rows[len(cal):]
    base = load_profile(PROFILE_DIR / f"{device.kind}-{engine}-default.json", device, engine)  # the fit's start
    fitted = fit.fit_profile(calib, base, target, log=log)
    held_errors = fit.errors(heldout, fitted, target)
    known = fit.summary(held_errors)
    # the margin from this calibration's evidence, not the default's guess (calibrate.margin)
    ref_rss = [peak_memory(r) for r in inter.results_of(cal[0].name)]  # a GPU: the engine's need, not host RAM
    mf, mb, margin_basis = safety_margin(held_errors["memory"], ref_rss, fitted.memory.margin_fraction,
                                         fitted.memory.margin_bytes, fit.loo_memory_errors(calib, fitted, target))
    fitted = replace(fitted, memory=replace(fitted.memory, margin_fraction=mf, margin_bytes=mb))
    known.update({f"ratio.{k}": v for k, v in
                  fit.summary(fit.ratio_errors(heldout, rows[0], inter, fitted, target)).items()})
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    doc = fit.profile_dict(
        fitted, f"{hardware}-{engine}-{this_machine(engine).fingerprint if device.kind == 'cpu' else 'measured'}",
        known,
        f"acc profile --hardware {hardware} --engine {engine}{' --quick' if quick else ''}: {len(cal)} calibration + "
        f"{len(held)} held-out architectures derived from {model} x {len(calibration.workloads())} workloads, each "
        f"measured interleaved with the parent and fitted on drift-normalized values; {precision}; threads {threads}; "
        f"{platform.machine()} {os.cpu_count()} cores; known_error is measured on the held-out architectures "
        "(ratio.*: the predicted ratio to the parent against the measured one); the memory margin "
        f"({mf:.1%} + {mb / 2**20:.0f} MiB) is derived from this calibration (measurement.margin)", created)
    doc["hardware"] = hardware
    if device.kind == "cpu":
        doc["machine"] = this_machine(engine).as_dict()
    doc["reference"] = {"model": f"{model} (parent)", "parent_tag": parent_tag(parent.architecture),
                        "peak_rss_bytes": inter.peak_memory[cal[0].name],
                        "workloads": inter.absolute[cal[0].name]}
    # the raw interleaved runs (every model's medians per run, ratios, spreads, busy flags): a later
    # fit can be checked or redone from the file without another hour of engine time
    doc["measurement"] = {"seconds": round(inter.seconds, 1), "runs": len(inter.runs),
                          "calibration": [a.name for a in cal], "heldout": [a.name for a in held],
                          "interleaved": inter.as_dict(), "margin": margin_basis}
    Profile.from_dict(doc, str(out))  # validates against the schema before anything is written
    atomic_write_text(Path(out), json.dumps(doc, indent=2) + "\n")
    inter.close()  # saved: the run journal goes
    for k, v in known.items():
        log(f"[profile] held-out {k}: median {v['median']:.1%}, p95 {v['p95']:.1%} ({v['samples']} runs)")
    return ProfileRun(Path(out), doc, len(cal), len(held))


def tokenizer_dir(kind: str, model: str, parent, progress=None) -> Path:
    """The tokenizer the synthetic models ship: a GGUF parent's conversion, or a folder parent's own."""
    if kind == "alias":
        return convert_alias(model, progress=progress)
    if kind == "gguf":
        return convert_gguf(parent.path, progress=progress)
    return Path(parent.path).parent
