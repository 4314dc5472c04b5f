"""Calibration profiles: built-ins validate and ship in the package; bad files give clear errors."""

import json
from pathlib import Path

import pytest

from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.profile import PROFILE_DIR, ProfileError, load_profile, validate_profile

DEFAULTS = ["gpu-vllm-default", "gpu-transformers-default", "cpu-vllm-default", "cpu-transformers-default"]
MEASURED = ["cpu-vllm-measured"]  # written by `acc profile` on the development host
# written by `acc profile --model gemma3-270m --quick` (the Gemma host build's calibration): a
# profile belongs to the parent it was fitted on, so a Gemma parent falls back to this one
PER_PARENT = ["cpu-vllm-measured-gemma3_text-35e9490d"]
BUILTIN = DEFAULTS + MEASURED + PER_PARENT


def _data(name="gpu-vllm-default"):
    return json.loads((PROFILE_DIR / f"{name}.json").read_text())


@pytest.mark.parametrize("name", DEFAULTS)
def test_builtin_defaults_validate_and_say_so(name):
    kind, engine = name.split("-")[:2]
    dev = HARDWARE["h100-sxm" if kind == "gpu" else "cpu"]
    p = load_profile(PROFILE_DIR / f"{name}.json", dev, engine)
    assert p.name == name and p.source == "default" and p.known_error is None and p.error("tpot") is None
    assert 0 < p.efficiency.compute <= 1 and 0 < p.efficiency.memory <= 1


@pytest.mark.parametrize("name", MEASURED)
def test_measured_builtins_win_and_carry_their_error(name):
    kind, engine = name.split("-")[:2]
    dev = HARDWARE["h100-sxm" if kind == "gpu" else kind]
    p = load_profile(None, dev, engine)  # a shipped measured profile is the built-in choice
    assert p.name == name and p.source == "measured"
    for metric in ("ttft", "tpot", "e2e", "throughput", "memory"):
        e = p.error(metric)
        assert e is not None and 0 <= e.median <= e.p95 and e.samples >= 13


def test_a_parent_with_a_shipped_profile_of_its_own_gets_it(tmp_path, monkeypatch):
    from autocompress.cost.machine import parent_tag
    from autocompress.lang.model import ParentRef
    from autocompress.parents.resolve import resolve_parent

    gemma = resolve_parent(ParentRef("alias", "gemma3-270m"), ".").architecture
    smol = resolve_parent(ParentRef("alias", "smollm2-135m"), ".").architecture
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path))  # no profile of this machine
    cpu = HARDWARE["cpu"]
    p = load_profile(None, cpu, "vllm", gemma)
    assert Path(p.path).stem == PER_PARENT[0] == f"cpu-vllm-measured-{parent_tag(gemma)}"
    assert p.source == "measured" and p.reference["parent_tag"] == parent_tag(gemma) and p.error("tpot") is not None
    assert Path(load_profile(None, cpu, "vllm", smol).path).stem == "cpu-vllm-measured"  # no shipped one of its own
    assert Path(load_profile(None, cpu, "vllm").path).stem == "cpu-vllm-measured"
    # this machine calibrated on SmolLM2: SmolLM2 gets it; Gemma keeps the profile fitted on Gemma
    from autocompress.cost.machine import machine_profile_path, this_machine

    doc = _data("cpu-vllm-measured")
    doc["machine"] = this_machine("vllm").as_dict()
    own = machine_profile_path("vllm", parent=smol)
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps(doc))
    assert load_profile(None, cpu, "vllm", smol).path == str(own)
    assert Path(load_profile(None, cpu, "vllm", gemma).path).stem == PER_PARENT[0]


def test_without_a_measured_profile_the_default_is_used():
    p = load_profile(None, HARDWARE["h100-sxm"], "vllm")
    assert p.source == "default" and p.name == "gpu-vllm-default"


def test_builtins_live_inside_the_package():
    import autocompress
    assert PROFILE_DIR == Path(autocompress.__file__).parent / "cost" / "profiles"
    assert sorted(p.stem for p in PROFILE_DIR.glob("*.json")) == sorted(BUILTIN)


def test_gpu_defaults_follow_llm_analysis_bounds():
    p = load_profile(None, HARDWARE["h200"], "vllm")
    assert (p.efficiency.compute, p.efficiency.memory) == (0.7, 0.9)
    assert p.eff("gemm") == p.efficiency and p.eff("attention").compute == 0.5
    assert p.eff("elementwise").compute == 0.7  # missing field falls back to the overall figure


def test_bad_profile_lists_every_error(tmp_path):
    d = _data()
    d["efficiency"]["compute"] = 9.5  # above even cpu's cap (its catalog peaks are placeholders)
    del d["kernel"]["launch_s"]
    d["known_error"] = {"tpot": {"median": 0.1}}
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    with pytest.raises(ProfileError) as e:
        load_profile(f, HARDWARE["h100-sxm"], "vllm")
    msg = str(e.value)
    assert msg.startswith(f"invalid calibration profile {f}:")
    assert "at efficiency.compute: must be <= 8" in msg and "9.5" not in msg  # the rule, not the value found
    assert "at kernel: 'launch_s' is a required property" in msg
    assert "at known_error" in msg


def test_measured_profile_with_known_error(tmp_path):
    d = _data()
    d.update(name="h100-measured", hardware="h100-sxm", source="measured",
             known_error={"tpot": {"median": 0.04, "p95": 0.11, "samples": 30}})
    f = tmp_path / "m.json"
    f.write_text(json.dumps(d))
    p = load_profile(str(f), HARDWARE["h100-sxm"], "vllm")
    assert p.source == "measured" and p.error("tpot").p95 == 0.11 and p.error("ttft") is None
    with pytest.raises(ProfileError, match="is for other hardware, the target is 'h200'"):
        load_profile(f, HARDWARE["h200"], "vllm")
    with pytest.raises(ProfileError, match="is for another engine, the target uses 'transformers'"):
        load_profile(f, HARDWARE["h100-sxm"], "transformers")


def test_unreadable_profiles(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        load_profile(tmp_path / "nope.json", HARDWARE["l4"], "vllm")
    f = tmp_path / "x.json"
    f.write_text("{not json")
    with pytest.raises(ProfileError, match="cannot read calibration profile"):
        load_profile(f, HARDWARE["l4"], "vllm")
    with pytest.raises(ProfileError, match=r"at \(top level\): 'name' is a required property"):
        validate_profile({}, "p")
