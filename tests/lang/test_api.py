"""The public API the CLI uses: parse_spec, parse_spec_with_warnings, load_spec, format_spec."""

import pytest

from autocompress.diagnostics import SpecError
from autocompress.lang.api import load_spec, load_spec_with_warnings, parse_spec, parse_spec_with_warnings
from autocompress.lang.model import CustomDevice

T = "target { hardware rtx-5080 engine vllm precision bf16 }\n"
W = "workload w { concurrency 2 input 512 tokens output 64 tokens ttft <= 50 ms }\n"


def spec(model='"smollm2-135m"', target=T, workload=W, extra=""):
    return f"model {model}\n{target}{workload}{extra}"


def test_values_in_si_units():
    s = parse_spec(spec(target="target { hardware rtx-5080 engine vllm precision bf16 memory <= 1.5 GiB }\n",
                        workload="workload w { batch 8 input 2K tokens output 64 tokens prefix_cache 25% "
                                 "tpot p99 <= 2 ms throughput >= 1000 tok/s }\n"))
    w = s.workloads[0]
    assert (w.mode, w.concurrency, w.input_tokens, w.prefix_cache) == ("batch", 8, 2048, 0.25)
    assert [(b.metric, b.op, b.value, b.percentile) for b in w.bounds] == [
        ("tpot", "<=", 0.002, 99.0), ("throughput", ">=", 1000.0, None)]
    assert s.target.memory_limit_bytes == 1536 * 1024**2
    assert s.target.kv_precision == "bf16" and s.search is None and s.output is None


def test_kv_cache_default():
    fp8 = parse_spec(spec(target="target { hardware h100-sxm engine vllm precision fp8 }\n"))
    assert fp8.target.kv_precision == "bf16"
    fp32 = parse_spec(spec(target="target { hardware cpu engine vllm precision fp32 }\n"))
    assert fp32.target.kv_precision == "fp32"


def test_spans_are_kept_but_not_compared():
    a = parse_spec(spec())
    b = parse_spec("\n\n" + spec())
    assert a == b
    assert a.workloads[0].span.line + 2 == b.workloads[0].span.line
    assert a.target.hardware_span.line == 2


def test_custom_hardware():
    s = parse_spec(spec(target='target { hardware custom "g" { memory 24 GiB bandwidth 1 TB/s compute 100 TFLOPS } '
                               'engine vllm precision bf16 }\n'))
    assert s.target.hardware == CustomDevice("g", 24 * 1024**3, 1e12, 1e14)


def test_custom_hardware_missing_items():
    with pytest.raises(SpecError) as e:
        parse_spec(spec(target='target { hardware custom "g" { memory 24 GiB } engine vllm precision bf16 }\n'))
    assert [d.message for d in e.value.diagnostics] == ["the custom hardware block has no 'bandwidth'",
                                                        "the custom hardware block has no 'compute'"]


def test_parent_kinds(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "hf").mkdir()
    (tmp_path / "plain").mkdir()
    for value, kind in [("m.gguf", "gguf"), ("config.json", "config"), ("hf", "hf_dir"), ("./plain", "hf_dir"),
                        ("smollm2-135m", "alias")]:
        s = parse_spec(spec(model=f'"{value}"'), base_dir=str(tmp_path))
        assert (s.parent.kind, s.parent.value) == (kind, value)


def test_parent_paths_are_relative_to_the_spec_file(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.gguf").write_bytes(b"GGUF")
    f = tmp_path / "s.acspec"
    f.write_text(spec(model='"models/m.gguf"'))
    assert load_spec(f).parent.kind == "gguf"
    with pytest.raises(SpecError, match="not found"):
        parse_spec(spec(model='"models/m.gguf"'), base_dir=str(tmp_path / "elsewhere"))


def test_warnings_are_returned_not_raised():
    s, warnings = parse_spec_with_warnings(spec(target="target { hardware cpu engine vllm precision bf16 }\n"))
    assert s.target.weight_precision == "bf16"
    assert [w.severity for w in warnings] == ["warning"] and "300x slower" in warnings[0].message


def test_workload_without_bound_warns_when_another_has_one():
    _, warnings = parse_spec_with_warnings(spec(extra="workload idle { concurrency 1 input 8 tokens output 8 tokens }\n"))
    assert [w.code for w in warnings] == ["no-bound"]


def test_memory_counts_as_a_bound():
    s = parse_spec(spec(target="target { hardware rtx-5080 engine vllm precision bf16 memory <= 8 GiB }\n",
                        workload="workload w { concurrency 1 input 8 tokens output 8 tokens }\n"))
    assert s.workloads[0].bounds == ()


def test_all_errors_at_once_sorted():
    src = spec(target="target { hardware rtx-5007 engine vlm precision bf61 }\n",
               workload="workload w { concurrency 0 input 512 ms output 64 tokens ttft <= 5 msec }\n")
    with pytest.raises(SpecError) as e:
        parse_spec(src, "x.acspec")
    cols = [(d.span.line, d.span.column) for d in e.value.diagnostics]
    assert len(cols) == 6 and cols == sorted(cols)
    assert e.value.render().startswith("x.acspec:2:19: error: unknown hardware 'rtx-5007'")


def test_load_spec_file_problems(tmp_path):
    cases = {"missing.acspec": None, "empty.acspec": b"", "blank.acspec": b" \n\t\n", "bin.acspec": b"model\x00",
             "latin1.acspec": b'model "caf\xe9"'}
    messages = []
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(SpecError) as e:
            load_spec(tmp_path / name)
        messages.append(e.value.diagnostics[0].message)
    assert messages == ["spec file not found", "the spec file is empty", "the spec file has only whitespace",
                        "this is a binary file, not a spec (it contains NUL bytes)",
                        "the spec is not valid UTF-8 (byte 0xe9 at line 1, column 11)"]
    with pytest.raises(SpecError, match="folder"):
        load_spec(tmp_path)


def test_load_with_warnings_and_bom(tmp_path):
    f = tmp_path / "s.acspec"
    f.write_bytes(b"\xef\xbb\xbf" + spec().encode())
    s, warnings = load_spec_with_warnings(f)
    assert s.path == str(f) and warnings == []


def test_no_heavy_imports():
    import subprocess
    import sys

    code = ("import sys; from autocompress.lang.api import parse_spec, format_spec; import autocompress.lang.fmt;"
            "print([m for m in ('torch', 'cvxpy', 'transformers', 'rich') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
