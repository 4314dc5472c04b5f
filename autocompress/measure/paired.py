"""Paired engines: two models loaded side by side, taking turns every few seconds.

``measure.interleave`` alternates engine *processes* (reference, model, reference, ...). Each run
is a fresh process of one to two minutes, so a ratio compares times minutes apart, and on these
shared hosts the speed moves by 10-20% within minutes: two runs of the same held-out ratios
differ by p95 18-21% in TPOT (``docs/measurement.md``).

Here the two engines stay loaded, one worker process each (``measure.worker --commands``), and
only one runs at a time. Per workload the coordinator runs short chunks in the order
A R, R A, A R, ... (each round's two chunks are seconds apart, and the alternating order cancels
a linear drift over two rounds); a round's ratio is its A chunk over its R chunk, and the
workload's ratio is the mean of the rounds' ratios with its standard error. The cost: both
models resident at once (two engine processes' memory), so it is for time, not for peak memory,
which a fresh single process (``measure.interleave``) still measures.

A pair of processes has a level of its own on batched work (the parent against itself read E2E 0.92,
1.01, 0.97 in three fresh pairs): rounds inside one pairing cannot see it. ``pairings=K`` gives each
model K pairs of fresh processes with the start order swapped, and counts their spread in the SE.

The statistics are plain arithmetic on the chunks' medians: ``round_ratios`` (a cell's ratio and
SE), ``Sampling`` (when a cell has enough rounds) and ``combine`` (a cell from its pairings).
"""

from __future__ import annotations

import json
import math
import queue
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from autocompress.measure import runner
from autocompress.measure.events import PROGRESS

METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s")
SWITCH_S = 0.5  # idle time between chunks: the last engine's OpenMP threads stop spinning


# ---- statistics ---------------------------------------------------------------------------------

def round_ratios(pairs: list[tuple[dict, dict]]) -> tuple[dict, dict, dict]:
    """(ratio, relative SE, per-round ratios) per metric from (model chunk, reference chunk) medians."""
    ratio, se, per = {}, {}, {}
    for k in METRICS:
        rs = [a[k] / r[k] for a, r in pairs]
        per[k] = rs
        ratio[k] = statistics.fmean(rs)
        se[k] = statistics.stdev(rs) / math.sqrt(len(rs)) / ratio[k] if len(rs) > 1 else math.nan
    return ratio, se, per


@dataclass(frozen=True)
class Sampling:
    """How many rounds a cell gets: at least ``rounds``, then two more at a time (so the order
    stays balanced) while the largest relative SE over ``judge`` exceeds ``target_se``, up to
    ``max_rounds`` (made even) or ``cap_s`` seconds of the cell. ``cap_s`` may be a function of
    nothing, called once as the cell starts (a run's budget shared among the cells left). No
    ``target_se``: exactly ``rounds``."""

    rounds: int = 8
    target_se: float | None = None
    max_rounds: int | None = None
    cap_s: object = None
    judge: tuple[str, ...] = ("tpot_s", "e2e_s", "throughput_tok_s")

    def __post_init__(self):
        if self.rounds < 2:
            raise ValueError(f"at least 2 rounds (one of each order), not {self.rounds}")
        if self.target_se is not None and self.max_rounds is None and self.cap_s is None:
            raise ValueError("an SE target needs max_rounds or cap_s: a noisy cell would never stop")
        if self.max_rounds is not None:
            object.__setattr__(self, "max_rounds", max(self.rounds, self.max_rounds + self.max_rounds % 2))

    def cap(self) -> float | None:
        return self.cap_s() if callable(self.cap_s) else self.cap_s

    def more(self, pairs: list, started: float, cap: float | None = None) -> bool:
        n = len(pairs)
        if n < self.rounds:
            return True
        if self.target_se is None:
            return False
        if n % 2:
            return True  # finish the balanced pair of rounds
        if (self.max_rounds is not None and n >= self.max_rounds) or \
                (cap is not None and time.perf_counter() - started >= cap):
            return False
        _, se, _ = round_ratios(pairs)
        return max(se[k] for k in self.judge) > self.target_se


