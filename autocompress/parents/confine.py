"""``--confine DIR``: the paths a spec names must stay inside DIR (``acc check``, ``acc diff``).

A spec from a pull request is untrusted text: its ``model`` line, ``profile``, ``data`` and
``output`` strings could name any file of the machine that checks it, and a check's messages would
then tell the pull request about that file. Under confinement every path a spec can name is
resolved here before anything opens or stats it, and one outside DIR is an error at its line:col
with a message that depends on the text as written only, never on what is (or is not) there.

How a path is resolved (``Confinement.resolve``): relative paths start at the spec's folder,
which must itself be inside DIR. The path is walked one component at a time from DIR, following
each symlink met on the way (its target is read with ``readlink``, relative or absolute), and
every step must stay inside DIR: a ``..`` above DIR, an absolute path or symlink target outside
it, a symlinked folder pointing out, more than 40 symlinks, or a leading ``~`` (home folders are
never expanded: ``~user`` would tell whether that user exists) is refused. Only entries inside DIR
are ever looked at (``lstat``/``readlink``), so whether a refused path exists outside DIR cannot
change the answer. The result has no symlink left in it: the parent's reader
(``resolve.resolve_parent``) opens that path.

Wildcards (``data "corpus/*.jsonl"``) are walked as literal names up to the first wildcard, and
no ``..`` may follow one; ``acc check`` expands no glob (it reads no data).
"""

from __future__ import annotations

import os
import stat

from autocompress.diagnostics import Diagnostic, Span, SpecError
from autocompress.lang.parser import parse_ast

MAX_SYMLINKS = 40  # as Linux's path walk (ELOOP)
WILDCARDS = frozenset("*?[")
HINT = ("under --confine a spec may name only files inside that folder (symlinks followed, no '~'): give a path "
        "inside it, relative to the spec, or a built-in alias")


class Confinement:
    """The folder a check is confined to. ``folder`` is the operator's (trusted) argument."""

    def __init__(self, folder: str | os.PathLike):
        given = os.path.abspath(os.fspath(folder))
        self.root = os.path.realpath(given)
        self.prefixes = tuple(dict.fromkeys((self.root, given)))  # DIR as resolved and as given

    def __repr__(self) -> str:
        return f"Confinement({self.root!r})"

    def _relative(self, path: str) -> list[str] | None:
        """The components of absolute ``path`` below DIR, or None when it does not start inside DIR."""
        for prefix in self.prefixes:
            if path == prefix or path.startswith(prefix.rstrip(os.sep) + os.sep):
                return path[len(prefix):].split(os.sep)
        return None

    def resolve(self, written: str, base_dir: str | os.PathLike | None = None) -> str | None:
        """The real path inside DIR of ``written`` (relative paths from ``base_dir``, an absolute
        folder inside DIR), or None when any step of its resolution leaves DIR."""
        if not written or written.startswith("~") or "\0" in written:
            return None
        path = os.path.join(os.getcwd(), os.fspath(base_dir or self.root), written)  # not normalized:
        rest = self._relative(path)  # a '..' after a symlink is the target's parent, not lexical
        if rest is None:
            return None
        pending = [c for c in reversed(rest) if c not in ("", ".")]
        cur, hops, wild = self.root, 0, False
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if cur == self.root or wild:
                    return None
                cur = os.path.dirname(cur)
                continue
            nxt = os.path.join(cur, part)
            if wild or WILDCARDS & set(part):
                wild, cur = True, nxt
                continue
            try:
                st = os.lstat(nxt)
            except (OSError, ValueError):  # missing (inside DIR): the rest is taken as written
                cur = nxt
                continue
            if not stat.S_ISLNK(st.st_mode):
                cur = nxt
                continue
            hops += 1
            if hops > MAX_SYMLINKS:
                return None
            try:
                target = os.readlink(nxt)
            except OSError:  # changed under us: refused like a way out
                return None
            if os.path.isabs(target):
                inner = self._relative(target)
                if inner is None:
                    return None
                cur = self.root
            else:
                inner = target.split(os.sep)
            pending.extend(c for c in reversed(inner) if c not in ("", "."))
        return cur


def outside(span: Span, what: str, written: str) -> Diagnostic:
    """The one diagnostic of a refused path: the text as written, nothing read from the disk."""
    return Diagnostic(span, f"{what} '{written}' is outside the --confine folder", HINT, code="confined")


def spec_paths(file) -> list[tuple[str, str, Span]]:
    """(what, text as written, span) of every path a parsed spec (``lang.ast.SpecFile``) names:
    the model (an alias name too: a bare name is a folder when one of that name is beside the
    spec), the output folder, the target's profile, the distill and evaluate data files."""
    out = []
    for sec in file.sections:
        if sec.kind in ("model", "output") and sec.label is not None:
            out.append(("parent model" if sec.kind == "model" else "output folder", sec.label.text, sec.label.span))
        for item in sec.items:
            key = getattr(item, "key", "")
            if sec.kind == "target" and key == "profile" and hasattr(item.value, "text"):
                out.append(("calibration profile", item.value.text, item.value.span))
            elif sec.kind in ("distill", "evaluate") and key == "data":
                values = item.value if isinstance(item.value, tuple) else (item.value,)
                out.extend((f"{sec.kind} data", v.text, v.span) for v in values if hasattr(v, "text"))
    return out


def check_spec(path: str, source: str | None, confine: Confinement) -> None:
    """Raise ``SpecError`` when the spec file at ``path``, or any path its text ``source`` names,
    leaves DIR (``source`` None: the spec file's own path only, checked before it is read).

    ``source`` may be another text than the file's (``acc diff --base``): relative paths in it
    still resolve from ``path``'s folder. It runs before the spec is parsed for meaning, since
    lowering looks the model path up on the disk (a folder, or an alias), and must meet only paths
    inside DIR."""
    real = confine.resolve(os.fspath(path), os.getcwd())
    if real is None:
        raise SpecError([Diagnostic(Span(0, 0), "the spec file is outside the --confine folder", HINT,
                                    code="confined")], os.fspath(path), None)
    if source is None:
        return
    file, _ = parse_ast(source)
    if file is None:
        return  # syntax errors alone: nothing is looked up
    base = os.path.dirname(real)
    errors = [outside(span, what, text) for what, text, span in spec_paths(file)
              if confine.resolve(text, base) is None]
    if errors:
        raise SpecError(errors, os.fspath(path), source)
