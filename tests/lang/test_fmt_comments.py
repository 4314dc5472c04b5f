"""format_spec keeps comments: every comment's text survives, attached where it was, idempotently."""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lark import Lark

from autocompress.lang.api import format_spec, load_spec, parse_spec
from autocompress.lang import fmt
from autocompress.lang.grammar import grammar_text

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FILES = sorted((REPO / "examples").glob("*.acspec")) + sorted((HERE / "valid").glob("*.acspec")) \
    + [HERE / "golden" / "npc_rich.fmt.acspec"]

TRICKY = '''\
# header line 1

# header 2: a blank line follows

# belongs to output
output "x"   # output's own
# belongs to workload w
workload w {  # on w's header
  # before input
  input 8 tokens   # input's own
  concurrency 1
  output 8 tokens
  prefix_cache 0%   # prefix_cache 0% is omitted: this moves to the next row
  e2e <= 1 s
  # before w's closing brace

  # a blank line above is kept
}  # after w's brace
model "smollm2-135m"  # the parent
target { hardware custom "g" { memory 24 GiB  # device memory
   bandwidth 1 TB/s compute 100 TFLOPS fp8 200 TFLOPS } # after the device
  engine vllm precision fp8 kv_cache bf16  # kv_cache bf16 is the default for fp8
  # before tensor_parallel 1 (omitted)
  tensor_parallel 1
  # before target's closing brace
}
search { axes hidden,   # first line of axes
   ffn   # second line of axes
   # a full line inside the list
}  # after search's brace
distill { data "a#b.txt", "c\\"#d" }  # a one-line block: on its header line
evaluate { tokens 1K tokens } # another one-liner
# end of file 1

# end of file 2
'''


@functools.lru_cache(maxsize=1)
def _lexing_parser() -> Lark:
    return Lark(grammar_text(), parser="lalr", lexer="contextual",
                lexer_callbacks={"COMMENT": lambda t: _SEEN.append(t.value.rstrip())})


_SEEN: list[str] = []


def comments(text: str) -> Counter:
    """The comments of ``text`` as the language's own lexer sees them (independent of fmt)."""
    _SEEN.clear()
    _lexing_parser().parse(text)
    return Counter(_SEEN)


def _lines(text: str) -> list[str]:
    return text.split("\n")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_comments_kept_round_trip_idempotent(path):
    src = path.read_text(encoding="utf-8")
    text = format_spec(src, base_dir=str(path.parent))
    assert comments(text) == comments(src)
    assert format_spec(text, base_dir=str(path.parent)) == text
    assert parse_spec(text, base_dir=str(path.parent)) == parse_spec(src, base_dir=str(path.parent))
    # a Spec loaded from the file (what `acc fmt` formats) gets its file's comments too
    assert format_spec(load_spec(path)) == text


def test_every_example_has_comments_and_keeps_them():
    for path in sorted((REPO / "examples").glob("*.acspec")):
        src = path.read_text(encoding="utf-8")
        assert comments(src), path.name
        text = format_spec(load_spec(path))
        assert comments(text) == comments(src), path.name


def test_tricky_placement():
    text = format_spec(TRICKY)
    assert comments(text) == comments(TRICKY)
    assert format_spec(text) == text
    assert parse_spec(text) == parse_spec(TRICKY)
    lines = _lines(text)
    # the header stays at the top, before the model (which moves to the top)
    assert lines[:5] == ["# header line 1", "", "# header 2: a blank line follows", "",
                         'model "smollm2-135m"  # the parent']
    # end-of-line comments stay on their setting's line
    assert any(line.startswith("  input") and line.endswith("# input's own") for line in lines)
    assert '    memory    24 GiB  # device memory' in lines
    assert "  }  # after the device" in lines
    assert 'output "x"  # output\'s own' in lines
    assert "workload w {  # on w's header" in lines
    # own-line comments move with the node that follows them, indented like it
    i = lines.index('output "x"  # output\'s own')
    assert lines[i - 1] == "# belongs to output"
    i = lines.index("workload w {  # on w's header")
    assert lines[i - 1] == "# belongs to workload w"
    i = next(k for k, line in enumerate(lines) if line.startswith("  input"))
    assert lines[i - 1] == "  # before input"
    # comments before a closing brace, and after it
    i = lines.index("}  # after w's brace")
    assert lines[i - 3:i] == ["  # before w's closing brace", "", "  # a blank line above is kept"]
    i = lines.index("}  # after search's brace")
    assert lines[i - 1] == "  # a full line inside the list"
    # a one-line block's trailing comment goes on its header line
    assert "distill {  # a one-line block: on its header line" in lines
    assert "evaluate {  # another one-liner" in lines
    # comments of omitted default settings are kept, as own-line comments
    for c in ("# kv_cache bf16 is the default for fp8", "# before tensor_parallel 1 (omitted)",
              "# prefix_cache 0% is omitted: this moves to the next row"):
        assert "  " + c in lines
    # a '#' inside a string is not a comment
    assert '  data "a#b.txt", "c\\"#d"' in lines
    # the end of the file
    assert lines[-5:] == ["", "# end of file 1", "", "# end of file 2", ""]


