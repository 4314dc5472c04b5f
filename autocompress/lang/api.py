"""The .acspec language: parse, check and format deployment contracts.

    parse_spec(source, path="<spec>", base_dir=None) -> Spec       # SpecError with all errors
    parse_spec_with_warnings(...) -> (Spec, [warning Diagnostic])
    load_spec(path) -> Spec                                       # reads the file
    load_spec_with_warnings(path) -> (Spec, [warning Diagnostic])
    read_spec_file(path) -> str                                   # SpecError for an unreadable file
    format_spec(spec_or_source) -> str                            # canonical text

Reading is ``load``'s (parser -> lower -> schema -> semantic -> model.spec_from_projection),
formatting ``fmt``'s.
"""

from __future__ import annotations

from autocompress.diagnostics import SpecError
from autocompress.lang.fmt import format_spec
from autocompress.lang.load import (load_spec, load_spec_with_warnings, parse_spec, parse_spec_with_warnings,
                                    read_spec_file)
from autocompress.lang.model import Spec

__all__ = ["parse_spec", "parse_spec_with_warnings", "load_spec", "load_spec_with_warnings", "read_spec_file",
           "format_spec", "Spec", "SpecError"]
