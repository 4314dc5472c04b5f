import pytest

from autocompress.lang.units import convert, fmt_number, parse_number, plain, render

GiB = 1024**3


@pytest.mark.parametrize("text, unit, kind, si", [
    ("512", "MiB", "size", 512 * 1024**2), ("1.5", "GiB", "size", int(1.5 * GiB)), ("3", "B", "size", 3),
    ("2", "TiB", "size", 2 * 1024**4), ("1", "KiB", "size", 1024),
    ("15", "ms", "time", 0.015), ("1.5", "s", "time", 1.5), ("250", "us", "time", 0.00025),
    ("512", "tokens", "tokens", 512), ("32K", "tokens", "tokens", 32768), ("2M", "tokens", "tokens", 2 * 1024 * 1024),
    ("1.5K", "tokens", "tokens", 1536), ("2000", "tok/s", "rate", 2000), ("80", "%", "share", 0.8),
    ("12.5", "%", "share", 0.125), ("1008", "GB/s", "bandwidth", 1.008e12), ("3.35", "TB/s", "bandwidth", 3.35e12),
    ("165", "TFLOPS", "compute", 165e12), ("2.25", "PFLOPS", "compute", 2.25e15),
])
def test_convert(text, unit, kind, si):
    value, problem = convert(text, unit, kind, "x")
    assert problem is None
    assert value == pytest.approx(si, rel=1e-15)


def test_counts_are_ints():
    assert isinstance(convert("512", "MiB", "size", "m")[0], int)
    assert isinstance(convert("32K", "tokens", "tokens", "t")[0], int)


def test_exact_decimal_times_and_shares():
    assert convert("15", "ms", "time", "t")[0] == 0.015  # divided, not multiplied by 1e-3
    assert convert("29", "%", "share", "p")[0] == 0.29


@pytest.mark.parametrize("text, unit, kind, code, hint", [
    ("512", None, "tokens", "missing-unit", "write e.g. 'x 512 tokens'"),
    ("512", "ms", "tokens", "wrong-unit", ""),
    ("15", "msec", "time", "unknown-unit", "did you mean 'ms'?"),
    ("512", "MB", "size", "decimal-size", "memory sizes use binary units: did you mean MiB?"),
    ("1", "GB", "size", "decimal-size", "memory sizes use binary units: did you mean GiB?"),
    ("64", "tok", "tokens", "unknown-unit", "did you mean 'tokens'?"),
    ("9", "tps", "rate", "unknown-unit", "did you mean 'tok/s'?"),
    ("2K", "ms", "time", "bad-suffix", ""),
    ("1e400", "s", "time", "bad-number", ""),
])
def test_convert_problems(text, unit, kind, code, hint):
    value, problem = convert(text, unit, kind, "x")
    assert value is None and problem.code == code and problem.hint == hint


def test_plain_numbers():
    assert plain("4", "concurrency") == (4, None)
    assert plain("3e-4", "lr") == (0.0003, None)
    assert plain("-1", "seed") == (-1, None)
    value, problem = plain("2K", "steps")
    assert value is None and "only for token counts" in problem.message


def test_parse_number():
    assert parse_number("32K") == (32, "K")
    assert parse_number("1.5") == (1.5, None)
    assert parse_number("7") == (7, None) and isinstance(parse_number("7")[0], int)


@pytest.mark.parametrize("value, kind, text", [
    (0.015, "time", "15 ms"), (1.5, "time", "1.5 s"), (0.0003, "time", "300 us"), (512 * 1024**2, "size", "512 MiB"),
    (GiB, "size", "1 GiB"), (0.8, "share", "80%"), (2 * 1024**2, "tokens", "2M tokens"), (1000, "tokens", "1000 tokens"),
    (1.008e12, "bandwidth", "1008 GB/s"), (165e12, "compute", "165 TFLOPS"), (2000.0, "rate", "2000 tok/s"),
])
def test_render(value, kind, text):
    assert render(value, kind) == text


@pytest.mark.parametrize("written", ["15 ms", "0.1 us", "123.456789 s", "7.3 ms", "29%", "57%", "33.3333%",
                                     "0.01%", "99.99%", "1e-3 s", "2.5e-2 %"])
def test_render_round_trips(written):
    """Whatever a user writes, the formatter finds a text that reads back to the same value."""
    number, _, unit = written.replace("%", " %").replace("  ", " ").partition(" ")
    kind = "share" if unit == "%" else "time"
    value = convert(number, unit, kind, "x")[0]
    text = render(value, kind)
    number, _, unit = text.replace("%", " %").partition(" ")
    assert convert(number, unit, kind, "x")[0] == value


def test_fmt_number():
    assert [fmt_number(x) for x in (4, 4.0, 1.5, 0.0003, 1e-05)] == ["4", "4", "1.5", "0.0003", "1e-05"]
