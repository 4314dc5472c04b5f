"""Paired engines (``measure.paired``): the worker's command loop and ratios that cancel drift."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass

import pytest

from autocompress.measure import paired


@dataclass
class _M:  # what an engine's run returns (a dataclass, as ``Measurement``)
    workload: str
    tpot_s: float


class _FakeEngine:
    def __init__(self):
        self.runs = []

    def load(self, model_dir, target, limits):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def run(self, wl, seed=0, settings=None, tick=None):
        self.runs.append((wl.name, seed, settings.requests, settings.target_se))
        return _M(wl.name, 0.01 * (1 + seed))


def test_the_worker_runs_one_workload_per_command_until_an_empty_line(tmp_path, monkeypatch):
    from autocompress.measure import worker
    from autocompress.measure.engines import adapters

    fake = _FakeEngine()
    monkeypatch.setattr(adapters, "open_engine", lambda name: fake)
    req = {"model_dir": "m", "target": {"hardware": "cpu", "engine": "vllm", "weight_precision": "fp32",
                                        "kv_precision": "fp32"},
           "limits": {"max_model_len": 256, "max_num_seqs": 1, "max_num_batched_tokens": 256}, "workloads": []}
    w = paired.chunk({"name": "short", "mode": "serve", "concurrency": 1, "input_tokens": 8, "output_tokens": 4,
                      "requests": 8, "target_se": 0.02})
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    lines = [json.dumps({"workload": w, "out": str(o), "seed": i}) + "\n" for i, o in enumerate(outs)]
    res = worker.run_request(req, iter(lines + ["\n", json.dumps({"workload": w, "out": "never"}) + "\n"]))
    assert res["measurements"] == [] and "peak_rss_bytes" in res
    assert [json.loads(o.read_text())["tpot_s"] for o in outs] == [0.01, 0.02]
    assert fake.runs == [("short", 0, 3, None), ("short", 1, 3, None)]  # a chunk: 3 requests, no SE target; then it stopped


class _Stand:
    """A loaded engine stand-in: model ``name`` measures ``true * drift(t)``, t counting every chunk run."""

    clock = [0]

    def __init__(self, name, true, drift):
        self.name, self.true, self.drift = name, true, drift

    def run(self, w, seed):
        t = self.clock[0]
        self.clock[0] += 1
        v = self.true * self.drift(t)
        return {"ttft_s": v / 10, "tpot_s": v, "e2e_s": 2 * v, "throughput_tok_s": 1 / v}

    def stop(self):
        return {}


def test_alternating_rounds_cancel_a_linear_drift(monkeypatch):
    monkeypatch.setattr(paired, "SWITCH_S", 0.0)
    _Stand.clock = [0]
    true = {"R": 1.0, "A": 1.25}
    drift = lambda t: 1.0 + 0.05 * t  # noqa: E731 - the host slows 5% per chunk

    def start(name, folder, target, limits, work, threads):
        return _Stand(name, true[name], drift)
    wl = [{"name": "short", "mode": "serve", "concurrency": 1}]
    res = paired.measure_paired({"R": None, "A": None}, "R", None, wl, None, None, rounds=8, start_engine=start,
                                log=lambda m: None)
    # each round's ratio is off by about the drift over one chunk (+-5%), in alternating directions
    per = res.per_round["A"]["short"]["tpot_s"]
    assert min(per) < 1.25 * 0.97 and max(per) > 1.25 * 1.03
    assert res.ratio["A"]["short"]["tpot_s"] == pytest.approx(1.25, rel=0.01)
    assert res.ratio["A"]["short"]["throughput_tok_s"] == pytest.approx(0.8, rel=0.01)
    assert res.se["A"]["short"]["tpot_s"] > 0


def test_round_ratios_mean_and_standard_error():
    m = lambda v: {k: v for k in paired.METRICS}  # noqa: E731
    ratio, se, per = paired.round_ratios([(m(2.0), m(1.0)), (m(2.2), m(1.0)), (m(1.8), m(1.0))])
    assert ratio["tpot_s"] == pytest.approx(2.0) and per["tpot_s"] == pytest.approx([2.0, 2.2, 1.8])
    assert se["tpot_s"] == pytest.approx(0.2 / 3 ** 0.5 / 2.0)


def test_a_worker_that_keeps_logging_still_times_out_and_is_killed_on_stop(tmp_path):
    """The deadline holds while lines keep coming, and ``stop`` ends a worker that ignores its input."""
    import subprocess
    import sys
    import threading
    import time

    chatty = "import sys, time\nwhile True:\n    print('log line', file=sys.stderr, flush=True)\n    time.sleep(0.02)\n"
    p = subprocess.Popen([sys.executable, "-c", chatty], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    eng = paired.Engine("chatty", p, tmp_path, result_path=tmp_path / "none.json")
    threading.Thread(target=lambda: [eng.events.put(ln) for ln in p.stderr], daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(paired.PairedError, match="ran past"):
        eng.wait("done", timeout_s=0.5)
    assert time.monotonic() - t0 < 3.0 and eng.tail and eng.tail[-1] == "log line"
    assert eng.stop(timeout_s=0.5) == {} and p.poll() is not None  # killed, and no result


def _noisy_start(true, noise):
    """Stand-ins whose model ``A`` reads ``true`` times the next factor of ``noise`` (cycled)."""
    seq = iter(noise * 100)

    def start(name, folder, target, limits, work, threads):
        return _Stand(name, true[name], (lambda t: next(seq)) if name == "A" else (lambda t: 1.0))
    return start


def test_sampling_stops_when_the_standard_error_meets_its_target(monkeypatch):
    monkeypatch.setattr(paired, "SWITCH_S", 0.0)
    wl = [{"name": "short", "mode": "serve", "concurrency": 1}]

    def run(noise, rule):
        res = paired.measure_paired({"R": None, "A": None}, "R", None, wl, None, None, log=lambda m: None,
                                    rounds=rule, start_engine=_noisy_start({"R": 1.0, "A": 2.0}, noise))
        return res.per_round["A"]["short"]["tpot_s"]
    assert len(run([1.0, 1.01], paired.Sampling(4, target_se=0.05, max_rounds=20))) == 4  # SE 0.3%: the minimum
    # rounds alternate 1.8, 2.2: relative SE 0.1 / sqrt(n - 1) for even n, 5.8% at 4, 4.5% at 6
    assert len(run([0.9, 1.1], paired.Sampling(4, target_se=0.05, max_rounds=20))) == 6
    assert len(run([0.9, 1.1], paired.Sampling(4, target_se=0.01, max_rounds=9))) == 10  # made even
    caps = []

    def cap():
        caps.append(1)
        return 0.0
    # out of time as it starts: the minimum only, and the cap is asked once for the cell
    assert len(run([0.9, 1.1], paired.Sampling(4, target_se=0.001, cap_s=cap))) == 4 and caps == [1]
    assert len(run([0.9, 1.1], paired.Sampling(3))) == 3  # no target: exactly the count


def test_sampling_rejects_settings_that_cannot_stop_or_cannot_pair():
    with pytest.raises(ValueError, match="never stop"):
        paired.Sampling(4, target_se=0.02)
    with pytest.raises(ValueError, match="at least 2"):
        paired.Sampling(1)


def test_an_interrupted_run_resumes_without_measuring_its_cells_again(monkeypatch):
    monkeypatch.setattr(paired, "SWITCH_S", 0.0)
    wl = [{"name": "short", "mode": "serve", "concurrency": 1}, {"name": "long", "mode": "serve", "concurrency": 1}]
    saved, started = [], []

    def start(name, folder, target, limits, work, threads):
        started.append(name)
        if name == "B" and started.count("B") == 1:
            raise paired.PairedError("B failed to load")
        return _Stand(name, {"R": 1.0, "A": 1.5, "B": 0.5}[name], lambda t: 1.0)
    models = {"R": None, "A": None, "B": None}
    with pytest.raises(paired.PairedError):
        paired.measure_paired(models, "R", None, wl, None, None, rounds=2, start_engine=start, log=lambda m: None,
                              save=lambda r: saved.append(json.dumps(r.as_dict())))
    first = paired.PairedResult.from_dict(json.loads(saved[-1]))  # saved again as the run failed
    assert set(first.ratio) == {"A"} and set(first.ratio["A"]) == {"short", "long"}
    assert first.seconds > json.loads(saved[-2])["seconds"]  # the failed start's time counts too
    before = first.seconds
    res = paired.measure_paired(models, "R", None, wl, None, None, rounds=2, start_engine=start,
                                log=lambda m: None, done=first)
    assert started == ["R", "A", "B", "R", "B"]  # A was not loaded again
    assert res is first and res.ratio["B"]["long"]["tpot_s"] == pytest.approx(0.5)
    assert res.ratio["A"]["short"]["tpot_s"] == 1.5 and res.seconds > before
    with pytest.raises(ValueError, match="against R"):
        paired.measure_paired(models, "A", None, wl, None, None, rounds=2, start_engine=start, done=first)


def test_pairings_start_fresh_processes_in_swapped_order_and_count_their_spread_in_the_se(monkeypatch):
    """Each process carries a level of its own (an offset on batched prefill, 5-9% on these hosts):
    with two pairings the cell is the mean of both, and its SE is the spread between them."""
    monkeypatch.setattr(paired, "SWITCH_S", 0.0)
    levels = iter([1.0, 1.1, 1.0, 0.9, 1.0, 1.0, 1.0, 1.0])  # one per process, in start order
    started = []

    def start(name, folder, target, limits, work, threads):
        started.append(name)
        lvl = next(levels)
        return _Stand(name, {"R": 1.0, "A": 2.0}[name] * lvl, lambda t: 1.0)
    wl = [{"name": "short", "mode": "serve", "concurrency": 1}]
    res = paired.measure_paired({"R": None, "A": None}, "R", None, wl, None, None, rounds=2, start_engine=start,
                                log=lambda m: None, pairings=2)
    assert started == ["R", "A", "A", "R"]  # the reference first, then the model first
    assert len(res.start_seconds) == 4 and all(t >= 0 for t in res.start_seconds)
    parts = res.pairing["A"]["short"]
    assert [parts[p]["model_first"] for p in ("0", "1")] == [False, True]
    # pairing 0: A at level 1.1 over R at 1.0 -> 2.2; pairing 1: A at 1.0 over R at 0.9 -> 2.222
    assert parts["0"]["ratio"]["tpot_s"] == pytest.approx(2.2) and parts["1"]["ratio"]["tpot_s"] == pytest.approx(2 / 0.9)
    mean = (2.2 + 2 / 0.9) / 2
    assert res.ratio["A"]["short"]["tpot_s"] == pytest.approx(mean)
    # the rounds inside each pairing agree exactly (SE 0), so the between-pairing spread is the SE
    assert res.se["A"]["short"]["tpot_s"] == pytest.approx(abs(2.2 - 2 / 0.9) / 2 ** 0.5 / 2 ** 0.5 / mean)
    assert len(res.per_round["A"]["short"]["tpot_s"]) == 4


def test_combine_keeps_the_larger_of_the_rounds_and_the_between_pairing_se():
    m = lambda r, se: {"ratio": {k: r for k in paired.METRICS}, "se": {k: se for k in paired.METRICS},  # noqa: E731
                       "per_round": {k: [r] for k in paired.METRICS}, "absolute": {k: r for k in paired.METRICS},
                       "reference_absolute": {k: 1.0 for k in paired.METRICS}}
    c = paired.combine([m(1.0, 0.10), m(1.02, 0.10)])  # noisy rounds, pairings that agree
    assert c["ratio"]["e2e_s"] == pytest.approx(1.01)
    within = (0.1 ** 2 + 0.102 ** 2) ** 0.5 / 2 / 1.01
    assert c["se"]["e2e_s"] == pytest.approx(within) and c["se_rounds"]["e2e_s"] == pytest.approx(within)
    c = paired.combine([m(0.9, 0.01), m(1.1, 0.01)])  # quiet rounds, pairings 20% apart
    # stdev(0.9, 1.1) = 0.1414, over sqrt(2) pairings = 0.1, relative to the mean 1.0
    assert c["se"]["e2e_s"] == pytest.approx(0.1) and c["se_between"]["e2e_s"] == pytest.approx(0.1)


class _Tracked(_Stand):
    """A stand-in that records its stop, and can fail on a given workload."""

    def __init__(self, name, true, stops, fail_on=None):
        super().__init__(name, true, lambda t: 1.0)
        self.stops, self.fail_on = stops, fail_on

    def run(self, w, seed):
        if w["name"] == self.fail_on:
            raise paired.PairedError(f"{self.name} died on {w['name']}")
        return super().run(w, seed)

    def stop(self):
        self.stops.append(self.name)
        return {}


def test_a_run_with_pairings_resumes_at_the_pairing_it_lost_and_stops_every_engine(monkeypatch):
    monkeypatch.setattr(paired, "SWITCH_S", 0.0)
    wl = [{"name": "short", "mode": "serve", "concurrency": 1}, {"name": "long", "mode": "serve", "concurrency": 1}]
    saved, started, stops = [], [], []
    true = {"R": 1.0, "A": 1.5}

    def start(name, folder, target, limits, work, threads):
        started.append(name)
        if len(started) == 4:  # pairing 1's second start (the reference) fails once
            raise paired.PairedError("R failed to load")
        return _Tracked(name, true[name], stops)
    models = {"R": None, "A": None}
    kw = dict(rounds=2, log=lambda m: None, pairings=2, save=lambda r: saved.append(json.dumps(r.as_dict())))
    with pytest.raises(paired.PairedError):
        paired.measure_paired(models, "R", None, wl, None, None, start_engine=start, **kw)
    assert stops == ["A", "R", "A"]  # pairing 0's two engines, then pairing 1's model when its reference failed
    first = paired.PairedResult.from_dict(json.loads(saved[-1]))
    assert first.ratio == {} and set(first.pairing["A"]["short"]) == {"0"}  # one pairing kept, no cell yet
    res = paired.measure_paired(models, "R", None, wl, None, None, start_engine=start, done=first, **kw)
    assert started == ["R", "A", "A", "R", "A", "R"]  # only pairing 1 again, the model first
    assert res.ratio["A"]["short"]["tpot_s"] == pytest.approx(1.5) and res.se["A"]["short"]["tpot_s"] == 0.0

    # a pairing cut off partway (its engine dies on the second workload) resumes with that workload only
    saved.clear(), started.clear(), stops.clear()

    def dying(name, folder, target, limits, work, threads):
        started.append(name)
        return _Tracked(name, true[name], stops, fail_on="long" if name == "A" and len(started) == 2 else None)
    with pytest.raises(paired.PairedError, match="died on long"):
        paired.measure_paired(models, "R", None, wl, None, None, start_engine=dying, **kw)
    assert stops == ["A", "R"]
    cut = paired.PairedResult.from_dict(json.loads(saved[-1]))
    assert {w: set(v) for w, v in cut.pairing["A"].items()} == {"short": {"0"}}
    res = paired.measure_paired(models, "R", None, wl, None, None, start_engine=dying, done=cut, **kw)
    assert started == ["R", "A", "R", "A", "A", "R"]  # pairing 0 again (reference first) for long, then pairing 1
    assert {w: set(v) for w, v in res.pairing["A"].items()} == {"short": {"0", "1"}, "long": {"0", "1"}}
    assert res.ratio["A"]["long"]["tpot_s"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="at least 1"):
        paired.measure_paired(models, "R", None, wl, None, None, pairings=0)


def test_a_finished_run_extended_to_more_pairings_measures_only_the_new_ones_and_combines_all(monkeypatch):
    monkeypatch.setattr(paired, "SWITCH_S", 0.0)
    levels = iter([1.0, 1.0, 1.0, 1.0, 1.0, 1.2, 1.2, 1.0])  # one per process, in start order
    started = []

    def start(name, folder, target, limits, work, threads):
        started.append(name)
        return _Stand(name, {"R": 1.0, "A": 2.0}[name] * next(levels), lambda t: 1.0)
    wl = [{"name": "short", "mode": "serve", "concurrency": 1}]
    kw = dict(rounds=2, start_engine=start, log=lambda m: None)
    two = paired.measure_paired({"R": None, "A": None}, "R", None, wl, None, None, pairings=2, **kw)
    assert two.ratio["A"]["short"]["tpot_s"] == pytest.approx(2.0)
    done = paired.PairedResult.from_dict(json.loads(json.dumps(two.as_dict())))  # as a stored run comes back
    four = paired.measure_paired({"R": None, "A": None}, "R", None, wl, None, None, pairings=4, done=done, **kw)
    assert started == ["R", "A", "A", "R", "R", "A", "A", "R"]  # pairings 2 and 3 only, the start order alternating
    parts = four.pairing["A"]["short"]
    assert sorted(parts) == ["0", "1", "2", "3"] and [parts[p]["model_first"] for p in "0123"] == [False, True] * 2
    assert all(parts[p]["finished"].endswith("UTC") for p in "0123")
    # pairing 2: A at 1.2 over R at 1.0 -> 2.4; pairing 3: A at 1.2 over R at 1.0 -> 2.4; the cell is the mean of four
    assert four.ratio["A"]["short"]["tpot_s"] == pytest.approx((2.0 + 2.0 + 2.4 + 2.4) / 4)
    mean = 2.2
    assert four.se["A"]["short"]["tpot_s"] == pytest.approx(statistics.stdev([2.0, 2.0, 2.4, 2.4]) / 2 / mean)
    assert len(four.per_round["A"]["short"]["tpot_s"]) == 8
    # nothing left: the same call again starts no engine
    paired.measure_paired({"R": None, "A": None}, "R", None, wl, None, None, pairings=4, done=four, **kw)
    assert len(started) == 8
