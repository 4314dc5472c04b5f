"""``acc diff``: what a change to a spec did, for a pull-request review.

    acc diff OLD.acspec NEW.acspec        two files
    acc diff --base REV NEW.acspec        NEW against the same path at git revision REV

Each side is checked like ``acc check`` (no weights) and the two reports are compared
(``report.diff``). With ``--base`` the old text comes from ``git cat-file blob REV:PATH``: the
blob's bytes only, no checkout, no filters or hooks (``git show`` would apply textconv drivers the
repository configures), and nothing in it is executed; it is parsed as data like any spec. Files
the old spec names (a parent's config.json, a profile) are read from the working tree; with
``--confine DIR`` they, like the new spec's, must resolve inside DIR. A spec
absent at REV (added by the change) or deleted from the working tree is an "absent" side; an
invalid one is an "invalid" side with its rendered errors.

Exit codes: 0 when the new spec is valid (whatever the verdicts), 2 when it is invalid or the
input cannot be read (a missing file, not a git repository, an unknown revision).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from autocompress.check import check_source, run_check
from autocompress.diagnostics import EXIT_INVALID, EXIT_OK, SpecError
from autocompress.report.diff import build_diff, side


class DiffError(Exception):
    """``acc diff`` cannot compare (unreadable input, git problem): exit code 2."""


@dataclass(frozen=True)
class DiffResult:
    diff: dict
    exit_code: int


def _git(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise DiffError("acc diff --base needs git on PATH") from None


def read_revision(path: str, rev: str) -> str | None:
    """The text of ``path`` at git revision ``rev`` (None: the file does not exist there)."""
    if not rev or rev.startswith("-") or any(ch.isspace() or ch == "\0" for ch in rev):
        raise DiffError(f"--base: a git revision, got {rev!r}")
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder):  # a deleted spec's folder may be gone too
        folder = os.path.dirname(folder)
    top = _git(["rev-parse", "--show-toplevel"], folder)
    if top.returncode != 0:
        raise DiffError(f"{path}: not inside a git repository (--base reads the old spec from git)")
    root = top.stdout.decode().strip()
    if _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], root).returncode != 0:
        raise DiffError(f"--base: unknown git revision {rev!r}")
    rel = os.path.relpath(os.path.realpath(os.path.abspath(path)), os.path.realpath(root)).replace(os.sep, "/")
    if rel.startswith("../"):
        raise DiffError(f"{path}: outside the repository at {root}")
    blob = _git(["cat-file", "blob", f"{rev}:{rel}"], root)
    if blob.returncode != 0:
        return None
    return blob.stdout.decode("utf-8", errors="replace")


def _checked(label: str, path: str, source: str | None, confine: str | None = None) -> dict:
    try:
        result = run_check(path, confine=confine) if source is None else check_source(source, path, confine)
    except SpecError as err:
        err.path = label  # errors point at the side's own name (path@revision)
        return side(label, "invalid", errors=tuple(err.render().splitlines()))
    return side(label, "checked", result.report)


def run_diff(old: str | None, new: str, base: str | None = None, confine: str | None = None) -> DiffResult:
    """The diff of spec ``old`` (or ``new`` at revision ``base``) and spec ``new``. ``confine``: a
    folder that both specs, and every path they name, must resolve inside (``parents.confine``);
    the old text from git is held to it as the new one is."""
    if (old is None) == (base is None):
        raise DiffError("give OLD.acspec NEW.acspec, or --base REV NEW.acspec")
    if base is not None:
        text = read_revision(new, base)
        label = f"{new}@{base}"
        old_side = side(label, "absent") if text is None else _checked(label, new, text, confine)
        there = os.path.lexists if confine else os.path.exists  # confined: a symlink is checked, never followed here
        new_side = _checked(new, new, None, confine) if there(new) else side(new, "absent")
        if old_side["status"] == new_side["status"] == "absent":
            raise DiffError(f"{new}: exists neither in the working tree nor at {base}")
    else:
        for p in (old, new):
            if not (os.path.lexists(p) if confine else os.path.exists(p)):
                raise FileNotFoundError(2, "no such file", p)
            if not confine and not os.path.isfile(p):
                raise DiffError(f"{p}: a folder, expected a .acspec file")
        old_side, new_side = _checked(old, old, None, confine), _checked(new, new, None, confine)
    d = build_diff(old_side, new_side)
    return DiffResult(d, EXIT_INVALID if new_side["status"] == "invalid" else EXIT_OK)
