"""``acc profile``'s path after the engine runs, on a stand-in engine: the profile file is written,
with the run count of an interleaved schedule and a margin from all of the reference's runs, and the
run journal is removed once it is saved. Without this test a rename in ``Interleaved`` that
``run_profile`` missed passed every unit test and failed the README's main command after 10 minutes
of calibration."""

import json
from pathlib import Path


def _stand_in_engine(tmp_path, monkeypatch):
    """``run_profile``'s engine runs, fit and tokenizer replaced: every model at one speed."""
    import autocompress.calibrate.calibration as calibration
    import autocompress.calibrate.fit as fit
    import autocompress.measure.presence as presence
    import autocompress.calibrate.profile as profile
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.interleave import measure_interleaved

    rss = iter(range(2_600 << 20, 4_000 << 20, 7 << 20))

    def engine_run(folder, limits):  # every model at one speed; each run's peak RSS a little higher
        return {"measurements": [{"workload": w["name"], "mode": w["mode"], "concurrency": w["concurrency"],
                                  "input_tokens": w["input_tokens"], "output_tokens": w["output_tokens"],
                                  "prefix_cache": w["prefix_cache"], "ttft_s": 0.2, "tpot_s": 0.03, "e2e_s": 1.2,
                                  "throughput_tok_s": 25.0, "other_cpu": 0.0, "samples": []}
                                 for w in calibration.workload_dicts(True)], "peak_rss_bytes": next(rss)}

    def fake_sets(archs, target, tok, root, threads=None, quick=False, passes=1, log=print, progress=None):
        wls = calibration.workload_dicts(quick)
        limits = {a.name: derive_limits(a, target, calibration.workloads(), threads=threads) for a in archs}
        inter = measure_interleaved({a.name: Path(a.name) for a in archs}, archs[0].name, target, wls, limits,
                                    Path(root), passes=passes, run=engine_run, log=lambda m: None,
                                    journal=Path(root) / "journal.jsonl")
        return inter, limits, wls

    monkeypatch.setattr(calibration, "measure_sets", fake_sets)
    monkeypatch.setattr(fit, "fit_profile", lambda rows, base, target, **kw: base)  # minutes of least squares
    monkeypatch.setattr(presence, "engine_available", lambda engine: (True, ""))
    # the stand-in engine needs no tokenizer: skip the GGUF conversion
    monkeypatch.setattr(profile, "tokenizer_dir", lambda *a, **k: tmp_path)


def test_a_quick_profile_is_written_from_an_interleaved_measurement(tmp_path, monkeypatch):
    from autocompress.calibrate.profile import run_profile

    _stand_in_engine(tmp_path, monkeypatch)
    out = tmp_path / "p.json"
    run = run_profile("cpu", "vllm", out, quick=True, root=tmp_path / "work", log=lambda m: None)
    doc = json.loads(out.read_text())
    m = doc["measurement"]
    assert m["runs"] == 2 * (run.calibration + run.heldout - 1) + 1  # reference, model, reference, ...
    # the margin's RSS term comes from the reference's own runs, every one of them
    assert m["margin"]["reference_runs"] == run.calibration + run.heldout
    assert not (tmp_path / "work" / "journal.jsonl").exists()  # saved: the journal goes


def test_a_gpu_profile_goes_where_check_build_and_verify_look(tmp_path, monkeypatch):
    """``acc profile --hardware h100-sxm`` without ``--out``: the profile lands in the cache's profiles
    folder under the catalog name and the parent, and a spec on that GPU naming no profile gets it;
    it once went to ``./h100-sxm-vllm-measured.json``, where nothing looked."""
    import autocompress.measure.presence as presence
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.machine import device_profile_path, parent_tag
    from autocompress.cost.profile import load_profile, origin
    from autocompress.lang.model import ParentRef
    from autocompress.calibrate.profile import run_profile
    from autocompress.parents.resolve import resolve_parent

    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    _stand_in_engine(tmp_path, monkeypatch)
    monkeypatch.setattr(presence, "hardware_present", lambda device: (True, ""))  # no GPU here
    run = run_profile("h100-sxm", "vllm", None, quick=True, root=tmp_path / "work", log=lambda m: None)
    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    assert run.path == device_profile_path("h100-sxm", "vllm", parent) == \
        tmp_path / "cache" / "profiles" / f"h100-sxm-vllm-measured-{parent_tag(parent)}.json"
    assert run.path.is_file() and not list(tmp_path.glob("*.json"))  # nothing in the current folder
    h100 = resolve_device("h100-sxm")
    got = load_profile(None, h100, "vllm", parent)
    assert got.path == str(run.path) and got.source == "measured" and got.hardware == "h100-sxm"
    assert origin(got, h100, parent)[0] == "catalog device"
    assert run.profile["name"] == "h100-sxm-vllm-measured" and "machine" not in run.profile
