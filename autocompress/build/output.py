"""Output safety: which folders ``acc build`` may write, decided before any work starts.

A spec names its output folder, and a spec can come from a pull request, so the folder is
checked like any other input. Refused, with exit 2 at the ``output`` line:

* a filesystem root, the user's home folder or any folder above it;
* the spec's own folder or any folder above it (replacing it would delete the spec itself);
* a file, a symbolic link, or an existing folder that holds files but no autocompress manifest
  (``export.manifest``): it is the user's;
* an earlier autocompress output of *another* spec, unless ``--force``.

An earlier output of the same spec (its manifest names this spec file) is replaced atomically.
The baseline's ``<output>-uniform`` sibling follows the same rules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autocompress.diagnostics import Diagnostic, SpecError
from autocompress.export.manifest import MANIFEST, manifest_spec, read_manifest, replaceable


@dataclass(frozen=True)
class OutputPlan:
    folder: Path  # resolved
    replaces: bool  # an earlier autocompress output is there and will be replaced


def _above_or_equal(a: Path, b: Path) -> bool:
    """``a`` is ``b`` or one of its ancestors."""
    return a == b or a in b.parents


def _problem(out: Path, spec_file: Path, force: bool) -> str | None:
    home = Path.home().resolve()
    if out.parent == out:
        return f"output {out} is a filesystem root"
    if _above_or_equal(out, home):
        return f"output {out} is the home folder or above it"
    if _above_or_equal(out, spec_file.parent):
        return f"output {out} is the folder of the spec or above it; building there would replace the spec itself"
    ok, why = replaceable(out)
    if not ok:
        return f"output {out} exists and {why}"
    if read_manifest(out) is not None:
        built_from = manifest_spec(out)
        if built_from != spec_file and not force:
            other = built_from.name if built_from else "an unnamed spec"
            return (f"output {out} holds an autocompress output of {other}, not of {spec_file.name}; "
                    "pass --force to replace it")
    return None


def plan_output(spec, spec_path: str | os.PathLike, folder: str | os.PathLike, force: bool = False,
                source: str | None = None) -> OutputPlan:
    """The output folder ``folder`` (the spec's ``output``, resolved against the spec's folder),
    or ``SpecError`` pointing at the ``output`` line."""
    spec_file = Path(spec_path).resolve()
    out = Path(os.path.abspath(folder))
    if not out.is_symlink():
        out = out.resolve()
    why = _problem(out, spec_file, force)
    if why is not None:
        hint = (f"name a new folder (e.g. output \"out/{spec_file.stem}\"); autocompress replaces only folders "
                f"that hold its {MANIFEST}")
        raise SpecError([Diagnostic(spec.output_span, why, hint, "error", "output")], str(spec_path), source)
    return OutputPlan(out, out.exists() and read_manifest(out) is not None)
