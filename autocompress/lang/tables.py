"""The LALR tables of ``grammar/acspec.lark`` as JSON: built once, shipped, loaded without pickle.

Building the parser from the grammar takes ~0.3 s (Earley-parse the grammar, compute the LALR
tables); ``acc check`` loads the tables instead. They are Lark's own serialization (the
``memo_serialize([TerminalDef, Rule])`` data that Lark's standalone generator embeds, loaded with
``Lark._load_from_dict``), written as JSON: no pickle is ever loaded. JSON has no tuples, no
integer keys and no ``Token`` (a ``str`` subclass Lark uses for rule names), so those are tagged:
``{"@tuple": [...]}``, ``{"@intkeys": [[k, v], ...]}``, ``{"@token": [type, value]}``.

The file ``acspec.lalr.json`` next to this module records the sha256 of the grammar text and the
Lark version it was built from. ``load`` uses it only when both match; otherwise it builds the
parser from the grammar and keeps a JSON copy in the user cache (keyed by that sha256), so an
edited grammar costs one slow start, never a wrong parser. ``tests/lang/test_grammar.py`` checks
that the shipped file matches the grammar; regenerate it with

    python -m autocompress.lang.grammar
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import lark
from lark import Lark, Token
from lark.grammar import Rule
from lark.lexer import TerminalDef
from lark.parsers.lalr_analysis import Shift

from autocompress.cache import atomic_write_text

SHIPPED = Path(__file__).with_name("acspec.lalr.json")
OPTIONS = dict(parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=False)
FORMAT = 1  # bump when the encoding below changes


def grammar_sha256(grammar: str) -> str:
    return hashlib.sha256(grammar.encode("utf-8")).hexdigest()


def _encode(obj):
    if isinstance(obj, Token):
        return {"@token": [obj.type, str(obj)]}
    if isinstance(obj, tuple):
        return {"@tuple": [_encode(v) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _encode(v) for k, v in obj.items()}
        assert all(isinstance(k, int) and not isinstance(k, bool) for k in obj), obj
        return {"@intkeys": [[k, _encode(v)] for k, v in obj.items()]}
    assert obj is None or isinstance(obj, (str, int, float, bool)), type(obj)
    return obj


def _decoder(token):
    """A ``json.loads`` object hook undoing the tags of ``_encode`` (inner objects first)."""

    def hook(obj: dict):
        if len(obj) == 1:
            (tag, body), = obj.items()
            if tag == "@tuple":
                return tuple(body)
            if tag == "@intkeys":
                return {k: v for k, v in body}
            if tag == "@token":
                return token(*body)
        return obj

    return hook


def serialize(parser: Lark) -> dict:
    """The JSON document of a Lark parser built with ``OPTIONS`` (data, memo)."""
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    return {"data": _encode(data), "memo": _encode(memo)}


def document(grammar: str) -> dict:
    """Build the parser from the grammar (slow) and return what the tables file holds."""
    parser = lark.Lark(grammar, **OPTIONS)
    return {"format": FORMAT, "grammar_sha256": grammar_sha256(grammar), "lark": lark.__version__,
            **serialize(parser)}


def _from_document(doc: dict):
    return Lark._load_from_dict(doc["data"], doc["memo"])


def decode(text: str) -> dict:
    return json.loads(text, object_hook=_decoder(Token))


def _read(path: Path, sha: str, version: str) -> dict | None:
    try:
        doc = decode(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or (doc.get("format"), doc.get("grammar_sha256"), doc.get("lark")) != \
            (FORMAT, sha, version):
        return None
    return doc


def _cache_path(sha: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autocompress" / f"acspec-lalr-{sha[:16]}.json"


def load(grammar: str):
    """The Lark parser of ``grammar``: from the shipped tables, the user cache, or built (and cached)."""
    sha = grammar_sha256(grammar)
    cached = _cache_path(sha)
    for path in (SHIPPED, cached):
        doc = _read(path, sha, lark.__version__)
        if doc is not None:
            try:
                return _from_document(doc)
            except Exception:  # noqa: BLE001 - a damaged file: rebuild from the grammar below
                pass
    text = json.dumps(document(grammar), separators=(",", ":"))
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cached, text)
    except OSError:  # a read-only home: build again next time
        pass
    return _from_document(decode(text))


def write_shipped(grammar: str, path: Path = SHIPPED) -> None:
    atomic_write_text(path, json.dumps(document(grammar), separators=(",", ":")) + "\n")
    os.chmod(path, 0o644)  # a package file: world-readable (the atomic write creates it 0600)


def canonical(parser: Lark) -> tuple:
    """A parser's tables with the LALR states renumbered in breadth-first order from the start
    state (tokens in name order): two parsers of one grammar have equal canonical forms. Lark's
    own numbering differs from build to build (it iterates sets), so files are compared this way."""
    table = parser.parser.parser.parser.parse_table
    start = table.start_states["start"]
    number, queue = {start: 0}, [start]
    for state in queue:
        for tok in sorted(table.states[state]):
            action, arg = table.states[state][tok]
            if action is Shift and arg not in number:
                number[arg] = len(number)
                queue.append(arg)

    def rule(r) -> tuple:
        return (r.origin.name, tuple(s.name for s in r.expansion), r.order, r.alias, repr(r.options))

    states = tuple(tuple((tok, "shift", number[arg]) if action is Shift else (tok, "reduce", rule(arg))
                         for tok, (action, arg) in sorted(table.states[s].items())) for s in queue)
    terminals = tuple(sorted((t.name, t.pattern.type, t.pattern.value, tuple(t.pattern.flags), t.priority)
                             for t in parser.terminals))
    return (states, number[table.end_states["start"]], terminals, tuple(sorted(rule(r) for r in parser.rules)),
            tuple(sorted(parser.lexer_conf.ignore)))