def combine(parts: list[dict]) -> dict:
    """One cell from its process pairings (``_summary`` dicts): the mean of the pairings' ratios, and
    an SE that counts the spread *between* pairings (a pair of processes carries a level of its own,
    5-9% on batched work, that its rounds cannot show: the parent against itself read E2E 0.92,
    1.01 and 0.97 in three fresh pairs). With K pairings the between-pairing SE is stdev/sqrt(K), from
    K - 1 degrees of freedom, so it is itself noisy; the SE kept is the larger of it and the rounds'
    SE pooled over the pairings."""
    n = len(parts)
    if n == 1:
        return parts[0] | {"se_rounds": parts[0]["se"], "se_between": {k: math.nan for k in METRICS}}
    ratio = {k: statistics.fmean(p["ratio"][k] for p in parts) for k in METRICS}
    within = {k: math.sqrt(sum((p["se"][k] * p["ratio"][k]) ** 2 for p in parts)) / n / ratio[k] for k in METRICS}
    between = {k: statistics.stdev(p["ratio"][k] for p in parts) / math.sqrt(n) / ratio[k] for k in METRICS}
    return {"ratio": ratio, "se": {k: max(within[k], between[k]) for k in METRICS}, "se_rounds": within,
            "se_between": between, "per_round": {k: [x for p in parts for x in p["per_round"][k]] for k in METRICS},
            "absolute": {k: statistics.fmean(p["absolute"][k] for p in parts) for k in METRICS},
            "reference_absolute": {k: statistics.fmean(p["reference_absolute"][k] for p in parts) for k in METRICS}}


# ---- engines --------------------------------------------------------------------------------------



def chunk(w: dict) -> dict:
    """``w`` cut to one chunk: a warm-up and a fixed few samples (seconds, not minutes); the rounds
    give the standard error. A serve chunk keeps at least two waves of its concurrency."""
    return w | {"warmup": 1, "iterations": 2, "requests": max(3, 2 * w["concurrency"]), "target_se": None}


class PairedError(RuntimeError):
    pass


@dataclass
class Engine:
    """One loaded worker taking commands (``measure.worker --commands``)."""

    name: str
    proc: subprocess.Popen
    work: Path
    events: queue.Queue = field(default_factory=queue.Queue)
    tail: list = field(default_factory=list)
    result_path: Path | None = None
    count: int = 0

    def wait(self, event: str, timeout_s: float) -> dict:
        end = time.monotonic() + timeout_s
        while True:
            try:
                line = self.events.get(timeout=max(0.1, min(5.0, end - time.monotonic())))
            except queue.Empty:
                line = None
            # checked on every line too: a worker that keeps logging must still meet the deadline
            if time.monotonic() > end or (line is None and self.proc.poll() is not None):
                raise PairedError(f"{self.name}: the engine worker stopped, or ran past {timeout_s:.0f} s, waiting "
                                  f"for '{event}':\n" + "\n".join(self.tail[-15:]))
            if line is None:
                continue
            if line.startswith(PROGRESS):
                ev = json.loads(line[len(PROGRESS):])
                if ev.get("event") == event:
                    return ev
            else:
                self.tail = (self.tail + [line.rstrip("\n")])[-50:]

    def run(self, workload: dict, seed: int, timeout_s: float = 600.0) -> dict:
        """One chunk of ``workload`` (its ``Measurement`` as a dict)."""
        self.count += 1
        out = self.work / f"{self.name}-{self.count}.json"
        self.proc.stdin.write(json.dumps({"workload": workload, "out": str(out), "seed": seed}) + "\n")
        self.proc.stdin.flush()
        self.wait("done", timeout_s)
        d = json.loads(out.read_text())
        out.unlink()
        if ((d.get("memory") or {}).get("kv_preemptions") or 0) > 0:  # vLLM recomputed requests: not this workload's time
            raise PairedError(f"{self.name}: vLLM preempted {d['memory']['kv_preemptions']} requests of "
                              f"{workload['name']} for want of KV blocks (two engines share the device here)")
        return d

    def stop(self, timeout_s: float = 120.0) -> dict:
        """End the worker (an empty line, then end of input; killed if it does not exit in time, e.g.
        mid-chunk after an error); its result (peak RSS of the process), or {} if it left none.
        Never raises, so it cannot replace the error that made the caller stop it."""
        try:
            self.proc.stdin.write("\n")
            self.proc.stdin.close()
        except OSError:  # the worker has died: its pipe is gone
            pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            return json.loads(self.result_path.read_text()) if self.result_path.is_file() else {}
        except (OSError, ValueError):
            return {}


