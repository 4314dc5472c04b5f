"""Is the contract's target this machine, and is its engine installed? (``acc verify``, ``acc build``,
``acc profile`` measure only where both hold.)"""

from __future__ import annotations


def hardware_present(device) -> tuple[bool, str]:
    """Whether ``device`` (a catalog entry) is this machine: the host CPU always is; a GPU entry is
    when CUDA sees a device whose name contains the catalog's marketing name."""
    if device.kind == "cpu":
        return True, "the host CPU"
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device on this machine"
    name = torch.cuda.get_device_name(0)
    want = device.name.replace("-", " ").lower()
    if want.split()[-1] in name.lower():
        return True, name
    return False, f"this machine has {name}, not {device.name}"


def engine_available(engine: str) -> tuple[bool, str]:
    import importlib.util

    mod = "vllm" if engine == "vllm" else "transformers"
    if importlib.util.find_spec(mod) is None:
        return False, f"{mod} is not installed (scripts/install-full.sh installs it)"
    return True, mod
