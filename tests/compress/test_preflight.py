"""Before compressing for the host CPU: this machine's profile, and the parent measured against the contract."""

from __future__ import annotations

import json

import pytest

from autocompress.build import pipeline

from autocompress.build import preflight
from autocompress.diagnostics import BuildError
from autocompress.cost import machine
from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.lang.api import parse_spec
from autocompress.plan.budget import Budget

# two parents of different shapes (vocabularies): a profile fitted on one does not speak for the other
SMALL = Architecture("llama", 1000, 64, 4, 16, True, (Block(Attention(4, 2, 16), MLP(128)),) * 2)
WIDE_VOCAB = Architecture("llama", 262144, 64, 4, 16, True, (Block(Attention(4, 2, 16), MLP(128)),) * 2)


def _write_own(doc: dict, parent: Architecture | None) -> "machine.Path":
    """Write ``doc`` as this machine's profile calibrated on ``parent``, as `acc profile` would."""
    doc = {**doc, "machine": machine.this_machine("vllm").as_dict()}
    if parent is not None:
        doc["reference"] = {**doc.get("reference", {"workloads": {}}), "model": "tiny (parent)",
                            "parent_tag": machine.parent_tag(parent)}
    own = machine.machine_profile_path("vllm", parent=parent)
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text(json.dumps(doc))
    return own

SPEC = """\
model "smollm2-135m"
target {
  hardware  cpu
  engine    vllm
  precision fp32
  memory    <= 2 GiB
}
workload ask {
  concurrency 1
  input  128 tokens
  output 32 tokens
  tpot <= 70 ms
}
output "out/m"
"""


def test_the_fingerprint_names_what_decides_a_profile():
    m = machine.this_machine("vllm")
    assert m.cores >= 1 and m.cpu and dict(m.versions)["torch"] != ""
    assert len(m.fingerprint) == 12 and m.fingerprint == machine.this_machine("vllm").fingerprint
    other = machine.Machine(m.cpu, m.cores + 1, m.memory_gib, m.versions)
    assert other.fingerprint != m.fingerprint  # another core count: another machine
    assert machine.machine_profile_path("vllm").name == f"cpu-vllm-{m.fingerprint}.json"
    # a profile also belongs to the parent it was calibrated on: another vocabulary, another file
    tag = machine.parent_tag(SMALL)
    assert machine.machine_profile_path("vllm", parent=SMALL).name == f"cpu-vllm-{m.fingerprint}-{tag}.json"
    assert tag.startswith("llama-") and tag != machine.parent_tag(WIDE_VOCAB)
    assert tag == machine.parent_tag(Architecture("llama", 1000, 64, 4, 16, True, SMALL.blocks, name="renamed"))


def test_a_profile_of_this_machine_is_used_and_said_to_be(tmp_path, monkeypatch):
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, builtin_profile_path, load_profile, origin

    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path))
    cpu = resolve_device("cpu")
    shipped = load_profile(None, cpu, "vllm")
    assert builtin_profile_path("cpu", "vllm", "cpu") == PROFILE_DIR / "cpu-vllm-measured.json"
    assert origin(shipped, cpu)[0] == "another machine" and "acc profile --hardware cpu" in origin(shipped, cpu)[1]
    doc = json.loads((PROFILE_DIR / "cpu-vllm-measured.json").read_text())
    own = _write_own(doc, SMALL)
    mine = load_profile(None, cpu, "vllm", SMALL)
    assert mine.path == str(own) and origin(mine, cpu, SMALL)[0] == "this machine"
    # another parent on this machine: its profile is used (this machine's speeds) and said to be another parent's
    theirs = load_profile(None, cpu, "vllm", WIDE_VOCAB)
    assert theirs.path == str(own) and origin(theirs, cpu, WIDE_VOCAB)[0] == "another parent"
    assert "calibrated on tiny, not on this parent" in origin(theirs, cpu, WIDE_VOCAB)[1]
    wide = _write_own(doc, WIDE_VOCAB)  # once calibrated on it, each parent gets its own
    assert load_profile(None, cpu, "vllm", WIDE_VOCAB).path == str(wide)
    assert load_profile(None, cpu, "vllm", SMALL).path == str(own)
    gpu = resolve_device("h100-sxm")
    assert origin(load_profile(None, gpu, "vllm"), gpu)[0] == "default"


def test_another_parent_of_the_same_family_is_preferred_to_a_newer_one(tmp_path, monkeypatch):
    """Without this parent's own profile, this machine's for a parent of the same family (same layer
    kinds and head) speaks for it better than a newer one of another family."""
    import os

    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile

    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path))
    cpu = resolve_device("cpu")
    doc = json.loads((PROFILE_DIR / "cpu-vllm-measured.json").read_text())
    other_family = Architecture("gemma3_text", 1000, 64, 4, 16, True, SMALL.blocks)
    same = _write_own(doc, SMALL)
    newer = _write_own(doc, other_family)
    os.utime(same, (1, 1))  # the same family's is the older file
    assert load_profile(None, cpu, "vllm", other_family).path == str(newer)  # its own
    assert load_profile(None, cpu, "vllm", WIDE_VOCAB).path == str(same)  # llama: the llama one, though older
    third = Architecture("mixtral", 1000, 64, 4, 16, True, SMALL.blocks)
    assert load_profile(None, cpu, "vllm", third).path == str(newer)  # no family match: the newest


