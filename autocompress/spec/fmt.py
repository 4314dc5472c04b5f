"""Canonical text of a spec: ``parse_spec(format_spec(x)) == parse_spec(x)``, idempotent.

Sections in a fixed order (model, target, workloads in their order, search, distill, evaluate,
output), two-space indent, settings aligned, each value in the shortest unit that reads back
exactly ('15 ms', '512 MiB', '2M tokens'). Settings equal to their default are omitted
(kv_cache equal to the derived default, tensor_parallel 1, prefix_cache 0%).

Comments are kept. The values come from the checked Spec; the comments come from the source
text, attached by position to the AST node they belong to (the nodes carry spans, so nothing
extra happens while parsing, and ``acc check`` pays nothing for this):
  * a comment on a line of its own belongs to the next section or setting (printed before it,
    with its indent), or to the closing '}' of its block when nothing follows in the block, or
    to the end of the file; the comments before the first section down to its last blank line
    are the file's header and stay at the top;
  * an end-of-line comment belongs to the last section or setting started before it on the text,
    and stays at the end of that one's line (comments of one block aligned, two spaces after the
    widest commented row); after a block's '}' it stays after the '}' (after a one-line block's
    '}': on its header line, since the block is printed over several lines);
  * comments of a setting the canonical form omits move to the next row of its block.
Blank lines between sections are normalized (one); a blank line between two comments is kept.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass

from autocompress.spec.lower import default_kv
from autocompress.spec.model import CustomDevice, Spec
from autocompress.spec.units import fmt_number, render

# A string (a '#' inside it is text) or a comment; in a file that parses, every '"' outside a
# comment opens a STRING token and every '#' outside a string opens a COMMENT, as in the grammar.
_STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*')
_BLOCKS = ("target", "workload", "search", "distill", "evaluate")


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


# ------------------------------------------------------------------------------------------
# Comments: collected from the source and attached to AST nodes by position


@dataclass(frozen=True)
class _Comment:
    text: str  # '# ...' without trailing whitespace
    line: int
    blank: bool = False  # a blank line right before it (kept between two comments)


class _Notes:
    """Comments by node: node id -> where -> comments. Node ids: ('target',), ('workload', name),
    ('target', 'memory'), ('workload', name, 'bound', i), ('target', 'hardware', 'fp8').
    where: 'lead' (own lines before the node), 'trail' (end of its first line), 'inner' (own
    lines before its closing '}'), 'after' (after its '}')."""

    def __init__(self) -> None:
        self.at: dict[tuple, list[_Comment]] = {}
        self.header: list[_Comment] = []
        self.eof: list[_Comment] = []

    def add(self, node: tuple, where: str, c: _Comment) -> None:
        self.at.setdefault((node, where), []).append(c)

    def take(self, node: tuple, where: str) -> list[_Comment]:
        return self.at.pop((node, where), [])

    def leftover(self) -> list[_Comment]:
        """Comments of nodes the canonical form never printed (none, for a source that matches
        the spec): they go to the end of the file rather than being lost."""
        rest = sorted((c for cs in self.at.values() for c in cs), key=lambda c: c.line)
        self.at.clear()
        return rest


def _section_id(sec) -> tuple:
    return ("workload", sec.label.text) if sec.kind == "workload" else (sec.kind,)


def _events(file) -> list[tuple[tuple[int, int], str, tuple, int]]:
    """(position, 'start' | 'close', node id, line of the node's start), in text order."""
    from autocompress.spec import ast

    ev: list[tuple[tuple[int, int], str, tuple, int]] = []

    def node(n, nid: tuple, closes: bool) -> None:
        s = n.span
        ev.append(((s.line, s.column), "start", nid, s.line))
        if closes:
            ev.append(((s.end_line, s.end_column - 1), "close", nid, s.line))

    for sec in file.sections:
        sid = _section_id(sec)
        node(sec, sid, sec.kind in _BLOCKS)
        bounds = 0
        for it in sec.items:
            if isinstance(it, ast.BoundNode):
                node(it, sid + ("bound", bounds), False)
                bounds += 1
            elif isinstance(it, ast.CustomHardware):
                hid = sid + ("hardware",)
                node(it, hid, True)
                for sub in it.settings:
                    node(sub, hid + (sub.key,), False)
            else:
                node(it, sid + (it.key,), False)
    ev.sort(key=lambda e: e[0])
    return ev


def collect_comments(source: str) -> _Notes | None:
    """The comments of ``source`` attached to its nodes (none without a '#'); None if it does not parse."""
    notes = _Notes()
    if "#" not in source:
        return notes
    from autocompress.spec.parser import parse_ast

    file, _ = parse_ast(source)
    if file is None:
        return None
    events = _events(file)
    positions = [e[0] for e in events]
    starts = [0] + [m.end() for m in re.finditer("\n", source)]  # offset of each line
    lines = source.split("\n")

    def blank(line: int) -> bool:  # is 1-based line `line` empty (0 and below: no)
        return line >= 1 and not lines[line - 1].strip()

    for m in _STRING_OR_COMMENT.finditer(source):
        if m.group().startswith('"'):
            continue
        line = bisect.bisect_right(starts, m.start())
        col = m.start() - starts[line - 1] + 1
        own_line = not source[starts[line - 1]:m.start()].strip()
        c = _Comment(m.group().rstrip(), line, own_line and blank(line - 1))
        if own_line:
            i = bisect.bisect_right(positions, (line, col))
            if i == len(events):
                notes.eof.append(c)
            else:
                _, kind, nid, _ = events[i]
                notes.add(nid, "lead" if kind == "start" else "inner", c)
        else:
            i = bisect.bisect_left(positions, (line, col)) - 1
            if i < 0:  # cannot happen: code before it on its line started some node
                notes.eof.append(c)
                continue
            pos, kind, nid, first = events[i]
            if kind == "close" and first != pos[0]:
                notes.add(nid, "after", c)
            else:  # after a one-line block's '}': on the header line it will have
                notes.add(nid, "trail", c)

    # The file's header: the comments before the first section down to its last blank line.
    if file.sections:
        sec = file.sections[0]
        lead = notes.at.get((_section_id(sec), "lead"), [])
        after_blank = [lead[k + 1].blank if k + 1 < len(lead) else blank(sec.span.line - 1) for k in range(len(lead))]
        if True in after_blank:
            k = len(after_blank) - 1 - after_blank[::-1].index(True)
            notes.header, lead[:] = lead[:k + 1], lead[k + 1:]
    return notes


def _comment_lines(cs: list[_Comment], indent: str) -> list[str]:
    out: list[str] = []
    for i, c in enumerate(cs):
        if i and c.blank:
            out.append("")
        out.append(indent + c.text)
    return out


# ------------------------------------------------------------------------------------------
# Layout


@dataclass
class _Row:
    key: str
    value: str | None  # None: omitted (equal to its default); its comments move to the next row
    node: tuple
    rows: list[_Row] | None = None  # a nested block (the inline device): value is its head


def _split_trail(notes: _Notes, node: tuple, lead: list[_Comment]) -> tuple[list[_Comment], str]:
    """Leading comments and the end-of-line text of a node. One line holds one comment: when a
    node had several (a setting written over several lines), the others go before it."""
    lead = lead + notes.take(node, "lead")
    trail = notes.take(node, "trail")
    lead += [_Comment(c.text, c.line) for c in trail[:-1]]
    return lead, ("  " + trail[-1].text if trail else "")


def _block(head: str, node: tuple, rows: list[_Row], notes: _Notes, indent: str = "",
           lead: list[_Comment] | None = None) -> list[str]:
    lead, tail = _split_trail(notes, node, lead or [])
    out = _comment_lines(lead, indent) + [f"{indent}{head} {{{tail}"]
    inner = indent + "  "
    width = max((len(r.key) for r in rows if r.value is not None and r.rows is None), default=0)
    pending: list[_Comment] = []
    body: list[tuple[str, str] | list[str]] = []  # (row, its comment) or lines as they are
    for r in rows:
        if r.value is None:
            pending += notes.take(r.node, "lead") + [_Comment(c.text, c.line) for c in notes.take(r.node, "trail")]
            continue
        if r.rows is not None:
            body.append(_block(f"{r.key} {r.value}", r.node, r.rows, notes, inner, pending))
            pending = []
            continue
        before, tail = _split_trail(notes, r.node, pending)
        pending = []
        if before:
            body.append(_comment_lines(before, inner))
        body.append((f"{inner}{r.key.ljust(width)} {r.value}".rstrip(), tail))
    col = max((len(b[0]) for b in body if isinstance(b, tuple) and b[1]), default=0)
    for b in body:
        if isinstance(b, list):
            out += b
        else:
            text, tail = b
            out.append(text.ljust(col) + tail if tail else text)
    after = notes.take(node, "after")
    closing = pending + notes.take(node, "inner") + [_Comment(c.text, c.line) for c in after[:-1]]
    out += _comment_lines(closing, inner)
    out.append(indent + "}" + ("  " + after[-1].text if after else ""))
    return out


def _line(text: str, node: tuple, notes: _Notes) -> list[str]:
    lead, tail = _split_trail(notes, node, [])
    return _comment_lines(lead, "") + [text + tail]


def _source_of(spec: Spec) -> str | None:
    """The text of the file ``spec`` was loaded from, if it still says exactly that (comments are
    taken from it; ``acc fmt`` formats a loaded Spec)."""
    path = spec.path
    if not path or path.startswith("<") or not os.path.isfile(path):
        return None
    from autocompress.spec import parse_spec, read_spec_file

    try:
        text = read_spec_file(path)
        if "#" not in text or parse_spec(text, path) != spec:
            return None
    except Exception:  # unreadable, or changed into something else: format without comments
        return None
    return text


def format_spec(spec_or_source, base_dir: str | None = None, *, source: str | None = None) -> str:
    """The canonical text of a Spec or of a spec's source, with the source's comments.

    For a Spec, the comments come from ``source`` (the text it was parsed from) or else from the
    file it was loaded from (``spec.path``) when that file still describes the same spec."""
    if isinstance(spec_or_source, str):
        from autocompress.spec import parse_spec

        source = spec_or_source
        spec = parse_spec(source, base_dir=base_dir)
    else:
        spec = spec_or_source
        if source is None:
            source = _source_of(spec)
    assert isinstance(spec, Spec), type(spec)
    notes = (collect_comments(source) if source is not None else None) or _Notes()

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
        for k in ("steps", "seed", "temperature"):
            v = getattr(s, k)
            if v is not None:
                rows.append(_Row(k, fmt_number(v), ("search", k)))
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
        out += _comment_lines(notes.header, "") + [""]
    for i, lines in enumerate(sections):
        out += ([""] if i else []) + lines
    eof = notes.eof + notes.leftover()
    if eof:
        out += [""] + _comment_lines(eof, "")
    return "\n".join(out) + "\n"
