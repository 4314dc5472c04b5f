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

import datetime as _dt
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path


class ProfileRunError(RuntimeError):
    """The target cannot be profiled here (hardware or engine absent)."""


@dataclass(frozen=True)
class ProfileRun:
    path: Path
    profile: dict
    calibration: int
    heldout: int


def run_profile(hardware: str, engine: str, out: str | os.PathLike, model: str = "smollm2-135m",
                precision: str | None = None, threads: int | None = None, quick: bool = False,
                root: str | os.PathLike | None = None, log=print, progress=None) -> ProfileRun:
    """``progress`` (an ``autocompress.progress.Progress``; else ``log`` gets the log lines): one task
    over the models, and per model the engine start and each workload (``measure.events``)."""
    from autocompress.cache import atomic_write_text, cache_root
    from autocompress.progress import as_progress
    from autocompress.measure.presence import engine_available, hardware_present
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import Profile, load_profile
    from autocompress.parents.resolve import resolve_parent
    from autocompress.measure.fit import errors, fit_profile, profile_dict, summary
    from autocompress.measure.calibration import measure_arch
    from autocompress.measure.calibration import CALIBRATION_ARCHS, HELDOUT_ARCHS, workloads
    from autocompress.measure.synth import variants
    from autocompress.lang.model import ParentRef, Target

    progress = as_progress(progress if progress is not None else log)
    log = progress.log
    try:
        device = resolve_device(hardware)
    except KeyError as exc:
        raise ProfileRunError(str(exc.args[0])) from None
    ok, why = hardware_present(device)
    if not ok:
        raise ProfileRunError(f"cannot profile {hardware} here: {why}")
    ok, why = engine_available(engine)
    if not ok:
        raise ProfileRunError(f"cannot profile engine {engine}: {why}")
    precision = precision or ("fp32" if device.kind == "cpu" else "bf16")
    if device.kind == "cpu":
        threads = threads or os.cpu_count()  # explicit, so measurements are keyed by the thread count used
    target = Target(hardware, engine, precision, precision)
    kind = "gguf" if model.endswith(".gguf") else ("alias" if "/" not in model and not os.path.isdir(model) else "hf_dir")
    parent = resolve_parent(ParentRef(kind, model), os.getcwd())
    if kind == "alias":
        from autocompress.export.gguf_convert import convert_alias

        tok = convert_alias(model, progress=progress)
    elif kind == "gguf":
        from autocompress.export.gguf_convert import convert_gguf

        tok = convert_gguf(parent.path, progress=progress)
    else:
        tok = Path(parent.path).parent
    n_cal, n_held = (4, 4) if quick else (CALIBRATION_ARCHS, HELDOUT_ARCHS)
    archs = variants(parent.architecture, n_cal + n_held)
    root = Path(root) if root else Path(cache_root()) / "profiling"
    rows = []
    with progress.task("profile", total=len(archs), unit="model") as bar:
        for i, arch in enumerate(archs):
            rows.append(measure_arch(arch, target, tok, root, threads=threads, log=log, progress=progress))
            log(f"[profile] {i + 1}/{len(archs)} {arch.name} ({arch.params() / 1e6:.1f}M params) measured")
            bar.advance()
    from autocompress.cost.profile import PROFILE_DIR

    base = load_profile(PROFILE_DIR / f"{device.kind}-{engine}-default.json", device, engine)  # the fit's start
    calib, held = [r for rs in rows[:n_cal] for r in rs], [r for rs in rows[n_cal:] for r in rs]
    fitted = fit_profile(calib, base, target, log=log)
    known = summary(errors(held, fitted, target))
    doc = profile_dict(
        fitted, f"{hardware}-{engine}-measured", known,
        f"acc profile --hardware {hardware} --engine {engine}: {n_cal} calibration + {n_held} held-out "
        f"architectures derived from {model} x {len(workloads())} workloads; {precision}; threads "
        f"{threads or os.cpu_count()}; {platform.machine()} {os.cpu_count()} cores; known_error is measured on the "
        "held-out architectures",
        _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"))
    doc["hardware"] = hardware
    Profile.from_dict(doc, str(out))  # validates against the schema before anything is written
    atomic_write_text(Path(out), json.dumps(doc, indent=2) + "\n")
    for k, v in known.items():
        log(f"[profile] held-out {k}: median {v['median']:.1%}, p95 {v['p95']:.1%} ({v['samples']} runs)")
    return ProfileRun(Path(out), doc, n_cal, n_held)
