"""The fidelity benchmark's paired mode (bench/lib/fidelity_paired.py): each cell's predicted ratio
against the paired measurement, its table, and which command measured which pairings."""

from types import SimpleNamespace

import pytest

from autocompress.catalog.hardware import resolve_device
from autocompress.cost.profile import PROFILE_DIR, load_profile
from autocompress.calibrate.calibration import workload_dicts, workloads
from autocompress.measure.engines.base import derive_limits
from autocompress.measure.paired import PairedResult
from autocompress.calibrate.synth import variants
from autocompress.lang.model import Target
from autocompress.ir import MLP, Architecture, Attention, Block
from bench.lib import fidelity_paired
from bench.lib.engine import point


def test_cells_score_the_predicted_ratio_against_the_paired_one_and_the_table_shows_them():
    fp = fidelity_paired
    tgt = Target("cpu", "vllm", "fp32", "fp32")
    prof = load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm")
    parent = Architecture("llama", 4096, 512, 8, 64, True, (Block(Attention(8, 2, 64), MLP(1536)),) * 6, 2048, "parent")
    a = variants(parent, 2, seed=1)[1]
    wls = [w for w in workload_dicts() if w["name"] in ("short", "concurrent")]
    limits = {x.name: derive_limits(x, tgt, workloads(), threads=2) for x in (parent, a)}
    from autocompress.calibrate.fit import predicted

    pred = {w["name"]: {k: predicted(a, point(w), limits[a.name], prof, tgt)[k]
                        / predicted(parent, point(w), limits["parent"], prof, tgt)[k]
                        for k in fp.KEYS} for w in wls}
    # measured 10% dearer than predicted in time (throughput 10% lower), SE 2%, 6 rounds each
    meas = {w: {fp.KEYS[k]: v * (1 / 1.1 if k == "throughput" else 1.1) for k, v in p.items()} for w, p in pred.items()}
    res = PairedResult("parent", 4, ratio={a.name: meas},
                       se={a.name: {w: {m: 0.02 for m in fp.KEYS.values()} for w in meas}},
                       per_round={a.name: {w: {m: [1.0] * 6 for m in fp.KEYS.values()} for w in meas}},
                       absolute={a.name: {w: {m: 1.0 for m in fp.KEYS.values()} for w in meas}},
                       reference_absolute={a.name: {w: {m: 2.0 for m in fp.KEYS.values()} for w in meas}},
                       seconds=120.0)
    rows = fp.cells(res, [a], parent, wls, limits, prof, tgt)
    assert len(rows) == 2 * 4
    for r in rows:
        want = 1.1 if r["metric"] == "throughput" else 1 / 1.1
        assert r["error"] == pytest.approx(want - 1) and r["rounds"] == 6
    args = SimpleNamespace(heldout_seed=3, budget_min=90.0, target_se=0.025, rounds=4, max_rounds=16,
                           workloads=["short", "concurrent"], fitted="out/x.json", threads=2,
                           models=None, pairings=1, heldout_only=False, out="out/x", root="bench/work/x")
    control = [r | {"model": "parent-again", "measured": 0.98, "se": 0.01} for r in rows]
    out = {"result": res.as_dict(), "machine": "x86_64, 2 CPUs", "finished": "now", "pairs": [a.name, "b", "c", "d"],
           "control": control}
    md = fp.table(out, rows, rows, args)
    assert "| short | 0.980 ± 1.0% | 0.980 ± 1.0% | 0.980 ± 1.0% | 0.980 ± 1.0% |" in md
    # host index: the parent measured (2.0 s in every chunk) over its prediction; slower host > 1
    idx = 2.0 / rows[[r["metric"] for r in rows].index("tpot")]["ref_predicted"]
    assert f"| short | {idx:.3f} |" in md
    assert "| tpot | 2 | 9.1% | 9.1% | -9.1% | 2.0% |" in md
    assert "tpot median 4.5, beyond 2 SE 2 of 2" in md  # 9.1% off at an SE of 2%
    assert f"| {a.name} | short | {pred['short']['tpot']:.3f} | {1.1 * pred['short']['tpot']:.3f} ± 2.0% | 6 | -9.1% |" in md
    assert "Process pairings" not in md  # one pairing: nothing to compare

    # two pairings: measured 5% dearer (pairing 0) and 15% dearer (pairing 1) than predicted; the cell is the mean
    parts = {w: {str(i): {"ratio": {fp.KEYS[k]: v * (f if k != "throughput" else 1 / f) for k, v in pred[w].items()},
                          "se": {fp.KEYS[k]: 0.01 for k in pred[w]}}
                 for i, f in ((0, 1.05), (1, 1.15))} for w in meas}
    res.pairing = {a.name: parts}
    rows = fp.cells(res, [a], parent, wls, limits, prof, tgt)
    r = next(r for r in rows if r["workload"] == "short" and r["metric"] == "e2e")
    assert r["parts"] == pytest.approx([1.05 * pred["short"]["e2e"], 1.15 * pred["short"]["e2e"]])
    args.pairings = 2
    md = fp.table(out, rows, rows, args)
    # spread 1.15 / 1.05 - 1 = 9.5%; start order 1.095; pairing 0 alone errs 1/1.05 - 1 = -4.8%, pairing 1 -13.0%;
    # the cell (the stored ratio, 1.1x) -9.1%
    assert "| short | e2e | 9.5% | 9.5% | 1.095 | 4.8% / 4.8% | 13.0% / 13.0% | 9.1% / 9.1% |" in md
    # the spread is the largest pairing over the smallest either way; the start order reads as time does (1.15 / 1.05)
    assert "| concurrent | throughput | 9.5% | 9.5% | 1.095 |" in md
    assert "--pairings 2" in md
    # between pairings 0.1 / 2 / 1.1 = 4.5% in every cell, above the rounds' sqrt(1.05^2 + 1.15^2) % / 2 / 1.1 = 0.7%
    assert "(TPOT, E2E, throughput, 6 cells): the spread between its pairings exceeds the rounds' pooled SE in 6; " \
           "median rounds' SE 0.7%, median between-pairing SE 4.5%." in md

    # four pairings (an extended run): the errors with each pairing alone, each consecutive two, and all four
    parts = {w: {str(i): {"ratio": {fp.KEYS[k]: v * (f if k != "throughput" else 1 / f) for k, v in pred[w].items()},
                          "se": {fp.KEYS[k]: 0.01 for k in pred[w]}}
                 for i, f in enumerate((1.05, 1.15, 1.00, 1.20))} for w in meas}
    res.pairing = {a.name: parts}
    rows = fp.cells(res, [a], parent, wls, limits, prof, tgt)
    args.pairings = 4
    hist = [{"command": "python -m bench.fidelity paired A", "pairings": [0, 1], "finished": "t0", "seconds": 600.0},
            {"command": "python -m bench.fidelity paired B", "pairings": [2, 3], "finished": "t1", "seconds": 1200.0}]
    md = fp.table(out | {"history": hist}, rows, rows, args)
    assert "Pairings 0-1: `python -m bench.fidelity paired A`, finished t0, 10 min." in md
    assert "Pairings 2-3: `python -m bench.fidelity paired B`, finished t1, 20 min." in md
    # spread 1.20 / 1.00 - 1; start order (1.15 + 1.20) / (1.05 + 1.00) = 1.146; pairing 2 alone errs 0.0%
    assert "| short | e2e | 20.0% | 20.0% | 1.146 | 4.8% / 4.8% | 13.0% / 13.0% | 0.0% / 0.0% | 16.7% / 16.7% |" in md
    # pairings 2+3: 1 / 1.10 - 1 = -9.1%, as 0+1; the cell is still the stored ratio (1.1x)
    assert "tpot pairing 0 4.8% / 4.8% ; pairing 1 13.0% / 13.0% ; pairing 2 0.0% / 0.0% ; pairing 3 16.7% / 16.7% ; " \
           "pairings 0+1 9.1% / 9.1% ; pairings 2+3 9.1% / 9.1% ; all 4 9.1% / 9.1%" in md
    assert "Process pairings (4 per model" in md


