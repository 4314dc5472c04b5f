"""Canonical text of a spec: ``parse_spec(format_spec(x)) == parse_spec(x)``, idempotent.

Sections in a fixed order (model, target, workloads in their order, search, distill, evaluate,
output), two-space indent, settings aligned, each value in the shortest unit that reads back
exactly ('15 ms', '512 MiB', '2M tokens'). Settings equal to their default are omitted
(kv_cache equal to the derived default, tensor_parallel 1, prefix_cache 0%). Comments are not
kept: the formatter works from the checked Spec, not the text.
"""

from __future__ import annotations

from autocompress.spec.lower import default_kv
from autocompress.spec.model import CustomDevice, Spec
from autocompress.spec.units import fmt_number, render


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _block(head: str, rows: list[tuple[str, str]], indent: str = "  ") -> list[str]:
    width = max((len(k) for k, _ in rows if "\n" not in _), default=0)
    lines = [head + " {"]
    for k, v in rows:
        lines.append(f"{indent}{k.ljust(width)} {v}".rstrip() if "\n" not in v else f"{indent}{k} {v}")
    lines.append("}" if indent == "  " else indent[:-2] + "}")
    return lines


def format_spec(spec_or_source, base_dir: str | None = None) -> str:
    if isinstance(spec_or_source, str):
        from autocompress.spec import parse_spec

        spec = parse_spec(spec_or_source, base_dir=base_dir)
    else:
        spec = spec_or_source
    assert isinstance(spec, Spec), type(spec)
    out: list[str] = [f"model {_q(spec.parent.value)}", ""]

    t = spec.target
    rows: list[tuple[str, str]] = []
    if isinstance(t.hardware, CustomDevice):
        h = t.hardware
        dev = [("memory", render(h.memory_bytes, "size")), ("bandwidth", render(h.bandwidth_bytes_s, "bandwidth")),
               ("compute", render(h.flops, "compute"))]
        if h.fp8_flops is not None:
            dev.append(("fp8", render(h.fp8_flops, "compute")))
        if h.fp32_flops is not None:
            dev.append(("fp32", render(h.fp32_flops, "compute")))
        rows.append(("hardware", "\n".join(_block(f"custom {_q(h.name)}", dev, "    "))))
    else:
        rows.append(("hardware", t.hardware))
    rows += [("engine", t.engine), ("precision", t.weight_precision)]
    if t.kv_precision != default_kv(t.weight_precision):
        rows.append(("kv_cache", t.kv_precision))
    if t.tensor_parallel != 1:
        rows.append(("tensor_parallel", str(t.tensor_parallel)))
    if t.memory_limit_bytes is not None:
        rows.append(("memory", "<= " + render(t.memory_limit_bytes, "size")))
    if t.profile is not None:
        rows.append(("profile", _q(t.profile)))
    out += _block("target", rows) + [""]

    for w in spec.workloads:
        rows = [("batch" if w.mode == "batch" else "concurrency", str(w.concurrency)),
                ("input", render(w.input_tokens, "tokens")), ("output", render(w.output_tokens, "tokens"))]
        if w.prefix_cache:
            rows.append(("prefix_cache", render(w.prefix_cache, "share")))
        for b in w.bounds:
            key = b.metric + (f" p{fmt_number(b.percentile)}" if b.percentile is not None else "")
            rows.append((key, f"{b.op} {render(b.value, 'rate' if b.metric == 'throughput' else 'time')}"))
        out += _block(f"workload {w.name}", rows) + [""]

    if spec.search is not None:
        s = spec.search
        rows = []
        if s.strategy is not None:
            rows.append(("strategy", s.strategy))
        if s.axes is not None:
            rows.append(("axes", ", ".join(s.axes)))
        for k in ("steps", "seed", "temperature"):
            v = getattr(s, k)
            if v is not None:
                rows.append((k, fmt_number(v)))
        out += _block("search", rows) + [""]
    if spec.distill is not None:
        d = spec.distill
        rows = []
        if d.data is not None:
            rows.append(("data", ", ".join(_q(x) for x in d.data)))
        if d.steps is not None:
            rows.append(("steps", str(d.steps)))
        if d.tokens is not None:
            rows.append(("tokens", render(d.tokens, "tokens")))
        if d.seq_len is not None:
            rows.append(("seq_len", render(d.seq_len, "tokens")))
        if d.batch is not None:
            rows.append(("batch", str(d.batch)))
        if d.lr is not None:
            rows.append(("lr", fmt_number(d.lr)))
        out += _block("distill", rows) + [""]
    if spec.evaluate is not None:
        e = spec.evaluate
        rows = []
        if e.data is not None:
            rows.append(("data", ", ".join(_q(x) for x in e.data)))
        if e.tokens is not None:
            rows.append(("tokens", render(e.tokens, "tokens")))
        out += _block("evaluate", rows) + [""]
    if spec.output is not None:
        out.append(f"output {_q(spec.output)}")
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"
