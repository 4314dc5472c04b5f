"""A contract as every command reads it: the spec file parsed once and its parent resolved once.

``load_contract(path)`` reads the file, parses it (``lang``) and resolves its parent
(``parents``); a command makes one at its edge and passes it on, so the check, the build's stages,
the preflight and the verification all read the same parse and the same parent (a ``SpecError``
for a bad file or parent, pointing at its line, before any work).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from autocompress.diagnostics import Diagnostic
from autocompress.lang.load import parse_spec_with_warnings, read_spec_file
from autocompress.lang.model import Spec
from autocompress.parents.confine import Confinement, check_spec
from autocompress.parents.resolve import ParentInfo, resolve_parent


@dataclass(frozen=True)
class Contract:
    spec: Spec
    source: str  # the file's text (what the spec was parsed from; diagnostics render against it)
    path: str  # the spec file, as given
    base: str  # its folder, absolute: relative paths in the spec are taken from it
    parent: ParentInfo
    warnings: tuple[Diagnostic, ...] = ()


def parse_contract(source: str, path: str, confine: Confinement | None = None) -> Contract:
    """The contract of spec text ``source`` standing at ``path`` (relative paths from its folder).
    ``confine``: every path the spec names must resolve inside that folder (``acc check --confine``),
    checked before the spec is parsed for meaning (``parents.confine``)."""
    base = os.path.dirname(os.path.abspath(path))
    if confine is not None:
        check_spec(path, source, confine)
    spec, warnings = parse_spec_with_warnings(source, path, base)
    parent = resolve_parent(spec.parent, base, spec_path=path, source=source, confine=confine)
    return Contract(spec, source, path, base, parent, tuple(warnings))


def load_contract(path: str | os.PathLike, confine: Confinement | None = None) -> Contract:
    """The contract of the spec file at ``path``: read, parsed and its parent resolved, once."""
    p = os.fspath(path)
    if confine is not None:
        check_spec(p, None, confine)  # the spec file itself, before it is read
    return parse_contract(read_spec_file(p), p, confine)


def as_contract(spec: Contract | str | os.PathLike) -> Contract:
    """``spec`` itself, or the contract of the spec file it names."""
    return spec if isinstance(spec, Contract) else load_contract(spec)


__all__ = ["Contract", "as_contract", "load_contract", "parse_contract"]
