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

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from autocompress.measure import runner
from autocompress.measure.journal import RunJournal, journal_key
from autocompress.measure.worker import peak_memory
from autocompress.progress import Progress

METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")


@dataclass
class Interleaved:
    """Per model and workload: absolute means over passes, ratios to the reference, their spread."""

    reference: str
    absolute: dict = field(default_factory=dict)  # model -> workload -> metric -> mean over passes
    ratio: dict = field(default_factory=dict)  # model -> workload -> metric -> mean ratio to the reference
    spread: dict = field(default_factory=dict)  # model -> workload -> metric -> (max - min) of the per-pass ratios
    peak_memory: dict = field(default_factory=dict)  # model -> mean memory figure (worker.peak_memory; CPU: peak RSS)
    runs: list = field(default_factory=list)  # (model, pass, role, session, started, workload medians) in run order
    seconds: float = 0.0  # engine time, resumed runs included
    triples: dict = field(default_factory=dict)  # model -> per pass (its run, the reference before, after): runs indices
    run_results: list = field(default_factory=list, repr=False)  # the worker result of each entry of ``runs``
    journal: object = field(default=None, repr=False)  # the ``RunJournal`` the runs were recorded in

    def results_of(self, model: str) -> list[dict]:
        """The worker results of ``model``'s runs (every sample), in run order."""
        return [res for run, res in zip(self.runs, self.run_results) if run["model"] == model]

    def close(self) -> None:
        """The caller has saved these results: the run journal goes, so a later call measures anew
        (until then a rerun after a crash replays every run)."""
        if self.journal is not None:
            self.journal.finish()

    def as_dict(self) -> dict:  # "peak_rss": the key from before GPU figures, so stored runs read alike
        return {"reference": self.reference, "absolute": self.absolute, "ratio": self.ratio, "spread": self.spread,
                "peak_rss": self.peak_memory, "runs": self.runs, "seconds": round(self.seconds, 1)}

    @classmethod
    def from_dict(cls, d: dict) -> "Interleaved":
        """A stored run (``as_dict``'s JSON) back: ratios, absolutes, spreads and the run order; the
        worker results and the journal stay behind (the JSON has the runs' medians only)."""
        return cls(d["reference"], d["absolute"], d["ratio"], d["spread"], d["peak_rss"], runs=d["runs"],
                   seconds=d.get("seconds", 0.0))


def cell_stats(per_pass: list[tuple[dict, dict, dict]], wl_names) -> tuple[dict, dict, dict]:
    """(absolute, ratio, spread) per workload and metric of one model from its (run, reference
    before, reference after) medians, one triple per pass: the mean of its runs, the mean of its
    ratios to the mean of each triple's two references, and their max - min."""
    absolute, ratio, spread = {}, {}, {}
    for w in wl_names:
        absolute[w], ratio[w], spread[w] = {}, {}, {}
        for k in METRICS:
            rs = [g[w][k] / ((b[w][k] + a[w][k]) / 2) for g, b, a in per_pass]
            absolute[w][k] = statistics.fmean(g[w][k] for g, _, _ in per_pass)
            ratio[w][k] = statistics.fmean(rs)
            spread[w][k] = max(rs) - min(rs)
    return absolute, ratio, spread


def medians(result: dict) -> dict:
    """workload -> metric -> value of one worker result."""
    return {m["workload"]: {k: m[k] for k in METRICS} for m in result["measurements"]}


