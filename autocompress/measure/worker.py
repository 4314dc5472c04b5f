"""One engine process: load a model, run workloads, write every measurement as JSON.

    python -m autocompress.measure.worker REQUEST.json RESULT.json [--commands]

Each model is measured in a fresh process so that one model's memory (vLLM's libraries, its
KV space, allocator caches) never counts against the next, and the whole-process peak resident
memory is what a user's serving process would show. The request names the model folder, the
target, the engine limits, the workloads and the run settings; the result holds each workload's
``Measurement`` (every sample kept), the process's peak RSS, the load time and the load average
before and after, and per workload ``other_cpu``: the CPU cores other processes used while it ran
(these 2-core machines are shared: a busy neighbour is visible in the data).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict

from autocompress.lang.model import Target, Workload
from autocompress.measure.engines import adapters
from autocompress.measure.engines.base import EngineLimits, RunSettings, peak_rss_bytes
from autocompress.measure.events import PROGRESS  # stderr lines the parent reads as progress events


def _cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process), for ``other_cpu``."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = sum(v[:3]) + sum(v[5:8])  # user nice system + irq softirq steal (idle, iowait excluded)
    t = os.times()
    return busy / hz, t.user + t.system


def emit(event: str, **fields) -> None:
    """One progress event on stderr, for the parent process to render (the worker renders nothing)."""
    sys.stderr.write(PROGRESS + json.dumps({"event": event, **fields}) + "\n")
    sys.stderr.flush()


def run_workload(eng, w: dict, settings, seed: int) -> dict:
    """One workload on a loaded engine: its ``Measurement`` as a dict, with ``other_cpu``."""
    wl = Workload(name=w["name"], concurrency=w["concurrency"], mode=w["mode"], input_tokens=w["input_tokens"],
                  output_tokens=w["output_tokens"], prefix_cache=w.get("prefix_cache", 0.0))
    s = RunSettings(warmup=w.get("warmup", settings.warmup), iterations=w.get("iterations", settings.iterations),
                    requests=w.get("requests", settings.requests),
                    target_se=w.get("target_se", settings.target_se), max_s=w.get("max_s", settings.max_s))
    t0, (busy0, own0) = time.perf_counter(), _cpu_seconds()
    emit("workload", name=wl.name, mode=wl.mode)
    m = eng.run(wl, seed=seed, settings=s, tick=lambda done, total: emit("tick", done=done, total=total))
    wall, (busy1, own1) = time.perf_counter() - t0, _cpu_seconds()
    d = asdict(m)
    # CPU used by other processes while this workload ran, in cores: a busy neighbour on a
    # 2-core host slows OpenMP decoding several-fold, so such a run must be redone
    d["other_cpu"] = max(0.0, ((busy1 - busy0) - (own1 - own0)) / wall)
    d["loadavg_after"] = os.getloadavg()[0]
    return d


MEMORY_SOURCES = {  # what ``peak_memory_bytes`` is, by where it came from (the reports quote it)
    "host-rss": "the serving process's peak resident memory (VmHWM)",
    "gpu-need": ("the engine's measured need on the device: for vLLM its non-KV memory from its start-up profile "
                 "+ the KV blocks in use at the busiest step; for transformers torch's peak allocation"),
    "gpu-device": "the device memory the engine held beyond its CUDA context (for vLLM, its whole share)",
}


def memory_figure(kind: str, measurements: list[dict], rss: int) -> dict:
    """The memory a bound is judged on, and its source (``MEMORY_SOURCES``): on the CPU the host
    peak RSS; on a GPU the engine's measured need (``engines.gpu_memory``), the largest over the
    workloads, else its device footprint (an upper bound), never host RAM."""
    if kind != "gpu":
        return {"peak_memory_bytes": rss, "memory_source": "host-rss"}
    if not measurements:  # a paired engine (``--commands``) times chunks: its memory is nobody's figure
        return {"peak_memory_bytes": None, "memory_source": None}
    need = [m["memory"].get("need_bytes") for m in measurements if m["memory"].get("need_bytes")]
    dev = [m["memory"].get("device_bytes") for m in measurements if m["memory"].get("device_bytes")]
    if need:
        return {"peak_memory_bytes": max(need), "memory_source": "gpu-need", "device_bytes": max(dev, default=None)}
    if dev:
        return {"peak_memory_bytes": max(dev), "memory_source": "gpu-device", "device_bytes": max(dev)}
    raise RuntimeError("a GPU engine reported no device memory: a memory bound cannot be judged on host RAM")


def peak_memory(result: dict) -> int:
    """A worker result's memory figure (``memory_figure``); results written before it had only
    the host peak RSS, which is what they measured (all on the CPU)."""
    got = result["peak_memory_bytes"] if "peak_memory_bytes" in result else result["peak_rss_bytes"]
    if got is None:
        raise ValueError("this engine run measured no workload on the GPU: it has no memory figure")
    return int(got)


def run_request(req: dict, commands=None) -> dict:
    """Load the engine and run ``req``'s workloads. ``commands`` (an iterable of JSON lines, e.g.
    stdin): after the workloads, keep the engine loaded and run one workload per line
    (``{"workload": {...}, "out": PATH, "seed": N}``), writing each result to its ``out`` and then
    emitting ``done``; an empty line or end of input ends it. This is ``measure.paired``'s engine:
    two of them stay loaded and take turns every few seconds."""
    target = Target(**req["target"])
    limits = EngineLimits(**req["limits"])
    settings = RunSettings(**req.get("settings", {}))
    load_before = os.getloadavg()
    out = {"model_dir": req["model_dir"], "measurements": [], "load_before": load_before}
    t0 = time.perf_counter()
    emit("load", engine=target.engine)
    with adapters.open_engine(target.engine).load(req["model_dir"], target, limits) as eng:
        out["load_s"] = round(time.perf_counter() - t0, 3)
        emit("loaded", seconds=out["load_s"])
        for w in req["workloads"]:
            out["measurements"].append(run_workload(eng, w, settings, req.get("seed", 0)))
        for line in commands or ():
            if not line.strip():
                break
            cmd = json.loads(line)
            d = run_workload(eng, cmd["workload"], settings, cmd.get("seed", 0))
            with open(cmd["out"] + ".tmp", "w") as f:
                json.dump(d, f)
            os.replace(cmd["out"] + ".tmp", cmd["out"])
            emit("done", out=cmd["out"])
        out["block_size"] = getattr(eng, "block_size", None)
        out["num_kv_blocks"] = getattr(eng, "num_kv_blocks", None)
        kind = getattr(eng, "kind", "cpu")
    out["peak_rss_bytes"] = peak_rss_bytes()  # VmHWM: the whole process
    out.update(memory_figure(kind, out["measurements"], out["peak_rss_bytes"]))
    out["load_after"] = os.getloadavg()
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    req = json.loads(open(argv[0]).read())
    res = run_request(req, sys.stdin if "--commands" in argv[2:] else None)
    tmp = argv[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
