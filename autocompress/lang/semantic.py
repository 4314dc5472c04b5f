"""Meaning checks across values: what the grammar and the schema cannot see.

Each check reads the projection (SI units) and reports at the span of the value to change,
naming the value it conflicts with. Hardware facts (fp8 support, memory size) come from
``catalog.hardware``.
"""

from __future__ import annotations

from autocompress.catalog.hardware import HARDWARE
from autocompress.diagnostics import Diagnostic
from autocompress.lang.lower import Projection
from autocompress.lang.units import render


def check(p: Projection) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    err = lambda span, msg, hint="", code="conflict": out.append(Diagnostic(span, msg, hint, "error", code))  # noqa: E731
    warn = lambda span, msg, hint="", code="warning": out.append(Diagnostic(span, msg, hint, "warning", code))  # noqa: E731
    d, sp = p.data, p.spans
    t = d.get("target", {})
    hw = t.get("hardware")
    engine, prec, kv = t.get("engine"), t.get("precision"), t.get("kv_cache")
    tp = t.get("tensor_parallel", 1)

    # --- search: one budget (router steps, or router v2's tokens)
    srch = d.get("search") or {}
    if "steps" in srch and "tokens" in srch:
        later = max((sp[("search", "steps")], "steps"), (sp[("search", "tokens")], "tokens"))
        err(later[0], "search has both 'steps' and 'tokens': give one budget",
            "steps N: router steps; tokens N: router v2's budget in tokens (steps = tokens / tokens per step)")

    # --- target
    if kv == "fp8" and engine == "transformers":
        err(sp[("target", "kv_cache")], "kv_cache fp8 is not supported by the transformers engine",
            "use 'engine vllm', or drop 'kv_cache fp8'", "unsupported")
    if isinstance(hw, str):
        dev = HARDWARE.get(hw)
        no_fp8 = dev is not None and dev.flops_fp8 is None  # an unknown name is reported by lower
        for key, val in (("precision", prec), ("kv_cache", kv)):
            if val == "fp8" and no_fp8 and not (key == "kv_cache" and hw == "cpu"):
                err(sp[("target", key)], f"{hw} has no fp8 support: {key} fp8 cannot run there",
                    "use bf16 (or fp16) on this hardware, or pick hardware with fp8 (h100-sxm, l40s, rtx-5080, ...)",
                    "unsupported")
        if hw == "cpu" and prec in ("bf16", "fp16"):
            out.append(Diagnostic(sp[("target", "precision")],
                                  f"{prec} on cpu: bf16 matmul is ~300x slower than fp32 on these CPUs "
                                  "(no AVX512-BF16)", "use 'precision fp32' on cpu", "warning", "slow"))
        if isinstance(tp, int) and tp > 1 and hw == "cpu":
            err(sp[("target", "tensor_parallel")], f"tensor_parallel {tp} needs several GPUs; cpu runs unsharded",
                "use tensor_parallel 1 (or drop it) on cpu", "unsupported")
        mem = t.get("memory", {}).get("bytes")
        if dev is not None and isinstance(mem, int) and mem > dev.memory_bytes * max(1, tp if isinstance(tp, int) else 1):
            total = dev.memory_bytes * max(1, tp)
            err(sp[("target", "memory", "bytes")],
                f"the memory limit ({render(mem, 'size')}) is larger than the {hw}'s memory "
                f"({render(total, 'size')}{f' over {tp} devices' if tp > 1 else ''})",
                f"use at most 'memory <= {render(total, 'size')}', or drop the limit to use the whole device",
                "conflict")
    elif isinstance(hw, dict):
        mem, cap = t.get("memory", {}).get("bytes"), hw.get("memory_bytes")
        if isinstance(mem, int) and isinstance(cap, int) and mem > cap * max(1, tp):
            err(sp[("target", "memory", "bytes")],
                f"the memory limit ({render(mem, 'size')}) is larger than the device '{hw.get('name')}' "
                f"({render(cap, 'size')})", "lower the limit, or drop it to use the whole device", "conflict")
        if prec == "fp8" and "hardware" in t and "fp8_flops" not in hw:
            err(sp[("target", "precision")], f"precision fp8 on custom hardware '{hw.get('name')}' that states no fp8 compute",
                "add 'fp8 <N> TFLOPS' to the hardware block, or use bf16", "unsupported")
    if isinstance(tp, int) and tp > 1 and engine == "transformers":
        err(sp[("target", "tensor_parallel")], f"tensor_parallel {tp} is not supported by the transformers engine",
            "use 'engine vllm' for tensor parallelism, or tensor_parallel 1", "unsupported")

    # --- workloads
    names: dict[str, int] = {}
    spec_has_bound = "memory" in t or any(w.get("bounds") for w in d.get("workloads", []))
    any_bound = "memory" in t
    for i, w in enumerate(d.get("workloads", [])):
        path = ("workloads", i)
        name = w.get("name", "?")
        if name in names:
            err(sp[path], f"duplicate workload name '{name}' (the first is at line {sp[('workloads', names[name])].line})",
                "give each workload its own name", "duplicate")
        else:
            names[name] = i
        has_c, has_b = "concurrency" in w or path + ("concurrency",) in p.failed, "batch" in w or path + ("batch",) in p.failed
        if has_c and has_b:
            later = max((sp[path + ("concurrency",)], "concurrency"), (sp[path + ("batch",)], "batch"))
            err(later[0], f"workload '{name}' has both 'concurrency' and 'batch': give exactly one",
                "concurrency N: N requests streaming in (online serving); batch N: N prompts generated "
                "together (offline)", "conflict")
        elif not has_c and not has_b:
            err(sp[path], f"workload '{name}' has neither 'concurrency' nor 'batch': give exactly one",
                "add e.g. 'concurrency 1' (online serving) or 'batch 8' (offline generation)", "missing")
        bounds = w.get("bounds", [])
        any_bound = any_bound or bool(bounds)
        if not bounds and spec_has_bound and not any(k[:3] == path + ("bounds",) for k in p.failed):
            warn(sp[path], f"workload '{name}' states no bound: it will be reported but not optimised for",
                 "add e.g. 'ttft <= 200 ms' or 'throughput >= 1000 tok/s'", "no-bound")
        out_tok = w.get("output_tokens")
        by_metric: dict[tuple, tuple[float, tuple]] = {}
        for j, b in enumerate(bounds):
            bpath = path + ("bounds", j)
            metric, op = b.get("metric"), b.get("op")
            if metric == "throughput" and op == "<=":
                err(sp[bpath + ("op",)], "throughput is a lower bound: write 'throughput >= ...'",
                    "'<=' would ask for a slow model", "wrong-operator")
            elif metric != "throughput" and op == ">=":
                err(sp[bpath + ("op",)], f"{metric} is an upper bound (a latency): write '{metric} <= ...'",
                    "'>=' would ask for a slow model", "wrong-operator")
            if metric == "tpot" and out_tok == 1:
                err(sp[bpath], "a tpot bound needs at least 2 output tokens: with 'output 1 tokens' there is no "
                    "time per output token after the first", "drop the tpot bound, or bound ttft / e2e", "conflict")
            if "value" in b:
                by_metric[(metric, b.get("percentile"))] = (b["value"], bpath)
        for pct in {k[1] for k in by_metric}:
            e2e = by_metric.get(("e2e", pct))
            if e2e is None:
                continue
            ttft = by_metric.get(("ttft", pct))
            if ttft and ttft[0] >= e2e[0]:
                err(sp[ttft[1]], f"contradictory bounds: ttft <= {render(ttft[0], 'time')} is not below "
                    f"e2e <= {render(e2e[0], 'time')} (line {sp[e2e[1]].line}); the first token comes before the last",
                    "lower ttft or raise e2e", "contradiction")
            tpot = by_metric.get(("tpot", pct))
            if tpot and isinstance(out_tok, int) and out_tok > 1 and tpot[0] * (out_tok - 1) >= e2e[0]:
                err(sp[tpot[1]], f"contradictory bounds: tpot <= {render(tpot[0], 'time')} over {out_tok - 1} tokens "
                    f"after the first allows {render(tpot[0] * (out_tok - 1), 'time')}, not below "
                    f"e2e <= {render(e2e[0], 'time')} (line {sp[e2e[1]].line})",
                    "lower tpot or raise e2e; e2e ~ ttft + tpot * (output - 1)", "contradiction")
    if d.get("workloads") and not any_bound and not any(k[:1] == ("workloads",) and "bounds" in k for k in p.failed) \
            and ("target", "memory", "bytes") not in p.failed:
        err(sp[("workloads", 0)], "the contract states no bound: add a latency, throughput or memory bound",
            "e.g. 'ttft <= 200 ms' in a workload, or 'memory <= 8 GiB' in target", "no-bound")
    return out