def measure_interleaved(models: dict[str, Path], reference: str, target, workloads: list[dict], limits, work: Path,
                        passes: int = 2, threads: int | None = None, log=print, run=None, max_other_cpu: float = 0.25,
                        retries: int = 2, progress=None, journal: Path | None = None) -> Interleaved:
    """Measure every model of ``models`` (name -> exported folder) interleaved with
    ``models[reference]``; ``limits``: one ``EngineLimits`` for all (identical settings), or a
    dict name -> limits. ``run(folder, limits) -> worker result`` defaults to a fresh worker
    process. A run during which other processes used more than ``max_other_cpu`` cores is redone
    (up to ``retries`` times) and, if still busy, kept and marked ``busy`` in ``runs``.
    ``progress``: one task over the runs; each run's engine start and workloads are tasks of their
    own (``measure.events``). ``journal``: a file that records every run, so that an interrupted
    schedule resumes (``measure.journal``); a resumed run's entry in ``runs`` says ``resumed``. The
    caller calls ``close()`` on the result once it has saved it."""
    progress = progress or Progress()
    if run is None:
        names = {str(f): n for n, f in models.items()}  # a run's tasks are named by its model

        def run(folder, lim):
            return runner.run_worker(folder, target, workloads, lim, work, threads, progress=progress,
                              label=names[str(folder)])
    lim_of = (lambda name: limits[name]) if isinstance(limits, dict) else (lambda name: limits)
    others = [m for m in models if m != reference]
    out = Interleaved(reference)
    t0 = time.perf_counter()
    total = passes * (2 * len(others) + 1)
    done = 0

    jr = None
    if journal is not None:
        jr = RunJournal(journal, journal_key(models, reference, target, workloads, limits, passes, threads,
                                             {"max_other_cpu": max_other_cpu, "retries": retries}), log=log)
    session = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.urandom(3).hex()}"  # one call of this function
    replayed_s = 0.0

    def measure(name: str) -> tuple[dict, dict]:
        started, t = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter()
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
        return res, {"session": session, "started": started, "seconds": round(time.perf_counter() - t, 1),
                     "other_cpu": busy, "busy": busy > max_other_cpu, "attempts": attempt + 1}

    def one(name: str, p: int, role: str = "ref") -> tuple[bool, int]:
        """One run of ``name``: replayed from the journal when it holds it next, else measured;
        (measured in this call, its index in ``runs``)."""
        nonlocal done, replayed_s
        fresh = not (jr and jr.next_is((name, role)))
        if fresh:
            res, rec = measure(name)
            if jr:
                jr.append(name, role, res, rec)
        else:
            e = jr.take()
            res, rec = e["result"], dict(e["run"], resumed=True)
            replayed_s += rec.get("seconds", 0.0)
        done += 1
        bar.advance(cached=not fresh)  # a replayed run is not work: the rate and ETA come from new runs
        med = medians(res)
        out.runs.append({"model": name, "pass": p, "role": role, "medians": med,
                         "peak_rss_bytes": res["peak_rss_bytes"], "peak_memory_bytes": peak_memory(res), **rec})
        out.run_results.append(res)
        log(f"[measure] {done}/{total} {name} (pass {p + 1}/{passes}{', ' + role if role == 'seam' else ''}"
            f"{', from the journal' if not fresh else ''}): "
            + ", ".join(f"{w} TPOT {v['tpot_s'] * 1e3:.1f} ms" for w, v in med.items()))
        return fresh, len(out.runs) - 1

    def seam(p: int):
        """A reference run beside the first model after an interruption (its left neighbour)."""
        nonlocal total
        total += 1
        bar.set_total(total)
        return one(reference, p, "seam")

    with progress.task("measure: engine runs", total=total, unit="run") as bar:
        for p in range(passes):
            before_fresh, bi = one(reference, p)
            for name in others:
                if jr and jr.next_is((reference, "seam"), (name, "model"), (reference, "ref")):
                    before_fresh, bi = seam(p)  # the seam an earlier resume measured, replayed
                # a model is replayed only with the reference after it, so no ratio spans the interruption
                replay = bool(jr) and jr.next_is((name, "model"), (reference, "ref"))
                if not replay and not before_fresh:  # its left neighbour is from before the interruption
                    jr.drop_rest()
                    before_fresh, bi = seam(p)
                _, gi = one(name, p, "model")
                before_fresh, ai = one(reference, p)
                out.triples.setdefault(name, []).append((gi, bi, ai))
                bi = ai
    out.journal = jr
    out.seconds = time.perf_counter() - t0 + replayed_s
    refs = [r["medians"] for r in out.runs if r["model"] == reference]  # every reference run, seams included
    wl_names = list(refs[0])
    for name in others:  # its (run, reference before, after) medians per pass, from the indices
        per_pass = [tuple(out.runs[i]["medians"] for i in t) for t in out.triples[name]]
        out.absolute[name], out.ratio[name], out.spread[name] = cell_stats(per_pass, wl_names)
    out.absolute[reference] = {w: {k: statistics.fmean(r[w][k] for r in refs) for k in METRICS}
                               for w in wl_names}
    out.ratio[reference] = {w: {k: 1.0 for k in METRICS} for w in wl_names}
    out.peak_memory = {m: int(statistics.fmean(peak_memory(r) for r in out.runs if r["model"] == m))
                    for m in models if any(r["model"] == m for r in out.runs)}
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