def test_trailing_comments_of_a_block_are_aligned():
    src = ('model "smollm2-135m"\ntarget {\n  hardware rtx-5080 # where\n  engine vllm\n'
           '  precision bf16 # weights\n  memory <= 1 GiB\n}\n'
           'workload w { concurrency 1 input 8 tokens output 8 tokens e2e <= 1 s }\n')
    lines = _lines(format_spec(src))
    assert "  hardware  rtx-5080  # where" in lines
    assert "  precision bf16      # weights" in lines


def test_spec_without_a_file_formats_with_the_given_source():
    spec = parse_spec(TRICKY)
    assert not comments(format_spec(spec))  # a Spec alone has no text to take comments from
    assert fmt.format_spec(spec, source=TRICKY) == format_spec(TRICKY)


def test_changed_file_is_formatted_without_stale_comments(tmp_path):
    path = tmp_path / "s.acspec"
    path.write_text(TRICKY)
    spec = load_spec(path)
    assert comments(format_spec(spec)) == comments(TRICKY)
    path.write_text(TRICKY.replace("e2e <= 1 s", "e2e <= 2 s"))
    with pytest.warns(UserWarning, match="changed since this spec was loaded: formatted without its comments"):
        assert not comments(format_spec(spec))  # the file no longer says this spec, and we say so


def test_comments_of_a_mismatched_source_are_not_lost():
    other = TRICKY.replace("workload w {", "workload v {")
    text = fmt.format_spec(parse_spec(TRICKY), source=other)
    assert comments(text) == comments(other)
    assert parse_spec(text) == parse_spec(TRICKY)


def test_acc_fmt_write_keeps_comments(tmp_path, capsys):
    from autocompress.cli import main as cli

    path = tmp_path / "npc.acspec"
    src = (REPO / "examples" / "npc-5080.acspec").read_text()
    path.write_text(src)
    assert cli.main(["fmt", str(path), "--write"]) == 0
    text = path.read_text()
    assert comments(text) == comments(src)
    assert cli.main(["fmt", str(path), "--check"]) == 0
    capsys.readouterr()


# ---- property: comments inserted anywhere a comment may go --------------------------------

SOURCES = [p.read_text() for p in FILES] + [TRICKY]


def _in_string_or_comment(line: str, i: int) -> bool:
    return any(m.start() <= i < m.end() for m in re.finditer(r'"(?:[^"\\\n]|\\.)*"|#.*', line))


@st.composite
def commented(draw):
    src = draw(st.sampled_from(SOURCES))
    lines = src.rstrip("\n").split("\n")
    out: list[str] = []
    n = 0
    for line in lines:
        if draw(st.integers(0, 5)) == 0:
            out.append(" " * draw(st.integers(0, 4)) + f"# own {n}")
            n += 1
        if draw(st.booleans()):
            out.append("")
        if draw(st.integers(0, 3)) == 0:
            line += " " * draw(st.integers(0, 3)) + f"# eol {n} \"x\" {{ }}"
            n += 1
        # between two tokens: the rest of the line moves to the next line
        gaps = [m.start() for m in re.finditer(r" ", line) if not _in_string_or_comment(line, m.start())]
        if gaps and draw(st.integers(0, 3)) == 0:
            at = draw(st.sampled_from(gaps))
            out.append(line[:at] + f" # mid {n}")
            line = line[at:]
            n += 1
        out.append(line)
    if draw(st.booleans()):
        out.append(f"# last {n}")
    return "\n".join(out) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(commented())
def test_inserted_comments_survive(src):
    base = str(REPO / "examples")
    text = format_spec(src, base_dir=base)
    assert comments(text) == comments(src)
    assert format_spec(text, base_dir=base) == text
    assert parse_spec(text, base_dir=base) == parse_spec(src, base_dir=base)
