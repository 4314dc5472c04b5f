"""format_spec: a pinned canonical form, parse(format(x)) == parse(x), idempotent."""

from pathlib import Path

import pytest

from autocompress.lang.api import format_spec, load_spec, parse_spec

HERE = Path(__file__).resolve().parent
VALID = sorted((HERE / "valid").glob("*.acspec"))


def test_golden_canonical_form(golden):
    spec = load_spec(HERE / "valid" / "npc_rich.acspec")
    golden(HERE / "golden" / "npc_rich.fmt.acspec", format_spec(spec))


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_round_trip_and_idempotent(path):
    spec = load_spec(path)
    text = format_spec(spec)
    assert parse_spec(text) == spec
    assert format_spec(text) == text
    assert format_spec(path.read_text()) == text  # from source as well as from a Spec


def test_golden_file_is_itself_canonical():
    text = (HERE / "golden" / "npc_rich.fmt.acspec").read_text()
    assert format_spec(text) == text


def test_strings_with_quotes_round_trip():
    src = ('model "smollm2-135m"\ntarget { hardware cpu engine vllm precision fp32 }\n'
           'workload w { concurrency 1 input 8 tokens output 8 tokens e2e <= 1 s }\n'
           'output "out/with \\"quotes\\" and \\\\ backslash"\n')
    spec = parse_spec(src)
    assert spec.output == 'out/with "quotes" and \\ backslash'
    assert parse_spec(format_spec(spec)) == spec


def test_defaults_are_omitted():
    src = ('model "smollm2-135m"\ntarget { hardware h100-sxm engine vllm precision fp8 kv_cache bf16 '
           'tensor_parallel 1 }\nworkload w { concurrency 1 input 8 tokens output 8 tokens prefix_cache 0% e2e <= 1 s }\n')
    text = format_spec(src)
    assert "kv_cache" not in text and "tensor_parallel" not in text and "prefix_cache" not in text
    assert parse_spec(text) == parse_spec(src)
