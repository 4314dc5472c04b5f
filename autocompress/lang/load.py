"""Reading a spec: its text through every stage of the language to the checked, frozen ``Spec``.

parser (syntax -> AST) -> lower (units, names -> projection) -> schema (ranges) -> semantic
(cross-value meaning) -> ``model.spec_from_projection``. All errors of a file come at once, in a
``SpecError``; warnings come back beside the Spec.
"""

from __future__ import annotations

import os

from autocompress.diagnostics import Diagnostic, Span, SpecError
from autocompress.lang import lower, schema, semantic
from autocompress.lang.model import Spec, spec_from_projection
from autocompress.lang.parser import parse_ast


def parse_spec_with_warnings(source: str, path: str = "<spec>", base_dir: str | None = None
                             ) -> tuple[Spec, list[Diagnostic]]:
    """Check ``source`` completely; return the Spec and its warnings, or raise SpecError with
    every error (syntax errors alone when there are any: later checks need a whole file)."""
    if base_dir is None and path not in ("<spec>", "") and not path.startswith("<"):
        base_dir = os.path.dirname(os.path.abspath(path))
    file, diags = parse_ast(source)
    if file is None:
        raise SpecError(diags, path, source)
    p = lower.project(file, base_dir)
    diags = list(p.diagnostics) + schema.check(p) + semantic.check(p)
    errors = [d for d in diags if d.severity == "error"]
    warnings = sorted((d for d in diags if d.severity != "error"), key=lambda d: (d.span.line, d.span.column))
    if errors:
        raise SpecError(errors + warnings, path, source)
    return spec_from_projection(p, path), warnings


def parse_spec(source: str, path: str = "<spec>", base_dir: str | None = None) -> Spec:
    return parse_spec_with_warnings(source, path, base_dir)[0]


def read_spec_file(path) -> str:
    """The text of a spec file, or SpecError for a missing, empty, binary or non-UTF-8 file."""
    p = os.fspath(path)
    where = Span(0, 0)

    def fail(message: str, hint: str = "", code: str = "file") -> SpecError:
        return SpecError([Diagnostic(where, message, hint, "error", code)], p, None)

    try:
        data = open(p, "rb").read()
    except FileNotFoundError:
        raise fail("spec file not found", "check the path; specs usually end in .acspec") from None
    except IsADirectoryError:
        raise fail("this is a folder, not a spec file", "give the path of a .acspec file") from None
    except OSError as e:
        raise fail(f"cannot read the spec file: {e.strerror}") from None
    if b"\x00" in data:
        raise fail("this is a binary file, not a spec (it contains NUL bytes)", "give the path of a .acspec text file",
                   "binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        where = Span(line, col, line, col + 1)
        raise fail(f"the spec is not valid UTF-8 (byte 0x{data[e.start]:02x} at line {line}, column {col})",
                   "save the file as UTF-8", "encoding") from None
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise fail("the spec file is empty" if not text else "the spec file has only whitespace",
                   'a spec needs at least: model "...", target { ... } and a workload <name> { ... }', "empty")
    return text


def load_spec_with_warnings(path) -> tuple[Spec, list[Diagnostic]]:
    p = os.fspath(path)
    return parse_spec_with_warnings(read_spec_file(p), p, os.path.dirname(os.path.abspath(p)))


def load_spec(path) -> Spec:
    return load_spec_with_warnings(path)[0]
