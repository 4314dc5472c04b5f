"""Range and shape checks: JSON Schema (Draft 2020-12) on the lowered projection.

``specs/acspec.schema.json`` holds the rules (concurrency 1..65536, prefix_cache below 100%,
tensor_parallel in {1, 2, 4, 8}, ...) and, per value, an ``x-error`` message. Every error is
mapped back to the span of the offending value through the projection's path -> span table and
gets ", got <what the user wrote>". Values that lowering already rejected are not reported twice.
"""

from __future__ import annotations

import functools

import jsonschema

from autocompress import _resources
from autocompress.diagnostics import Diagnostic, Span
from autocompress.lang.lower import TOP, Projection

_SETTING = {"input_tokens": "input", "output_tokens": "output", "memory_bytes": "memory",
            "bandwidth_bytes_s": "bandwidth", "flops": "compute", "fp8_flops": "fp8", "fp32_flops": "fp32"}
_EXAMPLE = {
    ("target", "hardware"): "hardware rtx-5080' (or an inline 'hardware custom \"name\" { ... }')",
    ("target", "engine"): "engine vllm' (vllm or transformers)",
    ("target", "precision"): "precision bf16' (fp32, bf16, fp16 or fp8)",
    ("workload", "input"): "input 512 tokens", ("workload", "output"): "output 64 tokens",
    ("custom hardware", "memory"): "memory 24 GiB", ("custom hardware", "bandwidth"): "bandwidth 1008 GB/s",
    ("custom hardware", "compute"): "compute 165 TFLOPS",
}


@functools.lru_cache(maxsize=1)
def validator():
    return jsonschema.Draft202012Validator(_resources.schema("acspec.schema.json"))


def _span(p: Projection, path: tuple) -> Span:
    while path:
        if path in p.spans:
            return p.spans[path]
        path = path[:-1]
    return TOP


def _block_name(path: tuple) -> str:
    if not path:
        return "spec"
    if path[0] == "workloads":
        return "custom hardware" if "hardware" in path else "workload"
    return "custom hardware" if path[-1] == "hardware" else str(path[0])


def check(p: Projection) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for err in validator().iter_errors(p.data):
        path = tuple(err.absolute_path)
        if any(path[:i] in p.failed for i in range(len(path) + 1)):
            continue
        if err.validator == "required":
            for missing in sorted(set(err.validator_value) - set(err.instance)):
                if path + (missing,) in p.failed:
                    continue
                out.append(_required(p, path, missing))
            continue
        if err.validator == "uniqueItems":
            continue  # duplicate axes: reported by lowering
        message = err.schema.get("x-error") if isinstance(err.schema, dict) else None
        if message is None:
            message = f"{'.'.join(map(str, path)) or 'spec'}: {err.message}"
        got = p.texts.get(path)
        if got is not None:
            message += f", got {got}"
        out.append(Diagnostic(_span(p, path), message, "", "error", "out-of-range"))
    return list(dict.fromkeys(out))  # 'required' errors come once per missing property


def _required(p: Projection, path: tuple, missing: str) -> Diagnostic:
    block = _block_name(path)
    setting = _SETTING.get(missing, missing)
    if not path:
        if missing == "model":
            return Diagnostic(TOP, "the spec has no 'model': which model should be compressed?",
                              'add e.g. model "smollm2-135m" (a built-in alias, a Hugging Face folder, '
                              "a .gguf file or a config.json)", "error", "missing")
        return Diagnostic(TOP, f"the spec has no '{setting}' block: where will the model be served?",
                          "add e.g. target { hardware rtx-5080  engine vllm  precision bf16 }", "error", "missing")
    where = f"workload '{p.texts.get(path + ('name',), '?')}'" if block == "workload" else f"the {block} block"
    example = _EXAMPLE.get((block, setting))
    if example and not example.endswith(")"):
        example += "'"
    return Diagnostic(_span(p, path), f"{where} has no '{setting}'", f"add e.g. '{example}" if example else "",
                      "error", "missing")
