"""Syntax: source text -> typed AST (``ast.SpecFile``), or every syntax error of the file.

The Lark LALR parser of ``grammar/acspec.lark`` comes from ``grammar`` (loaded once per process
from its shipped tables). Syntax errors and the repairs that keep the parse going are
``recovery``'s.
"""

from __future__ import annotations

import re

from lark import Token, Transformer, v_args
from lark.exceptions import UnexpectedInput

from autocompress.diagnostics import Diagnostic, Span
from autocompress.lang import ast
from autocompress.lang.grammar import lark_parser
from autocompress.lang.recovery import Recovery

_ITEM_KEYS = {"tensor_parallel_item": "tensor_parallel", "prefix_cache_item": "prefix_cache",
              "seq_len_item": "seq_len", "kv_cache_item": "kv_cache"}


# ------------------------------------------------------------------------------------------
# Parse tree -> AST


def _span_tok(t: Token) -> Span:
    return Span(t.line, t.column, t.end_line, t.end_column)


def _span_meta(m) -> Span:
    return Span(m.line, m.column, m.end_line, m.end_column) if not m.empty else Span(0, 0)


def _key_span(m, key: str) -> Span:
    return Span(m.line, m.column, m.line, m.column + len(key))


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda mm: {"n": "\n", "t": "\t"}.get(mm.group(1), mm.group(1)), s[1:-1])


@v_args(meta=True)
class _ToAst(Transformer):
    def start(self, meta, children):
        return ast.SpecFile(tuple(children))

    # sections
    def _section(self, kind, meta, label, items):
        return ast.Section(kind, label, tuple(items), _span_meta(meta), _key_span(meta, kind))

    def model_section(self, meta, c):
        return self._section("model", meta, self._string(c[0]), [])

    def output_section(self, meta, c):
        return self._section("output", meta, self._string(c[0]), [])

    def target_section(self, meta, c):
        return self._section("target", meta, None, c)

    def workload_section(self, meta, c):
        return self._section("workload", meta, ast.Name(c[0].value, _span_tok(c[0])), c[1:])

    def search_section(self, meta, c):
        return self._section("search", meta, None, c)

    def distill_section(self, meta, c):
        return self._section("distill", meta, None, c)

    def evaluate_section(self, meta, c):
        return self._section("evaluate", meta, None, c)

    # values
    def _string(self, t: Token) -> ast.String:
        return ast.String(_unescape(t.value), _span_tok(t))

    def number(self, meta, c):
        return ast.Number(c[0].value, _span_tok(c[0]))

    def quantity(self, meta, c):
        num = ast.Number(c[0].value, _span_tok(c[0]))
        return ast.Quantity(num, c[1] if len(c) > 1 else None, _span_meta(meta))

    def unit(self, meta, c):
        return ast.Unit(c[0].value, _span_tok(c[0]))

    def _name(self, meta, c):
        return ast.Name(c[0].value, _span_tok(c[0]))

    hardware_name = engine_name = precision_name = strategy_name = axis_name = _name

    def metric(self, meta, c):
        return c[0]

    def compare(self, meta, c):
        return c[0]

    # settings
    def __default__(self, data, children, meta):
        if not data.endswith("_item") and not data.startswith("device_"):
            raise AssertionError(f"grammar rule without an AST node: {data}")  # pragma: no cover
        key = _ITEM_KEYS.get(data) or data.removesuffix("_item").removeprefix("device_")
        if key in ("axes", "data"):
            value = tuple(self._string(t) if isinstance(t, Token) else t for t in children)
        else:
            value = children[0]
            if isinstance(value, Token):  # profile "x.json"
                value = self._string(value)
        return ast.Setting(key, value, _span_meta(meta), _key_span(meta, key))

    def custom_hardware_item(self, meta, c):
        return ast.CustomHardware(self._string(c[0]), tuple(c[1:]), _span_meta(meta), _key_span(meta, "hardware"))

    def memory_item(self, meta, c):
        op, q = c
        return ast.Limit("memory", op.value, _span_tok(op), q, _span_meta(meta), _key_span(meta, "memory"))

    def bound(self, meta, c):
        metric = c[0]
        pct = c[1].value if len(c) == 4 else None
        op, q = c[-2], c[-1]
        return ast.BoundNode(metric.value, pct, op.value, _span_tok(op), q, _span_meta(meta),
                             _key_span(meta, metric.value), _span_tok(c[1]) if pct else None)


def parse_ast(source: str) -> tuple[ast.SpecFile | None, list[Diagnostic]]:
    """The AST of ``source``, or None and every syntax error found."""
    lark = lark_parser()
    rec = Recovery(lark, source)

    def on_error(e: UnexpectedInput) -> bool:
        st = getattr(e, "state", None)
        e._position = st.position if st is not None and hasattr(st, "position") else None  # before recovery moves it
        return rec(e)

    tree = None
    try:
        tree = lark.parse(source, on_error=on_error)
    except UnexpectedInput as e:
        if not rec.diagnostics:  # an error on_error could not see (should not happen): still report it
            line, col = getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
            rec.diagnostics.append(Diagnostic(Span(line, col, line, col + 1), "syntax error", "", "error", "syntax"))
    if rec.diagnostics:
        return None, rec.diagnostics
    return _ToAst().transform(tree), []

