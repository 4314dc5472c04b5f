"""The grammar file is the reference: its literal names match the model's tables and the catalog;
the table of known mistakes is live; the parser is built once and cached."""

import re

import pytest

from autocompress._resources import resource
from autocompress.lang import model
from autocompress.lang.grammar import grammar_names
from autocompress.lang.mistakes import MISTAKES
from autocompress.lang.recovery import _matcher
from autocompress.lang.parser import parse_ast
from autocompress.lang.units import KINDS

HARDWARE = ("rtx-5070", "rtx-5080", "rtx-5090", "rtx-4090", "l4", "l40s", "a100-80g", "h100-sxm", "h100-pcie",
            "h200", "b200", "gb200", "cpu")


def literal_alternatives(rule: str) -> tuple[str, ...]:
    """The quoted literals of a rule, read from the grammar file's text (not through Lark)."""
    text = resource("grammar/acspec.lark").read_text()
    m = re.search(rf"^!?{rule}:(.*?)(?=^\S|\Z)", text, re.S | re.M)
    assert m, rule
    body = re.sub(r"//[^\n]*", "", m.group(1))
    return tuple(re.findall(r'"([^"]+)"', body))


@pytest.mark.parametrize("rule, expected", [
    ("hardware_name", HARDWARE), ("engine_name", model.ENGINES), ("precision_name", model.PRECISIONS),
    ("strategy_name", model.STRATEGIES), ("axis_name", model.AXES), ("metric", model.METRICS),
])
def test_grammar_names_match_tables(rule, expected):
    assert literal_alternatives(rule) == tuple(expected)
    assert grammar_names(rule) == tuple(expected)  # what the checker uses at run time


def test_grammar_units_match_units_module():
    assert set(literal_alternatives("unit")) == {u for _, units in KINDS.values() for u in units}


def test_grammar_hardware_matches_catalog():
    hardware = pytest.importorskip("autocompress.catalog.hardware")
    assert set(grammar_names("hardware_name")) == set(hardware.HARDWARE)


def test_mistakes_table_examples_all_fail():
    assert _matcher().problems == []


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.code for m in MISTAKES])
def test_mistakes_table_each_example_gets_its_message(mistake):
    for example in mistake.examples:
        file, diags = parse_ast(example)
        assert file is None and diags, example
        assert diags[0].code == mistake.code, (example, diags[0])


def test_several_syntax_errors_reported_at_once():
    src = 'model "smollm2-135m"\ntarget {\n  hardware: rtx-5080\n  engine = vllm\n  precision "bf16"\n}\n' \
          'workload w {\n  concurency 1\n  input 8 tokens\n  output 8 tokens\n  ttft < 1 s\n}\n'
    _, diags = parse_ast(src)
    assert [(d.span.line, d.code) for d in diags] == [(3, "colon"), (4, "equals"), (5, "quoted-name"),
                                                      (8, "unknown-keyword"), (11, "strict-less")]


def test_keyword_did_you_mean():
    _, diags = parse_ast("workload w { concurency 1 }")
    assert diags[0].hint == "did you mean 'concurrency'?"
    _, diags = parse_ast('modle "x"')
    assert diags[0].hint == "did you mean 'model'?"


def test_shipped_tables_match_the_grammar():
    """Regenerate with `python -m autocompress.lang.grammar` after editing grammar/acspec.lark."""
    import json

    import lark

    from autocompress.lang import tables
    from autocompress.lang.grammar import grammar_text, lark_parser

    doc = json.loads(tables.SHIPPED.read_text())
    assert doc["grammar_sha256"] == tables.grammar_sha256(grammar_text()), "stale: regenerate the tables"
    assert doc["lark"] == lark.__version__, "built with another Lark: regenerate the tables"
    fresh = lark.Lark(grammar_text(), **tables.OPTIONS)
    assert tables.canonical(lark_parser()) == tables.canonical(fresh)
    assert lark_parser().options.propagate_positions is True


def test_tables_round_trip_exactly():
    """Tuples, integer keys and Tokens survive the JSON encoding: the loaded data is Lark's own."""
    import json

    import lark
    from lark.grammar import Rule
    from lark.lexer import TerminalDef

    from autocompress.lang import tables
    from autocompress.lang.grammar import grammar_text

    parser = lark.Lark(grammar_text(), **tables.OPTIONS)
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    doc = tables.decode(json.dumps(tables.serialize(parser)))

    def same(a, b):
        if type(a) is not type(b):
            return False
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, lark.Token):
            return (a.type, str(a)) == (b.type, str(b))
        return a == b

    assert same(data, doc["data"]) and same(memo, doc["memo"])


def test_edited_grammar_builds_and_caches_json(tmp_path, monkeypatch):
    """Tables that do not match the grammar are never used: the parser is built from the grammar
    and cached as JSON under the grammar's sha256; no pickle is loaded on any path."""
    import pickle

    from autocompress.lang import tables
    from autocompress.lang.grammar import grammar_text

    def no_pickle(*a, **k):
        raise AssertionError("pickle loaded")

    monkeypatch.setattr(pickle, "load", no_pickle)
    monkeypatch.setattr(pickle, "loads", no_pickle)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    edited = grammar_text() + "\n// an edit\n"
    built = tables.load(edited)
    cached = list((tmp_path / "autocompress").glob("acspec-lalr-*.json"))
    assert len(cached) == 1 and not list(tmp_path.rglob("*.cache"))
    monkeypatch.setattr(tables, "document", no_pickle)  # the second load must come from the cache
    again = tables.load(edited)
    assert tables.canonical(again) == tables.canonical(built)
    assert tables.load(grammar_text()) is not None  # the shipped tables: no build either
