"""A catalog GPU's measured profile: ``acc profile --hardware <gpu>`` writes it into the cache's
profiles folder (``cost.machine.device_profile_path``), and ``acc check``/``build``/``verify`` find it
there (``cost.profile.builtin_profile_path``), never the current folder, where nothing looks."""

import json
import os
import shutil
from pathlib import Path

import pytest

from autocompress.catalog.hardware import resolve_device
from autocompress.cost import profile as profile_mod
from autocompress.cost.machine import (device_profile_path, device_profiles, machine_profile_path, machine_profiles,
                                       own_profile_path, parent_tag, this_machine)
from autocompress.cost.profile import PROFILE_DIR, builtin_profile_path, load_profile, origin


@pytest.fixture(scope="module")
def parents():
    from autocompress.lang.model import ParentRef
    from autocompress.parents.resolve import resolve_parent

    return {a: resolve_parent(ParentRef("alias", a), ".").architecture for a in ("smollm2-135m", "gemma3-270m")}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty acc cache: no profile of this machine or of any GPU."""
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _measured(path: Path, hardware: str, parent=None, name: str = "measured") -> Path:
    """A valid measured profile of ``hardware`` at ``path``, calibrated on ``parent``."""
    kind = "cpu" if hardware == "cpu" else "gpu"
    doc = json.loads((PROFILE_DIR / f"{kind}-vllm-default.json").read_text())
    doc.update(name=name, hardware=hardware, source="measured")
    if parent is not None:
        doc["reference"] = {"model": "the parent (parent)", "parent_tag": parent_tag(parent), "workloads": {}}
    if kind == "cpu":
        doc["machine"] = this_machine("vllm").as_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_a_gpu_profile_lives_in_the_cache_by_catalog_name_and_parent(cache, parents):
    smol = parents["smollm2-135m"]
    assert device_profile_path("h100-sxm", "vllm", smol) == \
        cache / "profiles" / f"h100-sxm-vllm-measured-{parent_tag(smol)}.json"
    assert device_profile_path("h100-sxm", "vllm") == cache / "profiles" / "h100-sxm-vllm-measured.json"
    # acc profile's default: this machine's for the host CPU, the catalog name's for a GPU
    assert own_profile_path("gpu", "h200", "vllm", smol) == device_profile_path("h200", "vllm", smol)
    assert own_profile_path("cpu", "cpu", "vllm", smol) == machine_profile_path("vllm", parent=smol)
    for name in ("cpu", "my-own-board", "../h200"):  # only a catalog GPU's profile is kept by its name
        with pytest.raises(ValueError, match="is not a catalog GPU"):
            device_profile_path(name, "vllm", smol)


def test_the_users_gpu_profile_is_the_one_a_spec_without_a_profile_gets(cache, parents):
    smol, gemma = parents["smollm2-135m"], parents["gemma3-270m"]
    h100 = resolve_device("h100-sxm")
    assert load_profile(None, h100, "vllm", smol).name == "gpu-vllm-default"  # none measured yet
    mine = _measured(device_profile_path("h100-sxm", "vllm", smol), "h100-sxm", smol)
    got = load_profile(None, h100, "vllm", smol)
    assert got.path == str(mine) and got.source == "measured"
    kind, said = origin(got, h100, smol)
    assert kind == "catalog device" and "measured on a h100-sxm" in said and "standard part" in said
    # another board's profile is not this one's, whatever their names share
    assert load_profile(None, resolve_device("h100-pcie"), "vllm", smol).name == "gpu-vllm-default"
    assert load_profile(None, resolve_device("h200"), "vllm", smol).name == "gpu-vllm-default"
    # another parent: this GPU's profile of SmolLM2 beats the default, and the report says whose it is
    other = load_profile(None, h100, "vllm", gemma)
    assert other.path == str(mine)
    kind, said = origin(other, h100, gemma)
    assert kind == "another parent" and "not on this parent" in said and "acc profile --hardware h100-sxm" in said
    # a profile of no named parent is found too, the parent's own still first
    untagged = _measured(device_profile_path("h100-sxm", "vllm"), "h100-sxm", name="untagged")
    os.utime(untagged, ns=(mine.stat().st_mtime_ns + 10**9,) * 2)  # newer, whatever the clock's grain
    assert device_profiles("h100-sxm", "vllm")[0] == untagged  # newest first
    assert load_profile(None, h100, "vllm", smol).path == str(mine)
    assert load_profile(None, h100, "vllm", gemma).path == str(untagged)


def test_the_order_among_the_users_and_the_shipped_gpu_profiles(cache, parents, tmp_path, monkeypatch):
    """1. the user's for this parent, 2. a shipped one for this parent, 3. the user's for another
    parent, 4. a shipped one for another parent, 5. the default."""
    smol, gemma = parents["smollm2-135m"], parents["gemma3-270m"]
    shipped_dir = tmp_path / "shipped"
    shutil.copytree(PROFILE_DIR, shipped_dir)
    monkeypatch.setattr(profile_mod, "PROFILE_DIR", shipped_dir)

    def pick():
        return builtin_profile_path("gpu", "vllm", "h200", gemma)
    assert pick() == shipped_dir / "gpu-vllm-default.json"
    shipped = _measured(shipped_dir / "h200-vllm-measured.json", "h200")
    assert pick() == shipped
    theirs = _measured(device_profile_path("h200", "vllm", smol), "h200", smol)
    assert pick() == theirs
    shipped_own = _measured(shipped_dir / f"h200-vllm-measured-{parent_tag(gemma)}.json", "h200", gemma)
    assert pick() == shipped_own
    own = _measured(device_profile_path("h200", "vllm", gemma), "h200", gemma)
    assert pick() == own
    assert load_profile(None, resolve_device("h200"), "vllm", gemma).path == str(own)


def test_the_cpu_lookup_ignores_gpu_profiles_and_a_custom_device_gets_none(cache, parents):
    smol = parents["smollm2-135m"]
    _measured(device_profile_path("h100-sxm", "vllm", smol), "h100-sxm", smol)
    _measured(device_profile_path("h100-sxm", "vllm"), "h100-sxm")
    assert machine_profiles("vllm") == []
    assert builtin_profile_path("cpu", "vllm", "cpu", smol) == PROFILE_DIR / "cpu-vllm-measured.json"
    mine = _measured(machine_profile_path("vllm", parent=smol), "cpu", smol)
    assert builtin_profile_path("cpu", "vllm", "cpu", smol) == mine
    assert origin(load_profile(None, resolve_device("cpu"), "vllm", smol), resolve_device("cpu"), smol)[0] == \
        "this machine"
    # a spec's inline device is not a catalog part: no profile is kept by its name
    assert builtin_profile_path("gpu", "vllm", "my-own-board", smol) == PROFILE_DIR / "gpu-vllm-default.json"
