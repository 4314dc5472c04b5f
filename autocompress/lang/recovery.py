"""Syntax errors: every error of a file, each with a message in the user's terms, and the repairs
that let the parser go on after one.

On an error ``Recovery`` records a diagnostic, then repairs the parse so the rest of the file is
still checked:
  1. a section keyword or end of file inside an open block: insert the missing '}';
  2. a quoted name where a bare one belongs (or the reverse): substitute the token;
  3. a single missing token ('<=', '{', ',', a name): insert it if that lets the token through;
  4. otherwise drop the token, and at the next acceptable token pop back to a state that takes
     it (yacc-style resync). Errors right after an error, or on a line already reported, are
     consequences of the first and stay silent.
Known mistakes (``mistakes.MISTAKES``) get their own message, matched on (parser state, token).
"""

from __future__ import annotations

import functools
import re

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from autocompress.diagnostics import Diagnostic, Span, one_of, suggest
from autocompress.lang.grammar import HOMES, SECTIONS, lark_parser
from autocompress.lang.mistakes import Key, Matcher, key_of


class _Terms:
    """Human names for the grammar's terminals."""

    NAMED = {"NUMBER": "a number", "STRING": "a quoted string", "NAME": "a name",
             "PERCENTILE": "a percentile (p50, p99, ...)", "$END": "end of file"}

    def __init__(self, lark: Lark):
        self.literal = {t.name: t.pattern.value for t in lark.terminals if t.pattern.type == "str"}
        self.by_value = {v: k for k, v in self.literal.items()}

    def describe(self, names) -> tuple[list[str], list[str]]:
        """(descriptions, literal words) of a set of terminal names."""
        words = sorted(self.literal[n] for n in names if n in self.literal)
        descs = [self.NAMED[n] for n in sorted(names) if n in self.NAMED]
        return descs, words

    def expected(self, names) -> str:
        descs, words = self.describe(names)
        groups = (("a hardware name", {"rtx-5080", "h100-sxm"}), ("an engine", {"vllm"}),
                  ("a precision", {"bf16", "fp32"}), ("a unit", {"MiB", "ms", "tokens"}),
                  ("a strategy", {"uniform"}), ("an axis", {"ffn", "depth"}))
        for label, probe in groups:
            if probe <= set(words):
                return label
        parts = [f"'{w}'" for w in words] + descs
        if not parts:
            return "something else"
        if len(parts) == 1:
            return parts[0]
        if len(parts) > 10:
            return "one of " + ", ".join(parts[:10]) + ", ..."
        return "one of " + ", ".join(parts)

    def got(self, tok: Token) -> str:
        if tok.type == "$END":
            return "end of file"
        return f"'{tok.value}'" if not tok.value.startswith('"') else tok.value


