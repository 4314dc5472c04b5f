"""Lowering: AST -> the spec's projection (a plain dict in SI units) -> the typed ``Spec``.

``project`` converts units and checks names (each failure a diagnostic at the value's span,
with a did-you-mean); it records for every value of the projection its span and the user's
text, so that ``schema.py`` can map a JSON-Schema error back to the source. ``Spec.from_projection``
(``model``) turns a projection that passed every check into the frozen ``Spec``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from autocompress.diagnostics import Diagnostic, Span, one_of, suggest
from autocompress.lang import ast, units
from autocompress.lang.grammar import grammar_names
from autocompress.parents.aliases import ALIASES

TOP = Span(1, 1, 1, 2)  # where "the file has no X" points

# setting -> what its value is: a unit kind, "plain", "name:<rule>", "names:<rule>", "string", "strings"
VALUE_KIND = {
    "target": {"hardware": "name:hardware_name", "engine": "name:engine_name", "precision": "name:precision_name",
               "kv_cache": "name:precision_name", "tensor_parallel": "plain", "memory": "size", "profile": "string"},
    "custom hardware": {"memory": "size", "bandwidth": "bandwidth", "compute": "compute", "fp8": "compute",
                        "fp32": "compute"},
    "workload": {"concurrency": "plain", "batch": "plain", "input": "tokens", "output": "tokens",
                 "prefix_cache": "share"},
    "search": {"strategy": "name:strategy_name", "axes": "names:axis_name", "steps": "plain", "seed": "plain",
               "temperature": "plain", "tokens": "tokens", "finalists": "plain"},
    "distill": {"data": "strings", "steps": "plain", "tokens": "tokens", "seq_len": "tokens", "batch": "plain",
                "lr": "plain"},
    "evaluate": {"data": "strings", "tokens": "tokens"},
}
# projection field names where they differ from the setting's keyword
FIELD = {("workload", "input"): "input_tokens", ("workload", "output"): "output_tokens",
         ("custom hardware", "memory"): "memory_bytes", ("custom hardware", "bandwidth"): "bandwidth_bytes_s",
         ("custom hardware", "compute"): "flops", ("custom hardware", "fp8"): "fp8_flops",
         ("custom hardware", "fp32"): "fp32_flops", ("target", "precision"): "precision"}
NAME_WHAT = {"hardware_name": "hardware", "engine_name": "engine", "precision_name": "precision",
             "strategy_name": "strategy", "axis_name": "axis"}
METRIC_KIND = {"ttft": "time", "tpot": "time", "e2e": "time", "throughput": "rate"}


def known_aliases() -> set[str]:
    return set(ALIASES)


@dataclass
class Projection:
    data: dict = field(default_factory=dict)
    spans: dict[tuple, Span] = field(default_factory=dict)  # json path -> span of the value
    texts: dict[tuple, str] = field(default_factory=dict)  # json path -> the user's text
    failed: set[tuple] = field(default_factory=set)  # paths whose value was rejected already
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def error(self, span: Span, message: str, hint: str = "", code: str = "", severity: str = "error"):
        self.diagnostics.append(Diagnostic(span, message, hint, severity, code))


def _quantity_text(q: ast.Quantity) -> str:
    return q.number.text + (("" if q.unit.text == "%" else " ") + q.unit.text if q.unit else "")


def project(file: ast.SpecFile, base_dir: str | None) -> Projection:
    p = Projection()
    seen: dict[str, ast.Section] = {}
    p.data["workloads"] = []
    p.spans[("workloads",)] = TOP
    for sec in file.sections:
        if sec.kind != "workload":
            if sec.kind in seen:
                first = seen[sec.kind]
                p.error(sec.key_span, f"duplicate '{sec.kind}' section (the first is at line {first.span.line})",
                        "a spec has one of each section, except workload", "duplicate")
                continue
            seen[sec.kind] = sec
        if sec.kind == "model":
            _parent(p, sec.label, base_dir)
        elif sec.kind == "output":
            p.data["output"] = sec.label.text
            p.spans[("output",)] = sec.label.span
        elif sec.kind == "workload":
            _workload(p, sec)
        else:
            path = (sec.kind,)
            p.spans[path] = sec.key_span
            p.data[sec.kind] = _block(p, sec.kind, sec.items, path)
    if "workloads" in p.data and not p.data["workloads"]:
        pass  # the schema's minItems reports it
    return p


def _parent(p: Projection, s: ast.String, base_dir: str | None):
    value = s.text
    base = Path(base_dir) if base_dir else Path.cwd()
    full = base / os.path.expanduser(value)
    path = ("model",)
    p.spans[path] = s.span
    p.spans[path + ("value",)] = s.span
    if value.endswith(".gguf"):
        kind = "gguf"
    elif value.endswith(".json"):
        kind = "config"
    elif "/" in value or "\\" in value or value.startswith(".") or full.is_dir():
        kind = "hf_dir"
    else:
        kind = "alias"
    p.data["model"] = {"kind": kind, "value": value}
    if kind == "alias":
        aliases = known_aliases()
        if value not in aliases:
            hint = suggest(value, aliases)
            p.error(s.span, f"unknown model alias '{value}': the built-in models are {one_of(aliases)}",
                    (hint + " " if hint else "") + "Or give a path: a local Hugging Face folder, a .gguf file or a "
                    "config.json", "unknown-name")
            p.failed.add(path)
    elif kind == "hf_dir" and not full.is_dir() or kind != "hf_dir" and not full.is_file():
        what = {"gguf": "GGUF file", "config": "config file", "hf_dir": "folder"}[kind]
        p.error(s.span, f"parent model {what} not found: {value}",
                "paths are relative to the folder of the spec file", "file-not-found")
        p.failed.add(path)


def _workload(p: Projection, sec: ast.Section):
    i = len(p.data["workloads"])
    path = ("workloads", i)
    p.spans[path] = sec.label.span
    p.texts[path + ("name",)] = sec.label.text
    p.spans[path + ("name",)] = sec.label.span
    w = {"name": sec.label.text}
    w.update(_block(p, "workload", sec.items, path))
    p.data["workloads"].append(w)


def _block(p: Projection, kind: str, items, path: tuple) -> dict:
    out: dict = {}
    first: dict[str, ast.Item] = {}
    bounds: list[dict] = []
    for it in items:
        key = it.key
        if key in first:
            where = "custom hardware block" if kind == "custom hardware" else f"{kind} block"
            p.error(it.key_span, f"duplicate '{key}' in the {where} (the first is at line {first[key].span.line})",
                    "each setting appears once per block; delete one", "duplicate")
            continue
        first[key] = it
        if isinstance(it, ast.BoundNode):
            bpath = path + ("bounds", len(bounds))
            b = _bound(p, it, bpath)
            bounds.append(b)
            continue
        if isinstance(it, ast.CustomHardware):
            hpath = path + ("hardware",)
            p.spans[hpath] = it.key_span
            dev = {"name": it.name.text}
            p.spans[hpath + ("name",)] = it.name.span
            dev.update(_block(p, "custom hardware", it.settings, hpath))
            out["hardware"] = dev
            continue
        name = FIELD.get((kind, key), key)
        vpath = path + (name,)
        if isinstance(it, ast.Limit):  # memory <= 512 MiB
            p.spans[vpath] = it.key_span
            p.spans[vpath + ("op",)] = it.op_span
            p.texts[vpath + ("op",)] = it.op
            val = _convert(p, it.quantity, "size", key, vpath + ("bytes",))
            out[name] = {"op": it.op}
            if val is not None:
                out[name]["bytes"] = val
            continue
        val = _value(p, kind, key, it.value, vpath)
        if val is not None:
            out[name] = val
    if bounds or kind == "workload":
        out["bounds"] = bounds
        p.spans.setdefault(path + ("bounds",), p.spans.get(path, TOP))
    return out


def _bound(p: Projection, b: ast.BoundNode, path: tuple) -> dict:
    p.spans[path] = b.span
    for k in ("metric", "op"):
        p.spans[path + (k,)] = b.op_span if k == "op" else b.key_span
    p.texts[path + ("op",)] = b.op
    out = {"metric": b.metric, "op": b.op, "percentile": None}
    if b.percentile:
        p.spans[path + ("percentile",)] = b.percentile_span or b.key_span
        p.texts[path + ("percentile",)] = b.percentile
        out["percentile"] = float(b.percentile[1:])
    val = _convert(p, b.quantity, METRIC_KIND[b.metric], b.metric, path + ("value",))
    if val is not None:
        out["value"] = val
    return out


def _convert(p: Projection, q: ast.Quantity, kind: str, what: str, path: tuple):
    p.spans[path] = q.span
    p.texts[path] = _quantity_text(q)
    value, problem = units.convert(q.number.text, q.unit.text if q.unit else None, kind, what)
    if problem:
        span = q.unit.span if problem.where == "unit" and q.unit else q.span
        p.error(span, problem.message, problem.hint, problem.code)
        p.failed.add(path)
        return None
    return value


def _value(p: Projection, kind: str, key: str, v, path: tuple):
    vk = VALUE_KIND[kind][key]
    if vk == "plain":
        p.spans[path] = v.span
        p.texts[path] = v.text
        value, problem = units.plain(v.text, key)
        if problem:
            p.error(v.span, problem.message, problem.hint, problem.code)
            p.failed.add(path)
        return value
    if vk == "string":
        p.spans[path] = v.span
        return v.text
    if vk == "strings":
        p.spans[path] = v[0].span
        for i, s in enumerate(v):
            p.spans[path + (i,)] = s.span
        return [s.text for s in v]
    if vk.startswith("name:"):
        return _name(p, vk[5:], v, path)
    if vk.startswith("names:"):
        p.spans[path] = v[0].span
        out, seen = [], {}
        for i, n in enumerate(v):
            got = _name(p, vk[6:], n, path + (i,))
            if n.text in seen:
                p.error(n.span, f"duplicate axis '{n.text}' (already listed)", "list each axis once", "duplicate")
                p.failed.add(path)
            seen[n.text] = True
            if got is not None:
                out.append(got)
        return out
    if isinstance(v, ast.Quantity):
        return _convert(p, v, vk, key, path)
    p.error(v.span, f"{key} needs a value with a unit", "", "syntax")  # pragma: no cover (grammar)
    return None


def _name(p: Projection, rule: str, n: ast.Name, path: tuple):
    p.spans[path] = n.span
    p.texts[path] = n.text
    allowed = grammar_names(rule)
    if n.text in allowed:
        return n.text
    what = NAME_WHAT[rule]
    hint = suggest(n.text, allowed)
    if rule == "hardware_name" and not hint:
        hint = "for other hardware: hardware custom \"name\" { memory 24 GiB  bandwidth 1008 GB/s  compute 165 TFLOPS }"
    p.error(n.span, f"unknown {what} '{n.text}': expected one of {', '.join(allowed)}", hint, "unknown-name")
    p.failed.add(path)
    return None