def test_an_extension_records_which_command_measured_which_pairings():
    fp = fidelity_paired
    base_args = {"heldout_seed": 3, "budget_min": 100.0, "target_se": 0.025, "rounds": 2, "max_rounds": 8,
                 "workloads": ["short"], "fitted": "out/f.json", "pairings": 2, "heldout_only": True,
                 "models": None, "out": "out/p2", "root": "bench/work/p2"}
    base = {"args": base_args, "finished": "t0", "result": {"seconds": 6000.0}}
    args = SimpleNamespace(**base_args | {"pairings": 4, "budget_min": 90.0, "extend": "out/p2.json",
                                          "out": "out/p4", "root": "bench/work/p4"})
    h = fp.history(base, args, SimpleNamespace(seconds=9000.0))
    assert [x["pairings"] for x in h] == [[0, 1], [2, 3]]
    assert h[0]["command"].endswith("--pairings 2 --heldout-only --out out/p2 --root bench/work/p2")
    assert "--budget-min 90 " in h[1]["command"] and "--extend out/p2.json" in h[1]["command"]
    assert h[0]["seconds"] == 6000.0 and h[1]["seconds"] == 3000.0  # this part's own time
    # extending the extension keeps the parts and numbers on from the last pairing
    h2 = fp.history(base | {"history": h}, SimpleNamespace(**vars(args) | {"pairings": 6}), SimpleNamespace(seconds=9500.0))
    assert [x["pairings"] for x in h2] == [[0, 1], [2, 3], [4, 5]] and h2[2]["seconds"] == 500.0
