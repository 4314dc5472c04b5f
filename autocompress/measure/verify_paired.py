"""``acc verify --pairings K``: a verify's time ratios measured with paired engines.

The interleaved schedule (``measure.interleave``) that gives a verify its absolute values and its
peak memory compares fresh processes minutes apart, and on this host two runs of the same ratios
differ by p95 18-21% in TPOT (``docs/measurement.md``). Paired engines
(``measure.paired``) keep each model and the parent loaded side by side, taking turns in chunks of
seconds, in K pairs of fresh processes with the start order swapped; on the held-out fidelity set
that method's ratio error is p95 7.6-8.2% against the profile in four pairings (7.2-10.4% in two), with
the control (the parent against itself) within 0.96-1.07 (``bench/results/fidelity/paired.md``). So with
``--pairings`` the ratio columns come from here, each with its SE; the bounds are still judged on
the interleaved absolute values, and memory stays with a fresh single process.

The result is saved after every cell under a key of everything that shapes it (the journal's key
plus this code), so an interrupted verify resumes here without measuring a cell again; as with the
journal, the verify removes it once the report is written (``finish``), so a later verify measures
anew, and a file not written for ``journal.MAX_AGE_S`` is not resumed.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

from autocompress.cache import atomic_write_text, code_digest
from autocompress.measure import paired
from autocompress.measure.journal import MAX_AGE_S, journal_key
from autocompress.measure.paired import PairedResult, Sampling, measure_paired

# a cell-pairing: 2 rounds at least, then pairs of rounds until the SE of its TPOT, E2E and throughput
# ratios is below 2.5%, at most 8 rounds (the fidelity benchmark's settings)
ROUNDS, TARGET_SE, MAX_ROUNDS = 2, 0.025, 8


def _key(models: dict, target, wls: list[dict], limits, pairings: int, threads) -> str:
    rule = {"rounds": ROUNDS, "target_se": TARGET_SE, "max_rounds": MAX_ROUNDS, "pairings": pairings}
    base = journal_key(models, "parent", target, wls, limits, f"paired-{pairings}", threads, rule)
    code = code_digest("autocompress.measure.paired", "autocompress.measure.verify_paired")
    return hashlib.sha256(f"{base} {code}".encode()).hexdigest()


def measure_ratios(models: dict[str, Path], target, wls: list[dict], limits, work: Path, pairings: int,
                   threads=None, log=print, start_engine=None):
    """Every model of ``models`` but the parent against the parent (``measure.paired``, ``pairings``
    pairs of fresh processes each), resumed from ``work/paired.json`` when its key matches."""
    key, path = _key(models, target, wls, limits, pairings, threads), Path(work) / "paired.json"
    done = None
    if path.is_file():
        d = json.loads(path.read_text())
        if time.time() - path.stat().st_mtime > MAX_AGE_S:
            log("[verify] paired engines: the saved cells are over a day old; measuring anew")
        elif d.get("key") == key:
            done = PairedResult.from_dict(d["result"])
            kept = sum(len(p) for m in done.pairing.values() for p in m.values())
            log(f"[verify] paired engines: resuming, {kept} cell-pairing(s) kept")
        else:
            log("[verify] paired engines: the saved cells were of other models or settings; measuring anew")
    path.parent.mkdir(parents=True, exist_ok=True)

    def save(r):
        atomic_write_text(path, json.dumps({"key": key, "result": r.as_dict()}))
    rule = Sampling(ROUNDS, target_se=TARGET_SE, max_rounds=MAX_ROUNDS)
    return measure_paired(models, "parent", target, wls, limits, Path(work) / "paired-requests", rounds=rule,
                          threads=threads, log=log, start_engine=start_engine or paired.start, done=done, save=save,
                          pairings=pairings)


def finish(work: Path) -> None:
    """The report is written: the saved cells go, so that a later verify measures anew."""
    (Path(work) / "paired.json").unlink(missing_ok=True)


def ratio(result: PairedResult | None, name: str, workload: str, key: str) -> tuple[float, float] | None:
    """(``name`` over the parent, its relative SE) for one workload and metric, or None (nothing paired)."""
    cell = None if result is None else result.ratio.get(name, {}).get(workload)
    return None if cell is None else (cell[key], result.se[name][workload][key])


def quotient(result: PairedResult | None, a: str, b: str, workload: str, key: str) -> tuple[float, float] | None:
    """``a`` over ``b`` through their paired ratios to the parent (each pair of processes cancels the
    host's drift for itself), with the relative SEs added in quadrature."""
    ra, rb = ratio(result, a, workload, key), ratio(result, b, workload, key)
    if ra is None or rb is None:
        return None
    return ra[0] / rb[0], math.hypot(ra[1], rb[1])


def summary(result: PairedResult, pairings: int) -> dict:
    """What the report says of the paired measurement (the cells themselves are in ``result``)."""
    rounds = sum(len(x["tpot_s"]) for m in result.per_round.values() for x in m.values())
    return {"pairings": pairings, "rounds": rounds, "seconds": result.seconds,
            "engine_starts": len(result.start_seconds), "result": result.as_dict()}