def test_a_parent_that_meets_the_contract_is_not_compressed(tmp_path, monkeypatch):
    (tmp_path / "s.acspec").write_text(SPEC)
    budget = Budget.of(parse_spec(SPEC))  # ask.tpot <= 70 ms, memory <= 2 GiB
    measured = preflight.ParentCheck(((budget["ask.tpot"], 0.037), (budget.memory, 1.9 * 2**30)))
    monkeypatch.setattr(preflight, "applies", lambda spec: True)
    monkeypatch.setattr(preflight, "calibrate_if_needed", lambda *a: None)
    monkeypatch.setattr(preflight, "measure_parent", lambda *a, **k: measured)
    monkeypatch.setattr("autocompress.build.pipeline.parent_folder", lambda spec, parent, progress=None: tmp_path)
    logs = []
    with pytest.raises(BuildError) as e:
        pipeline.run_build(str(tmp_path / "s.acspec"), progress=logs.append)
    assert e.value.exit_code == 0 and "already meets every bound" in str(e.value) and "--force" in str(e.value)
    assert any("measured 37 ms" in m and "meets it" in m for m in logs)
    assert not (tmp_path / "out" / ".m.acc" / "importance").exists() and not (tmp_path / "out" / "m").exists()

    class Reached(Exception):
        pass

    def reached(*a, **k):
        raise Reached
    monkeypatch.setattr(pipeline, "prepare", reached)
    with pytest.raises(Reached):  # --force: on to the compression
        pipeline.run_build(str(tmp_path / "s.acspec"), progress=logs.append, force=True)
    missed = preflight.ParentCheck(((budget["ask.tpot"], 0.09),))
    monkeypatch.setattr(preflight, "measure_parent", lambda *a, **k: missed)
    with pytest.raises(Reached):  # a missed bound: compress
        pipeline.run_build(str(tmp_path / "s.acspec"), progress=logs.append)


def test_calibration_runs_once_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path))
    from autocompress.lang.api import parse_spec

    spec = parse_spec(SPEC)
    calls, logs = [], []
    import autocompress.calibrate.profile as profile

    arch = {"smollm2-135m": SMALL}

    def fake(hardware, engine, out, model, quick, progress):
        calls.append((hardware, engine, out, model, quick))
        _write_own({}, arch[model])
    monkeypatch.setattr(profile, "run_profile", fake)
    preflight.calibrate_if_needed(spec, str(tmp_path), False, logs.append, SMALL)
    preflight.calibrate_if_needed(spec, str(tmp_path), False, logs.append, SMALL)
    assert calls == [("cpu", "vllm", None, "smollm2-135m", True)] and "no profile for this machine" in logs[0]
    assert "and this parent (smollm2-135m)" in logs[0]
    arch["smollm2-135m"] = WIDE_VOCAB  # a parent of another shape: calibrated again, on itself
    preflight.calibrate_if_needed(spec, str(tmp_path), False, logs.append, WIDE_VOCAB)
    assert len(calls) == 2 and machine.machine_profile_path("vllm", parent=WIDE_VOCAB).is_file()
    machine.machine_profile_path("vllm", parent=SMALL).unlink()
    preflight.calibrate_if_needed(spec, str(tmp_path), True, logs.append, SMALL)
    assert len(calls) == 2 and "skipped (--no-calibrate)" in logs[-1]


def test_a_new_machine_profile_changes_the_checks_answer(tmp_path, monkeypatch):
    """`acc check` caches by content; a spec without a profile line reads this machine's profile once
    `acc profile` wrote it, so the cache must not serve the answer made with another machine's."""
    import os
    import shutil

    from autocompress.check import run_check
    from autocompress.cost.profile import PROFILE_DIR

    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    spec = shutil.copy(os.environ["ACC_TEST_EXAMPLES"] + "/cpu-vllm.acspec", tmp_path / "cpu-vllm.acspec")
    first = run_check(str(spec))
    assert run_check(str(spec)).cached and first.report["cost_model"]["origin"] == "another machine"
    doc = json.loads((PROFILE_DIR / "cpu-vllm-measured.json").read_text())
    doc["kernel"]["step_overhead_s"] *= 0.5  # a faster machine
    from autocompress.lang.api import load_spec
    from autocompress.parents.resolve import resolve_parent

    _write_own(doc, resolve_parent(load_spec(str(spec)).parent, str(tmp_path)).architecture)
    again = run_check(str(spec))
    assert not again.cached and again.report["cost_model"]["origin"] == "this machine"
    assert again.report["parent_costs"]["checks"] != first.report["parent_costs"]["checks"]