def start(name: str, folder: Path, target, limits, work: Path, threads: int | None = None,
          timeout_s: float = 600.0) -> Engine:
    """A worker with ``folder``'s model loaded, waiting for commands. Two are loaded at once: on a
    GPU each may take about half of vLLM's default share (``engines.gpu_memory``), or the second would
    not start; the pool's size does not enter a time unless vLLM preempts a request, which ``run``
    refuses."""
    req_path, res_path = runner.write_request(folder, target, replace(limits, gpu_share=2), [], work, name)
    env = runner.worker_env(threads)
    p = subprocess.Popen([sys.executable, "-m", "autocompress.measure.worker", str(req_path), str(res_path),
                          "--commands"], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, errors="replace")  # one odd byte must not stop the reader
    eng = Engine(name, p, work, result_path=res_path)
    # stderr is drained on a thread: a full pipe would block the worker
    threading.Thread(target=lambda: [eng.events.put(ln) for ln in p.stderr], daemon=True).start()
    try:
        eng.wait("loaded", timeout_s)
    except BaseException:
        eng.stop(timeout_s=5.0)
        raise
    return eng


@dataclass
class PairedResult:
    reference: str
    rounds: int
    ratio: dict = field(default_factory=dict)  # model -> workload -> metric -> mean of the rounds' ratios
    se: dict = field(default_factory=dict)  # model -> workload -> metric -> SE of that mean (relative)
    per_round: dict = field(default_factory=dict)  # model -> workload -> metric -> the rounds' ratios
    absolute: dict = field(default_factory=dict)  # model -> workload -> metric -> mean of its chunks' medians
    # model -> workload -> metric -> mean of the reference's chunks in that model's rounds
    reference_absolute: dict = field(default_factory=dict)
    seconds: float = 0.0
    # pairings > 1: model -> workload -> pairing index (str) -> that pairing's own summary and start order
    pairing: dict = field(default_factory=dict)
    start_seconds: list = field(default_factory=list)  # each engine start's wall time (what pairings cost)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in FIELDS}

    @classmethod
    def from_dict(cls, d: dict) -> PairedResult:
        return cls(**{k: d[k] for k in FIELDS if k in d})


FIELDS = ("reference", "rounds", "ratio", "se", "per_round", "absolute", "reference_absolute", "seconds", "pairing",
          "start_seconds")


def _cell(eng: Engine, ref: Engine, w: dict, rule: Sampling) -> list[tuple[dict, dict]]:
    """One cell's rounds: (model chunk, reference chunk) per round, in the order A R, R A, ..."""
    pairs, started, cap = [], time.perf_counter(), rule.cap()
    while rule.more(pairs, started, cap):
        r = len(pairs)
        order = (eng, ref) if r % 2 == 0 else (ref, eng)
        got = {}
        for e in order:
            time.sleep(SWITCH_S)
            got[e.name] = e.run(w, seed=r)
        pairs.append((got[eng.name], got[ref.name]))
    return pairs


def _summary(pairs: list[tuple[dict, dict]]) -> dict:
    ratio, se, per = round_ratios(pairs)
    return {"ratio": ratio, "se": se, "per_round": per,
            "absolute": {k: statistics.fmean(p[0][k] for p in pairs) for k in METRICS},
            "reference_absolute": {k: statistics.fmean(p[1][k] for p in pairs) for k in METRICS}}


def _store(out: PairedResult, name: str, w: str, cell: dict) -> None:
    for f in ("ratio", "se", "per_round", "absolute", "reference_absolute"):
        getattr(out, f).setdefault(name, {})[w] = cell[f]


