"""``acc verify OUT spec``: run the contract's workloads on the exported model and judge every bound.

    exported folder + spec -> predicted (cost model, named profile)
                           -> measured, interleaved with the parent   when the hardware is here
                           -> verified contract report (OUT/verify-report.md, .json)

Where the target hardware is this machine and the engine is installed, the model, the parent
(the reference) and, when the build made one, the uniform baseline run in the named engine one
fresh process at a time, interleaved: parent, model, parent, baseline, parent
(``measure.interleave``). Each bound gets the bound, the prediction, the absolute measurement,
the margin and pass/fail, judged on the absolute value; beside them, the measured and predicted
ratio to the parent (drift cancels in it) and the **host-speed index**: the parent measured now
over the profile's prediction for it. The profile was fitted to this machine's parent, so the
index says how much faster or slower the host runs now than at calibration; the verdict
corrected by it is shown too, and the report says so when the two verdicts differ. Where the
hardware is absent nothing is measured: the report says "predicted" and quotes the profile's
measured error, and never shows a prediction in a measurement column.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from autocompress.cache import atomic_write_text
from autocompress.contract import Contract, as_contract, load_contract
from autocompress.diagnostics import SpecError
from autocompress.export import gguf_convert
from autocompress.export.card import update_measured
from autocompress.export.manifest import other_spec
from autocompress.families.registry import engine_gap
from autocompress.feasibility.exact import evaluate
from autocompress.lang.model import ParentRef
from autocompress.measure import interleave, presence, verify_paired
from autocompress.measure.engines.base import derive_limits
from autocompress.measure.engines.base import percentile as pct
from autocompress.measure.paired import PairedResult
from autocompress.measure.runner import workload_dict
from autocompress.measure.worker import MEMORY_SOURCES, peak_memory
from autocompress.parents.resolve import resolve_parent
from autocompress.plan.budget import SAMPLE_FIELD
from autocompress.plan.derive import derive
from autocompress.progress import as_progress
from autocompress.report.verify import render_verify_markdown

class VerifyError(Exception):
    """Verification cannot start (no exported model, spec mismatch): exit code 2."""


@dataclass(frozen=True)
class VerifyResult:
    report: dict
    exit_code: int  # 0: every bound holds (measured, or predicted when not measurable); 1: a bound fails


def _samples(results: list[dict], workload: str) -> list[dict]:
    return [s for r in results for m in r["measurements"] if m["workload"] == workload for s in m["samples"]]


def _value(metric: str, percentile, inter, name: str, workload: str | None) -> float:
    """The measured value a bound is judged on: the mean over the runs of each run's median, or the
    bound's percentile of all samples pooled; memory: the mean memory figure of the model's processes
    (``worker.memory_figure``: host peak RSS on the CPU, the engine's measured need on a GPU)."""
    if metric == "memory":
        return float(inter.peak_memory[name])
    if percentile is None or metric == "throughput":
        return inter.absolute[name][workload][SAMPLE_FIELD[metric]]
    s = _samples(inter.results_of(name), workload)
    if metric == "tpot":
        vals = [(x["e2e_s"] - x["ttft_s"]) / (x["output_tokens"] - 1) for x in s if x["output_tokens"] > 1]
    else:
        vals = [x[SAMPLE_FIELD[metric]] for x in s]
    return pct(vals, percentile)


def _margin(op: str, bound: float, value: float) -> float:
    return (bound - value) / bound if op == "<=" else (value - bound) / bound


def _holds(op: str, bound: float, value: float) -> bool:
    return value <= bound if op == "<=" else value >= bound


def _models(out: Path, spec, base: str, log, parent) -> dict[str, Path]:
    """model, parent (the reference: ``parent``, the spec's resolved) and the uniform baseline when
    the build made one."""
    models = {"model": out}
    if parent.has_weights:
        models["parent"] = gguf_convert.weights_folder(spec.parent.value, parent)
    report = out / "autocompress-report.json"
    b = json.loads(report.read_text()).get("baseline") if report.is_file() else None
    if b and (Path(base) / b["output"] / "config.json").is_file():
        models[f"baseline ({b['strategy']})"] = Path(base) / b["output"]
    return models


def _model_of(out: Path, contract: Contract):
    """The exported model in ``out`` (``ParentInfo``), or a ``VerifyError`` naming the path when its
    config.json is unreadable, or when it is a model of another spec: its manifest names a spec of
    another parent, or its vocabulary is not the spec's parent's (no build of this contract makes one)."""
    try:
        info = resolve_parent(ParentRef("hf_dir", str(out.resolve())), contract.base)
    except SpecError as err:
        raise VerifyError(f"{out / 'config.json'}: not a readable model configuration: "
                          f"{err.diagnostics[0].message}") from None
    other = other_spec(out, contract.path)
    if other is not None and other.is_file():
        try:
            theirs = load_contract(str(other)).parent.content_hash
        except (SpecError, OSError):
            theirs = None  # unreadable now: the vocabulary below still tells
        if theirs is not None and theirs != contract.parent.content_hash:
            raise VerifyError(f"{out}: built from {other.name}, whose parent is not {contract.path}'s; expected a "
                              f"model of {contract.path} (give the spec it was built from)")
    want, got = contract.parent.architecture.vocab_size, info.architecture.vocab_size
    if got != want:
        named = f" (its manifest names {other.name})" if other is not None else ""
        raise VerifyError(f"{out}: a model with a {got}-token vocabulary{named}; {contract.path}'s parent has "
                          f"{want}: expected a model of that spec")
    return info


def run_verify(out_dir: str, spec_path: str | Contract, threads: int | None = None, requests: int | None = None,
               log=print, measure: bool = True, passes: int = 1, progress=None, pairings: int = 0) -> VerifyResult:
    """``progress`` (an ``autocompress.progress.Progress``; else ``log`` gets the log lines): the engine
    runs, and per run the engine start and each workload's requests, with rate and ETA. ``pairings``
    K > 0: the ratios to the parent also measured with paired engines in K process pairs per model
    (``measure.verify_paired``), shown with their SE in place of the interleaved ones."""
    progress = as_progress(progress if progress is not None else log)
    log = progress.log
    out = Path(out_dir)
    if not out.exists():
        raise VerifyError(f"{out}: no exported model here (no such folder); expected acc build's output folder")
    if not out.is_dir():
        raise VerifyError(f"{out}: no exported model here (a file); expected acc build's output folder")
    if not (out / "config.json").is_file():
        raise VerifyError(f"{out}: no exported model here (config.json missing); run `acc build` first")
    contract = as_contract(spec_path)  # the command's, parsed and resolved once, or a spec file's path
    spec, spec_path, base = contract.spec, contract.path, contract.base
    model = _model_of(out, contract)
    archs = {"model": model.architecture}
    # the profile is looked up by the spec's parent (a host-CPU profile belongs to the parent it was
    # calibrated on, cost.machine.parent_tag), as the build looked it up, not by the student's shape
    derived = derive(spec, contract.parent.architecture, base)
    prof = derived.profile
    present, where = presence.hardware_present(derived.device)
    eng_ok, eng_why = presence.engine_available(spec.target.engine)
    env_note = where if present else f"not measured: {where}"
    if present and not eng_ok:
        env_note = f"not measured: {eng_why}"
    inter = paired = None
    gap = engine_gap(archs["model"], spec.target.engine, derived.device.kind)
    if present and eng_ok and gap:
        eng_ok, env_note = False, f"not measured: {gap}"
    if measure and present and eng_ok:
        models = _models(out, spec, base, log, contract.parent)
        for name, folder in models.items():
            archs.setdefault(name, resolve_parent(ParentRef("hf_dir", str(Path(folder).resolve())), base).architecture)
        limits = {n: derive_limits(a, spec.target, spec.workloads, threads=threads) for n, a in archs.items()}
        # sample until each metric's SE is below 2% (or 60 s per workload); at least 8 requests on CPU,
        # where one request's step time varies ~10%
        if requests is None:
            requests = max(8 if derived.device.kind == "cpu" else 4, 2 * max(w.concurrency for w in spec.workloads))
        wls = [workload_dict(w, requests=requests, iterations=max(3, requests // 4), target_se=0.02, max_s=60.0)
               for w in spec.workloads]
        ref = "parent" if "parent" in models else "model"
        log(f"[verify] {len(wls)} workload(s) in {spec.target.engine} on {where}: {', '.join(models)}, interleaved "
            f"with the {ref} (threads {threads or os.cpu_count()}; load average {os.getloadavg()[0]:.2f})")
        work = out.parent / f".{out.name}.acc" / "verify"
        inter = interleave.measure_interleaved(models, ref, spec.target, wls, limits, work, passes=passes,
                                               threads=threads, log=log, progress=progress,
                                               journal=work / "journal.jsonl")
        if pairings and (ref != "parent" or len(models) < 2):
            log("[verify] --pairings: no parent to pair the model with; the ratios are the interleaved ones")
            paired = {"pairings": pairings, "error": "no parent to pair the model with (the spec's parent has no "
                      "weights here)"}
        elif pairings:
            log(f"[verify] ratios to the parent with paired engines: {pairings} process pair(s) per model")
            try:
                paired = verify_paired.summary(
                    verify_paired.measure_ratios(models, spec.target, wls, limits, work, pairings, threads, log),
                    pairings)
            except Exception as err:  # noqa: BLE001 - the interleaved verdicts stand; the report says what is missing
                # (an interrupt is not caught: the saved cells resume on the next verify)
                log(f"[verify] paired engines failed ({err}); the ratios stay the interleaved ones")
                paired = {"pairings": pairings, "error": str(err)}
    predicted = {n: evaluate(a, spec, prof, derived.device, derived.limits) for n, a in archs.items()}
    report = _report(spec, spec_path, out, derived, predicted, inter, env_note, paired)
    atomic_write_text(out / "verify-report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out / "verify-report.md", render_verify_markdown(report))
    if inter and update_measured(out, report):  # the model card's measured column
        log(f"[verify] measured costs written to {out.name}/README.md and config.json")
    if inter:
        inter.close()  # saved: the run journal goes
    if paired and "error" not in paired:  # and the paired cells (an error's are kept for a resumed verify)
        verify_paired.finish(work)
    judged = [r["pass"] if inter else r["predicted_ok"] for r in report["bounds"]]
    return VerifyResult(report, 0 if all(judged) else 1)


def _index(inter, predicted, workload: str, metric: str) -> float | None:
    """The host-speed index of one bound: the reference measured now over its prediction."""
    if inter is None or inter.reference not in predicted or metric == "memory":
        return None
    pred = next(c for c in predicted[inter.reference].checks if c.workload == workload and c.metric == metric)
    return inter.absolute[inter.reference][workload][SAMPLE_FIELD[metric]] / pred.predicted


def per_pass(inter, name: str, metric: str, workload: str | None) -> list[float]:
    """The model's value over ``name``'s, pass by pass (runs of one pass are minutes apart): the A/B
    ratio measured directly, without the reference between. On this host the parent's TPOT swung
    56-90 ms within one verify while both Gemma arms held 50-53 ms, so an A/B read through the
    parent's ratios inherits the parent's noise. Where a resumed
    verify measured the two in different sessions, the direct ratio would carry the host's change
    between them; that pass's A/B is read through each one's own neighbouring references instead.
    Where the model is the reference, its value is the mean of ``name``'s two neighbours."""
    def value(i: int) -> float:
        res = inter.run_results[i]
        if metric == "memory":
            return float(peak_memory(res))
        return statistics.fmean(m[SAMPLE_FIELD[metric]] for m in res["measurements"] if m["workload"] == workload)

    def to_ref(t) -> float:
        g, b, a = t
        return value(g) / ((value(b) + value(a)) / 2)

    out = []
    for p, tn in enumerate(inter.triples.get(name, ())):
        if inter.reference == "model":
            out.append((value(tn[1]) + value(tn[2])) / 2 / value(tn[0]))
            continue
        tm = inter.triples["model"][p]
        # memory does not drift with the host's speed: its direct ratio holds across sessions
        same = metric == "memory" or inter.runs[tm[0]].get("session") == inter.runs[tn[0]].get("session")
        out.append(value(tm[0]) / value(tn[0]) if same else to_ref(tm) / to_ref(tn))
    return out


def _report(spec, spec_path, out: Path, derived, predicted: dict, inter, env_note: str, paired=None) -> dict:
    ev = predicted["model"]
    pres = PairedResult.from_dict(paired["result"]) if paired and "result" in paired else None
    rows = []
    for c in ev.checks:
        row = {"name": c.name, "metric": c.metric, "op": c.op, "bound": c.bound, "percentile": c.percentile,
               "predicted": c.predicted, "predicted_ok": c.ok, "measured": None, "margin": None, "pass": None}
        if inter is not None:
            value = _value(c.metric, c.percentile, inter, "model", c.workload)
            row.update(measured=value, margin=_margin(c.op, c.bound, value), **{"pass": _holds(c.op, c.bound, value)})
            idx = _index(inter, predicted, c.workload, c.metric)
            if idx is not None:
                corrected = value / idx
                row.update(host_index=idx, corrected=corrected, pass_corrected=_holds(c.op, c.bound, corrected))
            if inter.reference != "model" and c.metric != "memory":
                key = SAMPLE_FIELD[c.metric]
                pref = next(x for x in predicted[inter.reference].checks if x.name == c.name)
                row.update(ratio_measured=inter.ratio["model"][c.workload][key],
                           ratio_predicted=c.predicted / pref.predicted)
                got = verify_paired.ratio(pres, "model", c.workload, key)
                if got:  # the paired ratio replaces the interleaved one, which stays beside it
                    row.update(ratio_measured=got[0], ratio_se=got[1],
                               ratio_interleaved=inter.ratio["model"][c.workload][key])
            others = {n: _value(c.metric, c.percentile, inter, n, c.workload) for n in inter.absolute
                      if n not in ("model", inter.reference)}
            if others:
                row["others"] = {n: {"measured": v, "pass": _holds(c.op, c.bound, v),
                                     "predicted": next(x for x in predicted[n].checks if x.name == c.name).predicted,
                                     "model_over_this": per_pass(inter, n, c.metric, c.workload)}
                                 for n, v in others.items()}
                for n, o in row["others"].items():
                    q = (verify_paired.quotient(pres, "model", n, c.workload, SAMPLE_FIELD[c.metric])
                         if c.metric != "memory" else None)
                    if q:
                        o.update(model_over_this_paired=q[0], model_over_this_se=q[1])
        rows.append(row)
    build_report = out / "autocompress-report.json"
    quality = json.loads(build_report.read_text()).get("quality") if build_report.is_file() else None
    prof = derived.profile

    versions = {}
    if inter is not None:
        versions = dict(tuple(x) for x in inter.results_of("model")[0]["measurements"][0].get("versions", ()))
    return {
        "schema": "autocompress/verify-report/v2",
        "spec": os.path.basename(spec_path),
        "model": os.path.relpath(out.resolve(), Path(spec_path).resolve().parent),
        "status": "measured" if inter else "predicted", "environment": env_note, "hardware": derived.device.name,
        "engine": spec.target.engine, "host": f"{platform.machine()}, {os.cpu_count()} cores", "versions": versions,
        "profile": {"name": prof.name, "source": prof.source, "origin": derived.origin[1],
                    "known_error": {k: {"median": v.median, "p95": v.p95} for k, v in (prof.known_error or ())}},
        "bounds": rows, "quality": quality,
        "measurements": None if inter is None else {
            "reference": inter.reference, "passes": max(r["pass"] for r in inter.runs) + 1, "seconds": inter.seconds,
            "runs": inter.runs, "absolute": inter.absolute, "ratio": inter.ratio, "spread": inter.spread,
            "peak_rss": inter.peak_memory, "paired": paired, "memory_source": MEMORY_SOURCES[
                inter.results_of("model")[0].get("memory_source", "host-rss")],
            "load_before": inter.results_of("model")[0]["load_before"], "load_after": inter.results_of("model")[-1]["load_after"]},
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
