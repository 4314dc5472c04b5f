"""Comments of a spec's source, attached to the AST nodes they belong to, for the formatter (``fmt``).

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
import re
from dataclasses import dataclass

from autocompress.lang import ast
from autocompress.lang.parser import parse_ast

# A string (a '#' inside it is text) or a comment; in a file that parses, every '"' outside a
# comment opens a STRING token and every '#' outside a string opens a COMMENT, as in the grammar.
_STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*')
BLOCKS = ("target", "workload", "search", "distill", "evaluate")  # sections with a { } body




@dataclass(frozen=True)
class Comment:
    text: str  # '# ...' without trailing whitespace
    line: int
    blank: bool = False  # a blank line right before it (kept between two comments)


class Notes:
    """Comments by node: node id -> where -> comments. Node ids: ('target',), ('workload', name),
    ('target', 'memory'), ('workload', name, 'bound', i), ('target', 'hardware', 'fp8').
    where: 'lead' (own lines before the node), 'trail' (end of its first line), 'inner' (own
    lines before its closing '}'), 'after' (after its '}')."""

    def __init__(self) -> None:
        self.at: dict[tuple, list[Comment]] = {}
        self.header: list[Comment] = []
        self.eof: list[Comment] = []

    def add(self, node: tuple, where: str, c: Comment) -> None:
        self.at.setdefault((node, where), []).append(c)

    def take(self, node: tuple, where: str) -> list[Comment]:
        return self.at.pop((node, where), [])

    def leftover(self) -> list[Comment]:
        """Comments of nodes the canonical form never printed (none, for a source that matches
        the spec): they go to the end of the file rather than being lost."""
        rest = sorted((c for cs in self.at.values() for c in cs), key=lambda c: c.line)
        self.at.clear()
        return rest


def section_id(sec) -> tuple:
    return ("workload", sec.label.text) if sec.kind == "workload" else (sec.kind,)


def _events(file) -> list[tuple[tuple[int, int], str, tuple, int]]:
    """(position, 'start' | 'close', node id, line of the node's start), in text order."""
    ev: list[tuple[tuple[int, int], str, tuple, int]] = []

    def node(n, nid: tuple, closes: bool) -> None:
        s = n.span
        ev.append(((s.line, s.column), "start", nid, s.line))
        if closes:
            ev.append(((s.end_line, s.end_column - 1), "close", nid, s.line))

    for sec in file.sections:
        sid = section_id(sec)
        node(sec, sid, sec.kind in BLOCKS)
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


def collect_comments(source: str) -> Notes | None:
    """The comments of ``source`` attached to its nodes (none without a '#'); None if it does not parse."""
    notes = Notes()
    if "#" not in source:
        return notes
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
        c = Comment(m.group().rstrip(), line, own_line and blank(line - 1))
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
        lead = notes.at.get((section_id(sec), "lead"), [])
        after_blank = [lead[k + 1].blank if k + 1 < len(lead) else blank(sec.span.line - 1) for k in range(len(lead))]
        if True in after_blank:
            k = len(after_blank) - 1 - after_blank[::-1].index(True)
            notes.header, lead[:] = lead[:k + 1], lead[k + 1:]
    return notes


def comment_lines(cs: list[Comment], indent: str) -> list[str]:
    out: list[str] = []
    for i, c in enumerate(cs):
        if i and c.blank:
            out.append("")
        out.append(indent + c.text)
    return out