def _line_col_of(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


_IGNORED = re.compile(r"(\s+|#[^\n]*)*")


class Recovery:
    def __init__(self, lark: Lark, source: str):
        self.lark = lark
        self.source = source
        self.terms = _Terms(lark)
        self.diagnostics: list[Diagnostic] = []
        self.last_end = -1  # source offset just after the last error event
        self.reported_lines: set[int] = set()
        self.implicit_braces: set[int] = set()  # '{' we inserted: their missing '}' is no news

    # -- helpers
    def _tok(self, type_: str, like: Token, value: str | None = None) -> Token:
        if value is None:
            value = self.terms.literal.get(type_, {"NAME": "_", "NUMBER": "1", "STRING": '""'}.get(type_, "_"))
        return Token.new_borrow_pos(type_, value, like)

    def _adjacent(self, start: int) -> bool:
        if self.last_end < 0 or start < self.last_end:
            return self.last_end >= 0
        m = _IGNORED.match(self.source, self.last_end)
        return m.end() >= start

    def _context(self, ip) -> tuple[str | None, Token | None]:
        """The innermost open block ('target', 'workload', 'custom hardware'...) and its '{'."""
        kind, brace, depth = None, None, 0
        for v in reversed(ip.parser_state.value_stack):
            if isinstance(v, Token):
                if v.value == "}":
                    depth += 1
                    continue
                if v.value == "{" and depth:
                    depth -= 1
                    continue
                if depth:
                    continue
                if v.value == "{" and brace is None:
                    brace = v
                if v.value == "custom" and kind is None and brace is not None:
                    kind = "custom hardware"
                if v.value in SECTIONS and kind is None:
                    kind = v.value
        return (kind, brace) if brace is not None else (None, None)

    def _report(self, line: int, col: int, end_col: int, message: str, hint: str = "", code: str = "syntax"):
        if line in self.reported_lines:
            return
        self.reported_lines.add(line)
        self.diagnostics.append(Diagnostic(Span(line, col, line, end_col), message, hint, "error", code))

    # -- the on_error callback
    def __call__(self, e: UnexpectedInput) -> bool:
        try:
            return self._handle(e)
        except UnexpectedInput:
            return False
        except Exception:  # a bug in recovery must not hide the user's error behind a traceback
            line, col = getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
            self._report(line, col, col + 1, "syntax error", "", "syntax")
            return False

    def _handle(self, e: UnexpectedInput) -> bool:
        if isinstance(e, UnexpectedCharacters):
            # A skipped character is a complete repair: it does not make the next token suspect.
            silent = self._adjacent(e.pos_in_stream)
            message = self._message_chars(e)
            if not silent:
                self._report(e.line, e.column, e.column + 1, *message)
            if message[2] == "yaml-block" and e.interactive_parser is not None:
                brace = self._tok("LBRACE", Token("LBRACE", "{", e.pos_in_stream, e.line, e.column))
                try:
                    e.interactive_parser.feed_token(brace)
                    self.implicit_braces.add(id(brace))
                except UnexpectedInput:
                    pass
            return True
        if not isinstance(e, UnexpectedToken):
            return False
        ip = e.interactive_parser
        tok = e.token
        accepts = ip.accepts()
        start = tok.start_pos if tok.type != "$END" else len(self.source)
        silent = self._adjacent(start) or (tok.type != "$END" and tok.line in self.reported_lines)
        self.last_end = tok.end_pos if tok.type != "$END" else len(self.source)
        kind, brace = self._context(ip)

        # 1. a section keyword, or the end of the file, inside an open block: close it.
        if "RBRACE" in accepts and (tok.type == "$END" or tok.value in SECTIONS) and brace is not None:
            closers = self._closers(ip, tok)
            if closers:
                if brace.line not in self.reported_lines and id(brace) not in self.implicit_braces:
                    where = "the end of the file" if tok.type == "$END" else f"'{tok.value}'"
                    line, col = (brace.line, brace.column)
                    self._report(line, col, col + 1, f"missing '}}': the {kind} block opened here is not closed before {where}",
                                 "add '}' after the block's last setting", "missing-brace")
                for _ in range(closers):
                    ip.feed_token(self._tok("RBRACE", tok))
                if tok.type != "$END":
                    ip.feed_token(tok)
                return True
        if tok.type == "$END":
            if not silent:
                msg, hint, code = self._message_token(e, accepts, kind)
                line, col = _line_col_of(self.source, len(self.source.rstrip()))
                self._report(line, col, col + 1, msg, hint, code)
            return False
        if not silent:
            msg, hint, code = self._message_token(e, accepts, kind)
            self._report(tok.line, tok.column, tok.end_column if tok.end_line == tok.line else tok.column + 1, msg, hint, code)
        # 2. substitute a quoted name by a bare one, or the reverse.
        swap = {"STRING": "NAME", "NAME": "STRING"}.get(tok.type)
        if swap in accepts:
            value = tok.value.strip('"') if swap == "NAME" else f'"{tok.value}"'
            ip.feed_token(self._tok(swap, tok, value or "_"))
            return True
        # 3. insert one missing token: punctuation ('<=', '{', ',') or a placeholder value, never a
        #    keyword (that would turn a misspelt setting into the name of something else).
        insertable = [n for n in accepts if n in ("NAME", "NUMBER", "STRING")
                      or (n in self.terms.literal and not self.terms.literal[n][:1].isalpha())]
        for t in sorted(insertable, key=lambda n: (n not in self.terms.literal, n)):
            trial = ip.copy()
            try:
                trial.feed_token(self._tok(t, tok))
                trial.feed_token(tok)
            except UnexpectedInput:
                continue
            ip.feed_token(self._tok(t, tok))
            ip.feed_token(tok)
            return True
        # 4. resync: pop to a state that takes this token, else drop it.
        ps = ip.parser_state
        table = ps.parse_conf.parse_table.states
        for depth in range(len(ps.state_stack) - 1, 0, -1):
            if depth < len(ps.state_stack) - 1 and isinstance(ps.value_stack[depth], Token) \
                    and ps.value_stack[depth].value == "{":
                break  # never pop out of the enclosing block
            if tok.type in table[ps.state_stack[depth]]:
                trial = ip.copy()
                del trial.parser_state.state_stack[depth + 1:]
                del trial.parser_state.value_stack[depth:]
                try:
                    trial.feed_token(tok)
                except UnexpectedInput:
                    continue
                del ps.state_stack[depth + 1:]
                del ps.value_stack[depth:]
                ip.feed_token(tok)
                return True
        return True  # dropped

    def _closers(self, ip, tok: Token) -> int:
        trial = ip.copy()
        for n in range(1, 4):
            try:
                trial.feed_token(self._tok("RBRACE", tok))
            except UnexpectedInput:
                return 0
            if tok.type == "$END" or tok.type in trial.accepts():
                if tok.type == "$END" and "$END" not in trial.accepts():
                    continue
                return n
        return 0

    # -- messages
    def _mistake(self, e: UnexpectedInput, prev: str, got: str):
        m = _matcher().match(key_of(e, getattr(e, "_position", None)))
        if m is None:
            return None
        fill = dict(prev=prev, got=got.strip("'\""), unquoted=got.strip("'\""))
        try:
            return m.message.format(**fill), m.hint.format(**fill), m.code
        except (KeyError, IndexError, ValueError):
            return m.message, m.hint, m.code

    def _message_chars(self, e: UnexpectedCharacters):
        prev = e.token_history[-1].value if e.token_history else ""
        got = self.source[e.pos_in_stream]
        found = self._mistake(e, prev, got)
        if found:
            return found
        return (f"unexpected character '{got}': expected {self.terms.expected(e.allowed or ())}", "", "syntax")

    def _message_token(self, e: UnexpectedToken, accepts: set[str], kind: str | None):
        tok = e.token
        prev = ""
        for v in reversed(e.interactive_parser.parser_state.value_stack):
            if isinstance(v, Token):
                prev = v.value
                break
        got = self.terms.got(tok)
        found = self._mistake(e, prev, got)
        if found:
            return found
        if tok.type == "RBRACE" and kind is None:
            return ("unmatched '}': no block is open here", "delete it, or check the block above", "stray-brace")
        expected = self.terms.expected(accepts)
        word = tok.value if tok.type != "$END" else ""
        _, words = self.terms.describe(accepts)
        settings = [w for w in words if w[:1].isalpha()]
        if kind and "RBRACE" in accepts and settings and not (word in HOMES or word in SECTIONS or tok.type == "NAME"):
            return (f"unexpected {got} in the {kind} block: expected a setting name or '}}'",
                    f"{kind} settings: {', '.join(settings)}; each setting takes one value", "syntax")
        if tok.type == "NAME" or word in HOMES or word in SECTIONS:
            _, words = self.terms.describe(accepts)
            keywords = [w for w in words if w.isidentifier()]
            home = HOMES.get(word)
            if word in SECTIONS and kind:
                pass
            elif home and word not in words and keywords:
                if kind in (None, "model", "output"):
                    block = f"{home} <name>" if home == "workload" else home
                    return (f"'{word}' is a {home} setting: it goes inside '{block} {{ ... }}'",
                            "", "misplaced-setting")
                return (f"'{word}' is not a setting of the {kind} block ({home} has it)",
                        f"{kind} settings: {one_of(keywords)}", "misplaced-setting")
            elif keywords:
                what = "section" if kind is None else f"{kind} setting"
                hint = suggest(word, keywords)
                return (f"unknown {what} '{word}'", hint or f"expected {expected}", "unknown-keyword")
        return (f"expected {expected}, got {got}", "", "syntax")


@functools.lru_cache(maxsize=1)
def _matcher() -> Matcher:
    lark = lark_parser()

    def first_error(text: str) -> Key | None:
        box: list[Key] = []

        def grab(e):
            if not box:
                pos = getattr(e, "state", None)
                box.append(key_of(e, pos.position if pos is not None and hasattr(pos, "position") else None))
            return False

        try:
            lark.parse(text, on_error=grab)
        except UnexpectedInput:
            pass
        return box[0] if box else None

    return Matcher(first_error)
