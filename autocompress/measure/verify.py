"""``acc verify OUT spec``: run the contract's workloads on the exported model and judge every bound.

    exported folder + spec -> predicted (cost model, named profile)
                           -> measured (engine worker, fresh process)   when the hardware is here
                           -> verified contract report (OUT/verify-report.md, .json)

Where the target hardware is this machine and the engine is installed, each workload runs in the
named engine (``autocompress.measure.worker``: one fresh process, so its peak resident memory
is the serving process's memory) with the engine settings our export recommends
(``engines.derive_limits``). Each bound gets the bound, the prediction, the measurement, the
margin ((bound - measured) / bound, positive = inside) and pass/fail; a bound with a percentile is
judged on that percentile of the samples. Where the hardware is absent nothing is measured: the
report says "predicted", names the calibration profile and quotes its measured error, and never
shows a prediction in a measurement column. Quality retained comes from the build report (held-out
data, measured at build time).
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

METRIC_SAMPLE = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


class VerifyError(Exception):
    """Verification cannot start (no exported model, spec mismatch): exit code 2."""


@dataclass(frozen=True)
class VerifyResult:
    report: dict
    exit_code: int  # 0: every bound holds (measured, or predicted when not measurable); 1: a bound fails


def _measured_value(metric: str, percentile, m: dict) -> float:
    """The measured value a bound is judged on: the median (no percentile) or that percentile of
    the per-request samples; throughput is one number per run."""
    from autocompress.measure.engines.base import percentile as pct

    if metric == "throughput":
        return m["throughput_tok_s"]
    if percentile is None:
        return m[METRIC_SAMPLE[metric]]
    if metric == "tpot":
        vals = [(s["e2e_s"] - s["ttft_s"]) / (s["output_tokens"] - 1) for s in m["samples"] if s["output_tokens"] > 1]
    else:
        vals = [s[METRIC_SAMPLE[metric]] for s in m["samples"]]
    return pct(vals, percentile)


def _margin(op: str, bound: float, value: float) -> float:
    return (bound - value) / bound if op == "<=" else (value - bound) / bound


def run_verify(out_dir: str, spec_path: str, threads: int | None = None, requests: int | None = None,
               log=print, measure: bool = True, progress=None) -> VerifyResult:
    """``progress`` (an ``autocompress.progress.Progress``; else ``log`` gets the log lines): the engine
    start and each workload's requests, with rate and ETA (``measure.events``)."""
    from autocompress.cache import atomic_write_text
    from autocompress.plan.derive import derive
    from autocompress.measure.engines.base import derive_limits
    from autocompress.feasibility.exact import evaluate
    from autocompress.parents.resolve import resolve_parent
    from autocompress.measure.presence import engine_available, hardware_present
    from autocompress.measure.runner import run_worker, workload_dict
    from autocompress.lang.api import load_spec
    from autocompress.lang.model import ParentRef
    from autocompress.progress import as_progress

    progress = as_progress(progress if progress is not None else log)
    log = progress.log
    out = Path(out_dir)
    if not (out / "config.json").is_file():
        raise VerifyError(f"{out}: no exported model here (config.json missing); run `acc build` first")
    spec = load_spec(spec_path)
    base = os.path.dirname(os.path.abspath(spec_path))
    model = resolve_parent(ParentRef("hf_dir", str(out.resolve())), base)
    arch = model.architecture
    derived = derive(spec, arch, base)
    ev = evaluate(arch, spec, derived.profile, derived.device, derived.limits)
    prof = derived.profile
    present, where = hardware_present(derived.device)
    eng_ok, eng_why = engine_available(spec.target.engine)
    measured = None
    env_note = where if present else f"not measured: {where}"
    if present and not eng_ok:
        env_note = f"not measured: {eng_why}"
    if measure and present and eng_ok:
        limits = derive_limits(arch, spec.target, spec.workloads, threads=threads)
        if requests is None and derived.device.kind == "cpu":
            # this host's memory bandwidth drifts: one request's mean step time has a ~10% CV, so
            # 8 timed requests (SE ~3.5%) before a bound is judged (docs/decisions.md, 2026-11-30)
            requests = max(8, 2 * max(w.concurrency for w in spec.workloads))
        wls = [workload_dict(w, requests=requests) for w in spec.workloads]
        log(f"[verify] running {len(wls)} workload(s) in {spec.target.engine} on {where} "
            f"(threads {threads or os.cpu_count()}; load average {os.getloadavg()[0]:.2f})")
        t = time.perf_counter()
        measured = run_worker(out, spec.target, wls, limits, out.parent / f".{out.name}.acc" / "verify", threads,
                              progress=progress, label="verify")
        measured["seconds"] = round(time.perf_counter() - t, 1)
        measured["limits"] = limits.__dict__
    by_wl = {m["workload"]: m for m in (measured or {}).get("measurements", [])}
    rows = []
    for c in ev.checks:
        row = {"name": c.name, "metric": c.metric, "op": c.op, "bound": c.bound, "percentile": c.percentile,
               "predicted": c.predicted, "predicted_ok": c.ok, "measured": None, "margin": None, "pass": None}
        if measured is not None:
            if c.metric == "memory":
                value = float(measured["peak_rss_bytes"])
            else:
                value = _measured_value(c.metric, c.percentile, by_wl[c.workload])
            row.update(measured=value, margin=_margin(c.op, c.bound, value),
                       **{"pass": (value <= c.bound) if c.op == "<=" else (value >= c.bound)})
        rows.append(row)
    build_report = out / "autocompress-report.json"
    quality = json.loads(build_report.read_text()).get("quality") if build_report.is_file() else None
    report = {
        "schema": "autocompress/verify-report/v1",
        "spec": os.path.basename(spec_path), "model": os.path.relpath(out.resolve(), Path(spec_path).resolve().parent), "status": "measured" if measured else "predicted",
        "environment": env_note, "hardware": derived.device.name, "engine": spec.target.engine,
        "host": f"{platform.machine()}, {os.cpu_count()} cores",
        "versions": dict(tuple(x) for x in (measured or {}).get("measurements", [{}])[0].get("versions", ()))
        if measured else {},
        "profile": {"name": prof.name, "source": prof.source,
                    "known_error": {k: {"median": v.median, "p95": v.p95} for k, v in (prof.known_error or ())}},
        "bounds": rows, "measurements": measured, "quality": quality,
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    from autocompress.report.verify import render_verify_markdown

    atomic_write_text(out / "verify-report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out / "verify-report.md", render_verify_markdown(report))
    from autocompress.export.card import update_measured

    if measured and update_measured(out, report):  # the model card's measured column
        log(f"[verify] measured costs written to {out.name}/README.md and config.json")
    judged = [r["pass"] if measured else r["predicted_ok"] for r in rows]
    return VerifyResult(report, 0 if all(judged) else 1)