def measure_paired(models: dict[str, Path], reference: str, target, workloads: list[dict], limits, work: Path,
                   rounds: int | Sampling = 8, threads: int | None = None, log=print, start_engine=start,
                   done: PairedResult | None = None, save=None, pairings: int = 1) -> PairedResult:
    """Every model of ``models`` (name -> exported folder) against ``reference``, both loaded, in
    alternating rounds of short chunks per workload (``rounds``: a count, or a ``Sampling`` rule
    that keeps going until the ratio's SE meets a target). ``limits``: one ``EngineLimits`` or a
    dict by name. ``done``: an earlier, interrupted run's result, extended in place; its cells are
    kept, not measured again. ``save(result)`` is called after every cell and once more at the end,
    also when the run fails (a resumable run writes it). ``start_engine``: tests pass a stand-in.

    ``pairings`` = 1: one reference engine serves every model. ``pairings`` = K > 1: each model gets
    K pairs of fresh processes, the reference started first in even pairings and the model first in
    odd ones (so a start-order effect cancels over two), each pairing measuring every workload with
    ``rounds``; a cell is the ``combine`` of its K pairings, kept in ``pairing`` as well. A pairing
    cut off partway is finished, on resuming, by a new pair of processes in the same start order:
    its cells then come from two process pairs (each cell from one). A finished run of K pairings
    passed as ``done`` with ``pairings`` > K gets pairings K.. only; its cells stay the combine of the
    pairings they have until all are in."""
    if pairings < 1:
        raise ValueError(f"pairings must be at least 1, not {pairings}")
    rule = rounds if isinstance(rounds, Sampling) else Sampling(rounds)
    lim = (lambda n: limits[n]) if isinstance(limits, dict) else (lambda n: limits)
    chunks = [chunk(w) for w in workloads]
    if done is not None and done.reference != reference:
        raise ValueError(f"resuming a run against {done.reference}, not {reference}")
    out = done or PairedResult(reference, rule.rounds)
    t0, before = time.perf_counter(), out.seconds  # ``seconds``: wall time of every call, start-ups included

    def left(name: str, p: int) -> list[dict]:  # the workloads pairing p of ``name`` has still to measure
        return [w for w in chunks if (w["name"] not in out.ratio.get(name, {}) if pairings == 1
                                      else str(p) not in out.pairing.get(name, {}).get(w["name"], {}))]
    def launch(who: str) -> Engine:
        t = time.perf_counter()
        e = start_engine(who, models[who], target, lim(who), work, threads)
        out.start_seconds.append(time.perf_counter() - t)
        return e
    jobs = [(m, p) for m in models if m != reference for p in range(pairings) if left(m, p)]
    if not jobs:
        return out
    units = sum(len(left(m, p)) for m, p in jobs)
    shared = launch(reference) if pairings == 1 else None
    n_done = 0
    try:
        for name, p in jobs:
            ws = left(name, p)
            if shared is not None:
                ref, eng = shared, launch(name)
            else:
                ref = eng = None
                try:  # the start order alternates over the pairings; both stop if either fails to start
                    for who in ((reference, name) if p % 2 == 0 else (name, reference)):
                        e = launch(who)
                        ref, eng = (e, eng) if who == reference else (ref, e)
                except BaseException:
                    for e in (ref, eng):
                        if e is not None:
                            e.stop()
                    raise
            try:
                for w in ws:
                    part = _summary(_cell(eng, ref, w, rule))
                    if pairings == 1:
                        _store(out, name, w["name"], part)
                    else:
                        got = out.pairing.setdefault(name, {}).setdefault(w["name"], {})
                        got[str(p)] = part | {"model_first": p % 2 == 1,
                                              "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
                        if all(str(i) in got for i in range(pairings)):
                            _store(out, name, w["name"], combine([got[str(i)] for i in range(pairings)]))
                    out.seconds = before + time.perf_counter() - t0
                    n_done += 1
                    if save:
                        save(out)
                    el = time.perf_counter() - t0
                    log(f"[paired] {name} {w['name']}" + (f" (pairing {p + 1}/{pairings})" if pairings > 1 else "")
                        + f": TPOT ratio {part['ratio']['tpot_s']:.3f} ± {part['se']['tpot_s']:.1%} "
                        f"({len(part['per_round']['tpot_s'])} rounds); {n_done}/{units} done, {el / 60:.1f} min, "
                        f"ETA {el / n_done * (units - n_done) / 60:.0f} min")
            finally:
                try:
                    eng.stop()
                finally:  # an interrupt while the model's engine stops must not leave the reference running
                    if shared is None:
                        ref.stop()
    finally:
        if shared is not None:
            shared.stop()
        out.seconds = before + time.perf_counter() - t0  # an interrupted run's time counts too
        if save:
            save(out)
    return out
