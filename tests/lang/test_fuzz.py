"""Mutated specs either parse or fail with SpecError: never any other exception."""

import os
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autocompress.diagnostics import SpecError
from autocompress.lang.api import format_spec, parse_spec

VALID = sorted((Path(__file__).parent / "valid").glob("*.acspec"))
SOURCES = [p.read_text() for p in VALID]
WORDS = ["model", "target", "workload", "{", "}", "<=", ">=", "<", ":", ";", "=", ",", '"', "#", "%", "ms", "tokens",
         "tok/s", "MiB", "MB", "32K", "2M", "-1", "0", "1e99", "1e400", "nan", "p99", "p0", "hardware", "custom",
         "batch", "concurrency", "output", "fp8", "cpu", "\n", "\t", "\x00", "é", "ttft", "tpot", "e2e", "axes"]
TOKEN = re.compile(r'"[^"\n]*"|[A-Za-z_][\w/-]*|\d[\w.+-]*|\S|\s+')


@st.composite
def mutated(draw):
    src = draw(st.sampled_from(SOURCES))
    toks = TOKEN.findall(src)
    for _ in range(draw(st.integers(1, 4))):
        if not toks:
            break
        i = draw(st.integers(0, len(toks) - 1))
        op = draw(st.sampled_from(["delete", "dup", "swap", "insert", "truncate", "digit", "char"]))
        if op == "delete":
            del toks[i]
        elif op == "dup":
            toks.insert(i, toks[i])
        elif op == "swap" and i + 1 < len(toks):
            toks[i], toks[i + 1] = toks[i + 1], toks[i]
        elif op == "insert":
            toks.insert(i, draw(st.sampled_from(WORDS)))
        elif op == "truncate":
            toks = toks[:i]
        elif op == "digit":
            toks[i] = re.sub(r"\d", lambda m: str(draw(st.integers(0, 9))), toks[i], count=1)
        else:
            toks.insert(i, draw(st.characters(blacklist_categories=("Cs",))))
    return "".join(toks)


@settings(max_examples=int(os.environ.get("ACSPEC_FUZZ_EXAMPLES", "200")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutations_never_crash(src):
    try:
        spec = parse_spec(src)
    except SpecError as e:
        assert e.diagnostics, "a SpecError must carry at least one diagnostic"
        assert all(d.severity in ("error", "warning") for d in e.diagnostics)
        # "syntax error" alone is the fallback when error recovery itself failed: a bug
        assert all(d.message != "syntax error" for d in e.diagnostics), e.render()
        e.render()
        return
    # whatever parses also formats and round-trips
    assert parse_spec(format_spec(spec)) == spec
