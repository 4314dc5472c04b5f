"""CLI-level fuzz: mutated example specs through ``acc check`` in-process.

Whatever the bytes, ``acc check`` answers 0 (feasible), 1 (infeasible) or 2 (invalid input with a
rendered location), never a traceback or an internal error (exit 3).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from _clikit import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autocompress.cli import main as cli

# the quick examples (about a second each to check); the SmolLM2 parent is built in
SOURCES = [(EXAMPLES / f"{n}.acspec").read_text() for n in ("cpu-vllm", "npc-5080", "npc-5070-infeasible")]
WORDS = ["model", "target", "workload", "{", "}", "<=", ">=", "memory", "hardware", "engine", "precision",
         "concurrency", "batch", "input", "output", "prefix_cache", "ttft", "tpot", "e2e", "throughput", "ms",
         "s", "tokens", "tok/s", "MiB", "GiB", "%", "0", "1", "-1", "1e9", "1e-9", "32K", "1M", "nan", "p99",
         "rtx-5070", "h100-sxm", "cpu", "vllm", "transformers", "fp8", "fp32", "search", "axes", "hidden",
         "depth", "\n", '"', "#", "é", "\x00"]
TOKEN = re.compile(r'"[^"\n]*"|[A-Za-z_][\w/-]*|\d[\w.+-]*|\S|\s+')


@st.composite
def mutated(draw) -> bytes:
    src = draw(st.sampled_from(SOURCES))
    toks = TOKEN.findall(src)
    for _ in range(draw(st.integers(1, 3))):
        if not toks:
            break
        i = draw(st.integers(0, len(toks) - 1))
        op = draw(st.sampled_from(["delete", "dup", "insert", "number", "truncate", "bytes"]))
        if op == "delete":
            del toks[i]
        elif op == "dup":
            toks.insert(i, toks[i])
        elif op == "insert":
            toks.insert(i, draw(st.sampled_from(WORDS)))
        elif op == "number":  # a plausible value change keeps the spec valid more often: a real check runs
            nums = [j for j, t in enumerate(toks) if t[:1].isdigit()]
            if nums:
                toks[draw(st.sampled_from(nums))] = draw(st.sampled_from(["1", "3", "64", "0.5", "2048", "9999"]))
        elif op == "truncate":
            toks = toks[:i]
    data = "".join(toks).encode("utf-8")
    if draw(st.booleans()) and draw(st.booleans()):  # 1 in 4: random bytes spliced in
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.binary(min_size=1, max_size=8)) + data[pos:]
    return data


# ACC_FUZZ_EXAMPLES=500 for a longer, randomized hunt; by default 30 fixed examples (about 20 s).
EXAMPLES_N = int(os.environ.get("ACC_FUZZ_EXAMPLES", "30"))


@settings(max_examples=EXAMPLES_N, deadline=None, derandomize="ACC_FUZZ_EXAMPLES" not in os.environ,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=mutated())
def test_check_never_crashes(data, capsys, monkeypatch):
    with tempfile.TemporaryDirectory() as tmp:
        monkeypatch.setenv("ACC_CACHE_DIR", str(Path(tmp) / "cache"))
        monkeypatch.delenv("ACC_DEBUG", raising=False)
        spec = Path(tmp) / "fuzz.acspec"
        spec.write_bytes(data)
        code = cli.main(["check", str(spec), "--no-cache", "--format", "json"])
        out, err = capsys.readouterr()
    assert code in (0, 1, 2), (code, err, data)
    assert "Traceback" not in err and "internal error" not in err, (err, data)
    if code == 2:
        assert "fuzz.acspec:" in err and out == ""
    else:
        assert '"verdict"' in out
