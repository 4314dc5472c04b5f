"""Drift-proof measurement: models measured interleaved with a reference in one run.

This host's speed drifts (17% median between two passes over the same models, and by half within
an hour once), so an absolute measurement cannot show a 5% effect. Ratios can: the schedule

    R, A1, R, A2, R, ..., An, R      (each a fresh engine process with identical settings)

puts a reference measurement right before and after every model, and a model's ratio is its
value over the mean of those two references; the drift common to neighbours cancels. With
``passes`` > 1 the whole schedule repeats and the per-pass ratios are averaged; their spread is
reported beside them (a ratio is only as good as its spread). The reference is the parent (or
the other arm of an A/B). ``host_index`` compares the reference now with the reference a
profile measured at calibration (``Profile.reference``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")


@dataclass
class Interleaved:
    """Per model and workload: absolute means over passes, ratios to the reference, their spread."""

    reference: str
    absolute: dict = field(default_factory=dict)  # model -> workload -> metric -> mean over passes
    ratio: dict = field(default_factory=dict)  # model -> workload -> metric -> mean ratio to the reference
    spread: dict = field(default_factory=dict)  # model -> workload -> metric -> (max - min) of the per-pass ratios
    peak_rss: dict = field(default_factory=dict)  # model -> mean peak RSS bytes
    results: dict = field(default_factory=dict)  # model -> the worker results of its runs (every sample)
    runs: list = field(default_factory=list)  # (model, pass, started, workload medians) in run order
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"reference": self.reference, "absolute": self.absolute, "ratio": self.ratio, "spread": self.spread,
                "peak_rss": self.peak_rss, "runs": self.runs, "seconds": round(self.seconds, 1)}


def medians(result: dict) -> dict:
    """workload -> metric -> value of one worker result."""
    return {m["workload"]: {k: m[k] for k in METRICS} for m in result["measurements"]}


def measure_interleaved(models: dict[str, Path], reference: str, target, workloads: list[dict], limits, work: Path,
                        passes: int = 2, threads: int | None = None, log=print, run=None, max_other_cpu: float = 0.25,
                        retries: int = 2, progress=None) -> Interleaved:
    """Measure every model of ``models`` (name -> exported folder) interleaved with
    ``models[reference]``; ``limits``: one ``EngineLimits`` for all (identical settings), or a
    dict name -> limits. ``run(folder, limits) -> worker result`` defaults to a fresh worker
    process. A run during which other processes used more than ``max_other_cpu`` cores is redone
    (up to ``retries`` times) and, if still busy, kept and marked ``busy`` in ``runs``.
    ``progress``: one task over the runs; each run's engine start and workloads are tasks of their
    own (``measure.events``)."""
    from autocompress.measure.runner import run_worker
    from autocompress.progress import Progress

    progress = progress or Progress()
    if run is None:
        names = {str(f): n for n, f in models.items()}  # a run's tasks are named by its model

        def run(folder, lim):
            return run_worker(folder, target, workloads, lim, work, threads, progress=progress,
                              label=names[str(folder)])
    lim_of = (lambda name: limits[name]) if isinstance(limits, dict) else (lambda name: limits)
    others = [m for m in models if m != reference]
    out = Interleaved(reference)
    per_pass: dict = {m: [] for m in others}
    rss: dict = {m: [] for m in models}
    refs: dict = {}
    t0 = time.perf_counter()
    total = passes * (2 * len(others) + 1)
    done = 0

    def one(name: str, p: int) -> dict:
        nonlocal done
        started = time.strftime("%H:%M:%S")
        for attempt in range(retries + 1):
            res = run(models[name], lim_of(name))
            # a neighbour busy on the second core stalls every OpenMP barrier of the decode step:
            # on this 2-core host the parent's TPOT went from ~60 to ~130 ms within one run
            busy = max(m.get("other_cpu", 0.0) for m in res["measurements"])
            if busy <= max_other_cpu or attempt == retries:
                break
            log(f"[measure] {name}: other processes used {busy:.2f} cores during the run ("
                + ", ".join(f"{w} TPOT {v['tpot_s'] * 1e3:.1f} ms" for w, v in medians(res).items())
                + "); measuring again")
        done += 1
        bar.advance()
        med = medians(res)
        out.runs.append({"model": name, "pass": p, "started": started, "medians": med, "other_cpu": busy,
                         "busy": busy > max_other_cpu, "attempts": attempt + 1,
                         "peak_rss_bytes": res["peak_rss_bytes"]})
        rss[name].append(res["peak_rss_bytes"])
        out.results.setdefault(name, []).append(res)
        log(f"[measure] {done}/{total} {name} (pass {p + 1}/{passes}): " + ", ".join(
            f"{w} TPOT {v['tpot_s'] * 1e3:.1f} ms" for w, v in med.items()))
        return med

    with progress.task("measure: engine runs", total=total, unit="run") as bar:
        for p in range(passes):
            before = one(reference, p)
            refs.setdefault(reference, []).append(before)
            for name in others:
                got = one(name, p)
                after = one(reference, p)
                refs[reference].append(after)
                per_pass[name].append((got, before, after))
                before = after
    out.seconds = time.perf_counter() - t0
    wl_names = list(refs[reference][0])
    for name in others:
        out.absolute[name], out.ratio[name], out.spread[name] = {}, {}, {}
        for w in wl_names:
            out.absolute[name][w], out.ratio[name][w], out.spread[name][w] = {}, {}, {}
            for k in METRICS:
                rs = [g[w][k] / ((b[w][k] + a[w][k]) / 2) for g, b, a in per_pass[name]]
                out.absolute[name][w][k] = statistics.fmean(g[w][k] for g, _, _ in per_pass[name])
                out.ratio[name][w][k] = statistics.fmean(rs)
                out.spread[name][w][k] = max(rs) - min(rs)
    out.absolute[reference] = {w: {k: statistics.fmean(r[w][k] for r in refs[reference]) for k in METRICS}
                               for w in wl_names}
    out.ratio[reference] = {w: {k: 1.0 for k in METRICS} for w in wl_names}
    out.peak_rss = {m: int(statistics.fmean(v)) for m, v in rss.items() if v}
    return out


def host_index(reference_now: dict, reference_at_calibration: dict | None) -> dict | None:
    """workload -> metric -> the reference's value now over its value at calibration (> 1 for
    times: the host is slower now than when the profile was fitted); None without a reference."""
    if not reference_at_calibration:
        return None
    out = {}
    for w, vals in reference_now.items():
        cal = reference_at_calibration.get(w)
        if cal:
            out[w] = {k: vals[k] / cal[k] for k in METRICS if cal.get(k)}
    return out or None
