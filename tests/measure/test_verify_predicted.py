"""``acc verify`` where nothing can be measured: the report says "predicted" and never shows a
prediction as a measurement (a GPU target on a machine without that GPU)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from autocompress.cli.main import main
from autocompress.export.decilm import decilm_config_from_architecture
from autocompress.parents.resolve import resolve_parent
from autocompress.lang.model import ParentRef

SPEC = """model "smollm2-135m"
target {{
  hardware  {hw}
  engine    vllm
  precision {prec}
  memory    <= {mem}
}}
workload chat {{
  concurrency 1
  input       256 tokens
  output      64 tokens
  tpot <= {tpot}
}}
"""


def _exported(tmp_path):
    """A pruned SmolLM2 as acc build exports it (config only: the predicted path reads no weights)."""
    parent = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    blocks = tuple(replace(b, ffn=None) if i in (10, 20) else b for i, b in enumerate(parent.blocks))
    arch = replace(parent, blocks=blocks)
    out = tmp_path / "model"
    out.mkdir()
    cfg = decilm_config_from_architecture(arch)
    cfg.update(model_type="nemotron-nas", architectures=["DeciLMForCausalLM"])
    (out / "config.json").write_text(json.dumps(cfg))
    (out / "autocompress-report.json").write_text(json.dumps({"quality": {
        "parent": {"code": {"ppl": 6.0}}, "student": {"code": {"ppl": 7.5, "kl": 0.2, "top1": 0.8}}}}))
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))


def _fake_engine_runs(monkeypatch, tpot: dict[str, float]) -> None:
    """Stand in for the engine runs of ``measure_interleaved``: each model folder (by name) decodes at
    ``tpot[name]`` seconds a token on the one ``chat`` workload (64 output tokens), 2 GiB peak."""
    import autocompress.measure.interleave as inter

    def run(folder, limits):
        v = tpot[folder.name]
        return {"measurements": [{"workload": "chat", "ttft_s": v * 4, "tpot_s": v, "e2e_s": v * 67,
                                  "throughput_tok_s": 64 / (v * 67), "other_cpu": 0.0, "samples": [],
                                  "versions": [["vllm", "0.32.0"]]}],
                "peak_rss_bytes": 2 << 30, "load_before": [0.5], "load_after": [0.6]}
    real = inter.measure_interleaved
    monkeypatch.setattr(inter, "measure_interleaved", lambda *a, **k: real(*a, **{**k, "run": run}))


def test_gpu_target_absent_reports_predicted_only(tmp_path, cache, capsys):
    out = _exported(tmp_path)
    spec = tmp_path / "h100.acspec"
    spec.write_text(SPEC.format(hw="h100-sxm", prec="bf16", mem="4 GiB", tpot="2 ms"))
    code = main(["verify", str(out), str(spec)])
    md = capsys.readouterr().out
    rep = json.loads((out / "verify-report.json").read_text())
    assert rep["status"] == "predicted" and rep["measurements"] is None
    assert all(b["measured"] is None and b["pass"] is None for b in rep["bounds"])
    assert "not measured" in rep["environment"]
    assert "PREDICTED ONLY" in md and "| measured |" not in md and "Nothing was measured" in md
    assert "gpu-vllm-default" in md and "never measured against this engine" in md
    tpot = next(b for b in rep["bounds"] if b["metric"] == "tpot")
    assert code == (0 if tpot["predicted_ok"] else 1)


def test_cpu_target_without_engine_is_predicted_and_says_why(tmp_path, cache, capsys, monkeypatch):
    import autocompress.measure.presence as prof

    monkeypatch.setattr(prof, "engine_available", lambda e: (False, "vllm is not installed"))
    out = _exported(tmp_path)
    spec = tmp_path / "cpu.acspec"
    spec.write_text(SPEC.format(hw="cpu", prec="fp32", mem="3 GiB", tpot="1 ms"))
    code = main(["verify", str(out), str(spec)])
    md = capsys.readouterr().out
    rep = json.loads((out / "verify-report.json").read_text())
    assert rep["status"] == "predicted" and rep["environment"] == "not measured: vllm is not installed"
    assert code == 1  # a 1 ms TPOT on this CPU is predicted to fail, and the exit code says so
    assert "**no**" in md


def test_verify_without_a_model_is_a_clear_error(tmp_path, cache, capsys):
    spec = tmp_path / "cpu.acspec"
    spec.write_text(SPEC.format(hw="cpu", prec="fp32", mem="3 GiB", tpot="100 ms"))
    assert main(["verify", str(tmp_path / "nothing"), str(spec)]) == 2
    assert "no exported model here" in capsys.readouterr().err


def test_relative_model_path_is_taken_from_the_working_directory(tmp_path, cache, capsys, monkeypatch):
    _exported(tmp_path)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "h100.acspec").write_text(SPEC.format(hw="h100-sxm", prec="bf16", mem="4 GiB", tpot="2 ms"))
    monkeypatch.chdir(tmp_path)  # the model folder is relative to here, not to the spec's folder
    assert main(["verify", "model", "specs/h100.acspec"]) in (0, 1)
    assert (tmp_path / "model" / "verify-report.md").is_file()


def test_measured_verify_reports_ratios_the_host_index_and_the_corrected_verdict(tmp_path, cache, monkeypatch):
    """The measured path with a stand-in engine: the model, the parent and the baseline interleaved;
    each bound judged on the absolute value, with the ratio to the parent, the host index and the
    corrected verdict beside it (here the host runs 1.5x slower than at calibration: the absolute
    TPOT misses the bound, the corrected one meets it, and the report says the two differ)."""
    import autocompress.measure.presence as presence
    import autocompress.measure.verify as verify
    from autocompress.cost.latency import predict_workload
    from autocompress.lang.api import load_spec
    from autocompress.plan.derive import derive

    out = _exported(tmp_path)
    base = tmp_path / "model-uniform"
    base.mkdir()
    (base / "config.json").write_text((out / "config.json").read_text())
    report = json.loads((out / "autocompress-report.json").read_text())
    report["baseline"] = {"strategy": "uniform", "output": "model-uniform"}
    (out / "autocompress-report.json").write_text(json.dumps(report))
    spec_path = tmp_path / "cpu.acspec"
    spec_path.write_text(SPEC.format(hw="cpu", prec="fp32", mem="3 GiB", tpot="70 ms"))
    spec = load_spec(str(spec_path))
    parent = resolve_parent(spec.parent, str(tmp_path))
    d = derive(spec, parent.architecture, str(tmp_path))
    pred_parent = predict_workload(parent.architecture, spec.target, spec.workloads[0], d.profile, d.device,
                                   d.limits).tpot_s
    slow, true = 1.5, {"model": 0.06, "parent": pred_parent, "model-uniform": 0.05}
    from autocompress.export.decilm import llama_config_from_architecture

    pdir = tmp_path / "parent"
    pdir.mkdir()
    (pdir / "config.json").write_text(json.dumps({**llama_config_from_architecture(parent.architecture),
                                                  "model_type": "llama", "architectures": ["LlamaForCausalLM"]}))

    _fake_engine_runs(monkeypatch, {n: v * slow for n, v in true.items()})
    monkeypatch.setattr(presence, "engine_available", lambda e: (True, "vllm"))
    monkeypatch.setattr("autocompress.export.gguf_convert.weights_folder", lambda value, p: tmp_path / "parent")
    monkeypatch.setattr(verify, "_models", lambda out_, spec_, base_, log, parent_: {
        "model": out, "parent": pdir, "baseline (uniform)": base})
    res = verify.run_verify(str(out), str(spec_path), log=lambda m: None)
    tpot = next(b for b in res.report["bounds"] if b["metric"] == "tpot")
    assert tpot["measured"] == pytest.approx(0.06 * slow) and tpot["pass"] is False  # 90 ms > 70 ms, absolute
    assert tpot["host_index"] == pytest.approx(slow) and tpot["corrected"] == pytest.approx(0.06)
    assert tpot["pass_corrected"] is True
    assert tpot["ratio_measured"] == pytest.approx(0.06 / pred_parent)
    assert tpot["others"]["baseline (uniform)"]["measured"] == pytest.approx(0.05 * slow)
    assert tpot["others"]["baseline (uniform)"]["model_over_this"] == pytest.approx([0.06 / 0.05])  # A/B directly
    mem = next(b for b in res.report["bounds"] if b["metric"] == "memory")
    assert mem["others"]["baseline (uniform)"]["model_over_this"] == pytest.approx([1.0])
    assert res.exit_code == 1  # judged on the absolute measurement
    md = (out / "verify-report.md").read_text()
    assert "**The corrected verdict differs** for chat.tpot" in md and "| baseline (uniform) |" in md
    assert "| model / baseline (uniform), per pass |" in md and "**1.200** (1.200)" in md


def test_verify_with_pairings_shows_the_paired_ratios_with_their_se_and_resumes(tmp_path, cache, monkeypatch):
    """``acc verify --pairings 2``: the ratio to the parent and the A/B come from paired engines (a
    stand-in: the model 0.9x the parent, the baseline 0.75x, each process pair 4% apart), each with
    its SE; the interleaved ratio stays beside it; a second verify resumes every cell."""
    import autocompress.measure.paired as paired
    import autocompress.measure.presence as presence
    import autocompress.measure.verify as verify
    from autocompress.export.decilm import llama_config_from_architecture
    from autocompress.lang.api import load_spec

    out = _exported(tmp_path)
    spec_path = tmp_path / "cpu.acspec"
    spec_path.write_text(SPEC.format(hw="cpu", prec="fp32", mem="3 GiB", tpot="70 ms"))
    parent = resolve_parent(load_spec(str(spec_path)).parent, str(tmp_path))
    pdir, base = tmp_path / "parent", tmp_path / "model-uniform"
    for d in (pdir, base):
        d.mkdir()
    (pdir / "config.json").write_text(json.dumps({**llama_config_from_architecture(parent.architecture),
                                                  "model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (base / "config.json").write_text((out / "config.json").read_text())
    true = {"model": 0.045, "parent": 0.05, "model-uniform": 0.0375}

    _fake_engine_runs(monkeypatch, true)  # the interleaved runs: ratio 0.9 to the parent
    monkeypatch.setattr(presence, "engine_available", lambda e: (True, "vllm"))
    monkeypatch.setattr(verify, "_models", lambda out_, spec_, base_, log, parent_: {
        "model": out, "parent": pdir, "baseline (uniform)": base})
    monkeypatch.setattr(paired, "SWITCH_S", 0.0)
    names = {"model": "model", "parent": "parent", "baseline (uniform)": "model-uniform"}
    started = []

    class Stand:
        def __init__(self, name, level):
            self.name, self.level = name, level

        def run(self, w, seed):
            v = true[names[self.name]] * self.level
            return {"ttft_s": v * 4, "tpot_s": v, "e2e_s": v * 67, "throughput_tok_s": 64 / (v * 67)}

        def stop(self):
            return {}

    def start(name, folder, target, limits, work, threads):
        started.append(name)
        # the model-first pairing's model runs 4% slow: a process level its rounds cannot see
        return Stand(name, 1.04 if name != "parent" and started[-2:-1] != ["parent"] else 1.0)
    monkeypatch.setattr(paired, "start", start)
    res = verify.run_verify(str(out), str(spec_path), log=lambda m: None, pairings=2)
    assert started == ["parent", "model", "model", "parent", "parent", "baseline (uniform)", "baseline (uniform)",
                       "parent"]
    tpot = next(b for b in res.report["bounds"] if b["metric"] == "tpot")
    assert tpot["ratio_measured"] == pytest.approx(0.9 * 1.02)  # the mean of 0.9 and 0.936
    # the rounds agree (SE 0), so the SE is the spread between the pairings: stdev / sqrt(2) / mean
    assert tpot["ratio_se"] == pytest.approx(0.9 * 0.04 / 2 / (0.9 * 1.02))
    assert tpot["ratio_interleaved"] == pytest.approx(0.9)
    ab = tpot["others"]["baseline (uniform)"]
    assert ab["model_over_this_paired"] == pytest.approx(0.9 / 0.75) and ab["model_over_this_se"] == pytest.approx(
        (2 * tpot["ratio_se"] ** 2) ** 0.5)
    mem = next(b for b in res.report["bounds"] if b["metric"] == "memory")
    assert "ratio_se" not in mem and "model_over_this_paired" not in mem["others"]["baseline (uniform)"]
    assert res.report["measurements"]["paired"]["engine_starts"] == 8
    md = (out / "verify-report.md").read_text()
    assert f"| {0.918:.3f} ± {tpot['ratio_se']:.1%} / " in md and "from **paired engines**" in md
    assert f"paired **1.200 ± {ab['model_over_this_se']:.1%}**" in md
    assert not list(out.parent.glob(".model.acc/verify/paired.json"))  # written out: a later verify measures anew

    # an engine that fails to start: the verdicts stand, the report says so, and the next verify
    # resumes the cells already measured (the model's) and measures the baseline's only
    started.clear()
    real_start = start

    failed = []

    def failing(name, *a):
        if name == "baseline (uniform)" and not failed:
            failed.append(name)
            raise paired.PairedError("baseline failed to load")
        return real_start(name, *a)
    monkeypatch.setattr(paired, "start", failing)
    cut = verify.run_verify(str(out), str(spec_path), log=lambda m: None, pairings=2)
    assert cut.report["measurements"]["paired"] == {"pairings": 2, "error": "baseline failed to load"}
    assert "The paired-engine ratios (2 pairings) failed: baseline failed to load" in (out / "verify-report.md").read_text()
    assert next(b for b in cut.report["bounds"] if b["metric"] == "tpot")["ratio_measured"] == pytest.approx(0.9)
    started.clear()
    again = verify.run_verify(str(out), str(spec_path), log=lambda m: None, pairings=2)
    assert started == ["parent", "baseline (uniform)", "baseline (uniform)", "parent"]
    t2 = next(b for b in again.report["bounds"] if b["metric"] == "tpot")
    assert t2["ratio_measured"] == pytest.approx(tpot["ratio_measured"])
    assert t2["others"]["baseline (uniform)"]["model_over_this_paired"] == pytest.approx(0.9 / 0.75)

    # no parent to pair with (its weights absent): the flag says so in the report instead of doing nothing
    monkeypatch.setattr(verify, "_models", lambda out_, spec_, base_, log, parent_: {"model": out})
    alone = verify.run_verify(str(out), str(spec_path), log=lambda m: None, pairings=2)
    assert alone.report["measurements"]["paired"]["error"].startswith("no parent to pair the model with")


def test_verify_refuses_one_pairing(capsys):
    """One pairing would share one parent process and swap no start order: refused, exit 2."""
    with pytest.raises(SystemExit) as exc:  # argparse's exit, code 2 as every bad argument
        main(["verify", "out", "spec.acspec", "--pairings", "1"])
    assert exc.value.code == 2
    assert "allowed: 0 (off) or a whole number >= 2, got 1" in capsys.readouterr().err
