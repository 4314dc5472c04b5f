"""Units of the .acspec language and their conversion to SI (bytes, seconds, tok/s, fractions).

Sizes are binary (KiB = 1024 B): memory is allocated in pages of powers of two, and a '512 MB'
in a contract is almost always meant as MiB, so decimal sizes are refused with a hint instead of
being guessed. Bandwidth (GB/s, TB/s) and compute (TFLOPS, PFLOPS) are decimal, as on vendor
sheets. Token counts may carry a K (1024) or M (1024*1024) suffix on the number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autocompress.diagnostics import did_you_mean

# kind -> (description, {unit: factor to SI}); units listed largest first (fmt prefers them).
KINDS: dict[str, tuple[str, dict[str, float]]] = {
    "size": ("a memory size", {"TiB": 1024.0**4, "GiB": 1024.0**3, "MiB": 1024.0**2, "KiB": 1024.0, "B": 1.0}),
    "bandwidth": ("a bandwidth", {"TB/s": 1e12, "GB/s": 1e9}),
    "compute": ("a compute rate", {"PFLOPS": 1e15, "TFLOPS": 1e12}),
    "time": ("a time", {"s": 1.0, "ms": 1e-3, "us": 1e-6}),
    "tokens": ("a token count", {"tokens": 1.0}),
    "rate": ("a rate", {"tok/s": 1.0}),
    "share": ("a share", {"%": 0.01}),
}
UNIT_KIND = {u: k for k, (_, units) in KINDS.items() for u in units}
SCALES = {"K": 1024, "M": 1024 * 1024}  # token-count suffixes (binary, like context lengths)

# Spellings people write for units we know: a precise hint instead of a fuzzy one.
ALIASES = {
    "sec": "s", "secs": "s", "second": "s", "seconds": "s", "msec": "ms", "millis": "ms",
    "usec": "us", "µs": "us", "tok": "tokens", "token": "tokens", "toks": "tokens",
    "tokens/s": "tok/s", "token/s": "tok/s", "tps": "tok/s", "toks/s": "tok/s",
    "percent": "%", "KB": "KiB", "MB": "MiB", "GB": "GiB", "TB": "TiB", "kB": "KiB", "Mb": "MiB",
    "Gb": "GiB", "K": "KiB", "M": "MiB", "G": "GiB", "GiB/s": "GB/s", "TiB/s": "TB/s",
    "GBps": "GB/s", "TBps": "TB/s", "TFLOP/s": "TFLOPS", "tflops": "TFLOPS", "PFLOP/s": "PFLOPS",
}
DIVISORS = {"ms": 1000, "us": 1_000_000, "%": 100}
DECIMAL_SIZES = {"KB", "MB", "GB", "TB", "kB", "Mb", "Gb"}


@dataclass(frozen=True)
class UnitProblem:
    """Why a quantity cannot be converted: ``where`` is 'number' or 'unit'."""

    message: str
    hint: str
    where: str
    code: str


def parse_number(text: str) -> tuple[float | int, str | None]:
    """'32K' -> (32, 'K'); '3e-4' -> (0.0003, None). Integers stay int."""
    scale = text[-1] if text[-1] in SCALES else None
    body = text[:-1] if scale else text
    try:
        value: float | int = int(body)
    except ValueError:
        value = float(body)
    return value, scale


def plain(text: str, what: str) -> tuple[float | int | None, UnitProblem | None]:
    """A unit-less number (concurrency 4, lr 3e-4)."""
    value, scale = parse_number(text)
    if scale:
        return None, UnitProblem(f"{what} takes a plain number; the {scale} suffix is only for token counts",
                                 f"write the full number, e.g. '{what} {value * SCALES[scale]}'", "number", "bad-suffix")
    return _finite(value, what)


def _finite(value, what):
    if isinstance(value, float) and not math.isfinite(value):
        return None, UnitProblem(f"{what} is too large: the value overflows a 64-bit float", "", "number", "bad-number")
    return value, None


def convert(text: str, unit: str | None, kind: str, what: str) -> tuple[float | int | None, UnitProblem | None]:
    """Number text + unit -> SI value for a setting that needs ``kind``; or the problem."""
    desc, units = KINDS[kind]
    allowed = ", ".join(units)
    value, scale = parse_number(text)
    example = f"{what} {text} {next(iter(units)) if kind != 'tokens' else 'tokens'}"
    if unit is None:
        return None, UnitProblem(f"{what} needs a unit: {desc} ({allowed})", f"write e.g. '{example}'", "number", "missing-unit")
    if scale and kind != "tokens":
        return None, UnitProblem(f"the {scale} suffix is only for token counts; {what} expects {desc} ({allowed})",
                                 "", "number", "bad-suffix")
    if unit not in units:
        got_kind = UNIT_KIND.get(unit)
        if kind == "size" and unit in DECIMAL_SIZES:
            return None, UnitProblem(f"{what} expects {desc} in binary units ({allowed}), got '{unit}'",
                                     f"memory sizes use binary units: did you mean {ALIASES[unit]}?", "unit", "decimal-size")
        if got_kind:
            return None, UnitProblem(f"{what} expects {desc} ({allowed}), got '{unit}' ({KINDS[got_kind][0]})", "", "unit", "wrong-unit")
        alias = ALIASES.get(unit)
        hint = f"did you mean '{alias}'?" if alias in units else did_you_mean(unit, units)
        return None, UnitProblem(f"unknown unit '{unit}': {what} expects {desc} ({allowed})", hint, "unit", "unknown-unit")
    si = value * (SCALES[scale] if scale else 1)
    if unit in DIVISORS:  # divide by 1000 rather than multiply by 1e-3: 15 ms -> exactly 0.015
        si = si / DIVISORS[unit]
    elif units[unit] != 1.0:
        si = si * units[unit]
    if kind in ("size", "tokens") and isinstance(si, float) and si.is_integer():
        si = int(si)  # bytes and tokens are counts
    return _finite(si, what)


def render(value: float, kind: str) -> str:
    """The shortest '<number> <unit>' that converts back to exactly ``value`` (for fmt).

    Ties go to the larger unit ('1 GiB', not '1024 MiB')."""
    _, units = KINDS[kind]
    found: list[tuple[int, int, str]] = []
    for order, unit in enumerate(units):
        for text in _candidates(value, units[unit], kind):
            got, problem = convert(text, unit, kind, "x")
            if problem is None and got == value:
                found.append((len(text), not float(text.rstrip("KM")).is_integer(), order,
                              f"{text}{'' if unit == '%' else ' '}{unit}"))
    if found:
        return min(found)[3]
    unit = next(reversed(units))  # the base unit: exact for every value but '%'
    return f"{fmt_number(value / units[unit])}{'' if unit == '%' else ' '}{unit}"


def _candidates(value: float, factor: float, kind: str):
    x = value / factor
    for unit, div in DIVISORS.items():
        if KINDS[UNIT_KIND[unit]][1][unit] == factor:
            x = value * div
    if kind == "tokens" and float(x).is_integer():
        n = int(x)
        for s, m in (("M", SCALES["M"]), ("K", SCALES["K"])):
            if n >= m and n % m == 0:
                yield f"{n // m}{s}"
    seen = set()
    for y in (x, value * (1 / factor) if factor else x, round(x, 9), round(x, 6)):
        for k in range(-2, 3):
            z = y
            for _ in range(abs(k)):
                z = math.nextafter(z, math.inf if k > 0 else -math.inf)
            t = fmt_number(z)
            if t not in seen:
                seen.add(t)
                yield t


def fmt_number(x: float | int) -> str:
    """Shortest text for a number that reads back to the same value: 4, 1.5, 0.0003, 1e-05."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x) if isinstance(x, float) else str(x)
