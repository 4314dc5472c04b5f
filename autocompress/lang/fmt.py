"""Canonical text of a spec: ``parse_spec(format_spec(x)) == parse_spec(x)``, idempotent.

Sections in a fixed order (model, target, workloads in their order, search, distill, evaluate,
output), two-space indent, settings aligned, each value in the shortest unit that reads back
exactly ('15 ms', '512 MiB', '2M tokens'). Settings equal to their default are omitted
(kv_cache equal to the derived default, tensor_parallel 1, prefix_cache 0%).

Comments are kept (``comments``: attached by position to the AST nodes they belong to).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

from autocompress.diagnostics import SpecError
from autocompress.lang.comments import Comment, Notes, collect_comments, comment_lines
from autocompress.lang.load import parse_spec, read_spec_file
from autocompress.lang.model import CustomDevice, Spec, default_kv
from autocompress.lang.units import fmt_number, render



def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


# ------------------------------------------------------------------------------------------
# Layout


@dataclass
class _Row:
    key: str
    value: str | None  # None: omitted (equal to its default); its comments move to the next row
    node: tuple
    rows: list[_Row] | None = None  # a nested block (the inline device): value is its head


def _split_trail(notes: Notes, node: tuple, lead: list[Comment]) -> tuple[list[Comment], str]:
    """Leading comments and the end-of-line text of a node. One line holds one comment: when a
    node had several (a setting written over several lines), the others go before it."""
    lead = lead + notes.take(node, "lead")
    trail = notes.take(node, "trail")
    lead += [Comment(c.text, c.line) for c in trail[:-1]]
    return lead, ("  " + trail[-1].text if trail else "")


def _block(head: str, node: tuple, rows: list[_Row], notes: Notes, indent: str = "",
           lead: list[Comment] | None = None) -> list[str]:
    lead, tail = _split_trail(notes, node, lead or [])
    out = comment_lines(lead, indent) + [f"{indent}{head} {{{tail}"]
    inner = indent + "  "
    width = max((len(r.key) for r in rows if r.value is not None and r.rows is None), default=0)
    pending: list[Comment] = []
    body: list[tuple[str, str] | list[str]] = []  # (row, its comment) or lines as they are
    for r in rows:
        if r.value is None:
            pending += notes.take(r.node, "lead") + [Comment(c.text, c.line) for c in notes.take(r.node, "trail")]
            continue
        if r.rows is not None:
            body.append(_block(f"{r.key} {r.value}", r.node, r.rows, notes, inner, pending))
            pending = []
            continue
        before, tail = _split_trail(notes, r.node, pending)
        pending = []
        if before:
            body.append(comment_lines(before, inner))
        body.append((f"{inner}{r.key.ljust(width)} {r.value}".rstrip(), tail))
    col = max((len(b[0]) for b in body if isinstance(b, tuple) and b[1]), default=0)
    for b in body:
        if isinstance(b, list):
            out += b
        else:
            text, tail = b
            out.append(text.ljust(col) + tail if tail else text)
    after = notes.take(node, "after")
    closing = pending + notes.take(node, "inner") + [Comment(c.text, c.line) for c in after[:-1]]
    out += comment_lines(closing, inner)
    out.append(indent + "}" + ("  " + after[-1].text if after else ""))
    return out


def _line(text: str, node: tuple, notes: Notes) -> list[str]:
    lead, tail = _split_trail(notes, node, [])
    return comment_lines(lead, "") + [text + tail]


def _source_of(spec: Spec) -> str | None:
    """The text of the file ``spec`` was loaded from, if it still says exactly that (comments are
    taken from it; ``acc fmt`` formats a loaded Spec)."""
    path = spec.path
    if not path or path.startswith("<") or not os.path.isfile(path):
        return None
    try:
        text = read_spec_file(path)
        same = parse_spec(text, path) == spec
    except SpecError:  # unreadable now, or no longer a valid spec
        same, text = False, ""
    if not same:
        warnings.warn(f"{path} changed since this spec was loaded: formatted without its comments "
                      "(pass source= to keep them)", stacklevel=3)
        return None
    return text if "#" in text else None


def format_spec(spec_or_source, base_dir: str | None = None, *, source: str | None = None) -> str:
    """The canonical text of a Spec or of a spec's source, with the source's comments.

    For a Spec, the comments come from ``source`` (the text it was parsed from) or else from the
    file it was loaded from (``spec.path``) when that file still describes the same spec."""
    if isinstance(spec_or_source, str):
        source = spec_or_source
        spec = parse_spec(source, base_dir=base_dir)
    else:
        spec = spec_or_source
        if source is None:
            source = _source_of(spec)
    assert isinstance(spec, Spec), type(spec)
    notes = (collect_comments(source) if source is not None else None) or Notes()

    sections: list[list[str]] = [_line(f"model {_q(spec.parent.value)}", ("model",), notes)]

    t = spec.target
    rows: list[_Row] = []
    if isinstance(t.hardware, CustomDevice):
        h = t.hardware
        hid = ("target", "hardware")
        dev = [_Row("memory", render(h.memory_bytes, "size"), hid + ("memory",)),
               _Row("bandwidth", render(h.bandwidth_bytes_s, "bandwidth"), hid + ("bandwidth",)),
               _Row("compute", render(h.flops, "compute"), hid + ("compute",))]
        if h.fp8_flops is not None:
            dev.append(_Row("fp8", render(h.fp8_flops, "compute"), hid + ("fp8",)))
        if h.fp32_flops is not None:
            dev.append(_Row("fp32", render(h.fp32_flops, "compute"), hid + ("fp32",)))
        rows.append(_Row("hardware", f"custom {_q(h.name)}", hid, dev))
    else:
        rows.append(_Row("hardware", t.hardware, ("target", "hardware")))
    rows += [_Row("engine", t.engine, ("target", "engine")),
             _Row("precision", t.weight_precision, ("target", "precision")),
             _Row("kv_cache", t.kv_precision if t.kv_precision != default_kv(t.weight_precision) else None,
                  ("target", "kv_cache")),
             _Row("tensor_parallel", str(t.tensor_parallel) if t.tensor_parallel != 1 else None,
                  ("target", "tensor_parallel"))]
    if t.memory_limit_bytes is not None:
        rows.append(_Row("memory", "<= " + render(t.memory_limit_bytes, "size"), ("target", "memory")))
    if t.profile is not None:
        rows.append(_Row("profile", _q(t.profile), ("target", "profile")))
    sections.append(_block("target", ("target",), rows, notes))

    for w in spec.workloads:
        wid = ("workload", w.name)
        mode = "batch" if w.mode == "batch" else "concurrency"
        rows = [_Row(mode, str(w.concurrency), wid + (mode,)),
                _Row("input", render(w.input_tokens, "tokens"), wid + ("input",)),
                _Row("output", render(w.output_tokens, "tokens"), wid + ("output",)),
                _Row("prefix_cache", render(w.prefix_cache, "share") if w.prefix_cache else None,
                     wid + ("prefix_cache",))]
        for i, b in enumerate(w.bounds):
            key = b.metric + (f" p{fmt_number(b.percentile)}" if b.percentile is not None else "")
            rows.append(_Row(key, f"{b.op} {render(b.value, 'rate' if b.metric == 'throughput' else 'time')}",
                             wid + ("bound", i)))
        sections.append(_block(f"workload {w.name}", wid, rows, notes))

    if spec.search is not None:
        s = spec.search
        rows = []
        if s.strategy is not None:
            rows.append(_Row("strategy", s.strategy, ("search", "strategy")))
        if s.axes is not None:
            rows.append(_Row("axes", ", ".join(s.axes), ("search", "axes")))
        for k in ("steps", "seed", "temperature", "finalists"):
            v = getattr(s, k)
            if v is not None:
                rows.append(_Row(k, fmt_number(v), ("search", k)))
        if s.tokens is not None:
            rows.append(_Row("tokens", render(s.tokens, "tokens"), ("search", "tokens")))
        sections.append(_block("search", ("search",), rows, notes))
    if spec.distill is not None:
        d = spec.distill
        rows = []
        if d.data is not None:
            rows.append(_Row("data", ", ".join(_q(x) for x in d.data), ("distill", "data")))
        if d.steps is not None:
            rows.append(_Row("steps", str(d.steps), ("distill", "steps")))
        if d.tokens is not None:
            rows.append(_Row("tokens", render(d.tokens, "tokens"), ("distill", "tokens")))
        if d.seq_len is not None:
            rows.append(_Row("seq_len", render(d.seq_len, "tokens"), ("distill", "seq_len")))
        if d.batch is not None:
            rows.append(_Row("batch", str(d.batch), ("distill", "batch")))
        if d.lr is not None:
            rows.append(_Row("lr", fmt_number(d.lr), ("distill", "lr")))
        sections.append(_block("distill", ("distill",), rows, notes))
    if spec.evaluate is not None:
        e = spec.evaluate
        rows = []
        if e.data is not None:
            rows.append(_Row("data", ", ".join(_q(x) for x in e.data), ("evaluate", "data")))
        if e.tokens is not None:
            rows.append(_Row("tokens", render(e.tokens, "tokens"), ("evaluate", "tokens")))
        sections.append(_block("evaluate", ("evaluate",), rows, notes))
    if spec.output is not None:
        sections.append(_line(f"output {_q(spec.output)}", ("output",), notes))

    out: list[str] = []
    if notes.header:
        out += comment_lines(notes.header, "") + [""]
    for i, lines in enumerate(sections):
        out += ([""] if i else []) + lines
    eof = notes.eof + notes.leftover()
    if eof:
        out += [""] + comment_lines(eof, "")
    return "\n".join(out) + "\n"
