"""Is the contract's target this machine, and is its engine installed? (``acc verify``, ``acc build``,
``acc profile`` measure only where both hold.)"""

from __future__ import annotations

import importlib.util
import re

# What CUDA calls each catalog GPU (torch.cuda.get_device_name, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA
# A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA GeForce RTX 5080"): tokens that must be in the name, and tokens that
# must not. Whole tokens, not substrings: "l4" is in "l40s", "b200" in "gb200", "80g" in an H100's "80gb".
# The H100 SXM reports no form factor ("NVIDIA H100 80GB HBM3"): it is the H100 that is neither PCIe nor NVL.
CUDA_NAMES: dict[str, tuple[frozenset, frozenset]] = {
    "rtx-5070": (frozenset({"5070"}), frozenset({"ti"})),
    "rtx-5080": (frozenset({"5080"}), frozenset()),
    "rtx-5090": (frozenset({"5090"}), frozenset()),
    "rtx-4090": (frozenset({"4090"}), frozenset()),
    "l4": (frozenset({"l4"}), frozenset()),
    "l40s": (frozenset({"l40s"}), frozenset()),
    "a100-80g": (frozenset({"a100", "80gb"}), frozenset()),
    "h100-sxm": (frozenset({"h100"}), frozenset({"pcie", "nvl"})),
    "h100-pcie": (frozenset({"h100", "pcie"}), frozenset()),
    "h200": (frozenset({"h200"}), frozenset()),
    "b200": (frozenset({"b200"}), frozenset()),
    "gb200": (frozenset({"gb200"}), frozenset()),
}


def _tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[\s\-_/]+", name.lower()) if t}


def cuda_name_matches(device_name: str, cuda_name: str) -> bool:
    """Whether the CUDA device called ``cuda_name`` is the catalog (or custom) GPU ``device_name``. A custom
    device matches when every token of its name is a token of the CUDA name."""
    need, refuse = CUDA_NAMES.get(device_name, (frozenset(_tokens(device_name)), frozenset()))
    have = _tokens(cuda_name)
    return need <= have and not (refuse & have)


def hardware_present(device) -> tuple[bool, str]:
    """Whether ``device`` (a catalog entry) is this machine: the host CPU always is; a GPU entry is
    when CUDA's first device has its name (``CUDA_NAMES``)."""
    if device.kind == "cpu":
        return True, "the host CPU"
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device on this machine"
    name = torch.cuda.get_device_name(0)
    if cuda_name_matches(device.name, name):
        return True, name
    return False, f"this machine has {name}, not {device.name}"


def engine_available(engine: str) -> tuple[bool, str]:
    mod = "vllm" if engine == "vllm" else "transformers"
    if importlib.util.find_spec(mod) is None:
        return False, f"{mod} is not installed (scripts/install-full.sh installs it)"
    return True, mod
