"""User-facing errors: a span in the user's text, a message "what, allowed, got", an optional hint.

Every stage that rejects user input raises ``SpecError`` carrying one or more ``Diagnostic``s;
the CLI renders them all at once (sorted by position) with the source line and a caret, and maps
them to the documented exit codes. Nothing here imports anything heavy.
"""

from __future__ import annotations

import difflib
import errno
from dataclasses import dataclass
from typing import Iterable, Sequence

# Exit codes are part of the CLI contract (README "Exit codes").
EXIT_OK = 0  # feasible / success
EXIT_INFEASIBLE = 1  # the contract cannot be met
EXIT_INVALID = 2  # the spec (or command line) is invalid
EXIT_INTERNAL = 3  # a bug in autocompress: please report it
EXIT_NOT_FOUND = 4  # no architecture found, but infeasibility is not proved (rounding, repair or the solver)
EXIT_PEER = 5  # a distributed build lost a process (killed, or timed out): rerun to resume
EXIT_MEASURE = 6  # the engine could not measure a model here (crashed, timed out, niceness refused): rerun
EXIT_DISK_FULL = 7  # no space left on device (ENOSPC): free space and rerun; completed stages are kept
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as a shell reports it: rerun the same command to resume

# the commands that keep nothing to resume: an interrupt just stops them
STATELESS_COMMANDS = ("check", "diff", "fmt")


def interrupted_message(command: str | None) -> str:
    """The one line a Ctrl-C (SIGINT) ends a command with, exit 130: every other command's stages
    are cached, and a stage interrupted mid-way leaves only a temporary folder its rerun removes."""
    if command in STATELESS_COMMANDS:
        return "interrupted"
    return "interrupted: rerun the same command to resume"


@dataclass(frozen=True, order=True)
class Span:
    """1-based line/column of the first character, plus the end (exclusive) when known."""

    line: int
    column: int
    end_line: int = 0
    end_column: int = 0

    @classmethod
    def point(cls, line: int, column: int) -> "Span":
        return cls(line, column, line, column + 1)


NO_SPAN = Span(0, 0)


@dataclass(frozen=True)
class Diagnostic:
    span: Span
    message: str
    hint: str = ""
    severity: str = "error"  # "error" | "warning"
    code: str = ""  # short stable id, e.g. "unknown-name", "missing-unit"

    def render(self, path: str, source: str | None) -> str:
        """Render as ``path:line:col: error: message`` + source line + caret + hint."""
        loc = f"{path}:{self.span.line}:{self.span.column}" if self.span.line else path
        out = [f"{loc}: {self.severity}: {self.message}"]
        if source is not None and self.span.line:
            lines = source.splitlines()
            if 0 < self.span.line <= len(lines):
                text = lines[self.span.line - 1].replace("\t", " ")
                width = 1
                if self.span.end_line == self.span.line and self.span.end_column > self.span.column:
                    width = self.span.end_column - self.span.column
                gutter = f"{self.span.line:>4} | "
                out.append(gutter + text)
                out.append(" " * (len(gutter) + self.span.column - 1) + "^" * max(1, width))
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)


class SpecError(Exception):
    """One or more user errors in a spec (or in a file the spec names)."""

    def __init__(self, diagnostics: Sequence[Diagnostic], path: str = "<spec>", source: str | None = None):
        self.diagnostics = sorted(diagnostics, key=lambda d: (d.span.line, d.span.column))
        self.path = path
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render(self.path, self.source) for d in self.diagnostics)


def did_you_mean(got: str, allowed: Iterable[str]) -> str:
    """A 'did you mean X?' hint when a close name exists, else ''."""
    allowed = list(allowed)
    close = difflib.get_close_matches(got, allowed, n=1, cutoff=0.6)
    if not close:
        # rtx-5007 vs rtx-5070: transpositions score low on ratio; compare sorted characters too.
        key = sorted(got)
        close = [a for a in allowed if sorted(a) == key][:1]
    return f"did you mean '{close[0]}'?" if close else ""


def suggest(got: str, allowed: Iterable[str]) -> str:
    """'did you mean X?' for a name of the language: a swap of two neighbouring characters first
    (rtx-5007 -> rtx-5070, which plain similarity would send to rtx-5090), then ``did_you_mean``."""
    allowed = list(allowed)
    for a in allowed:
        if len(a) == len(got):
            diff = [i for i in range(len(a)) if a[i] != got[i]]
            if len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == got[diff[1]] and a[diff[1]] == got[diff[0]]:
                return f"did you mean '{a}'?"
    return did_you_mean(got, allowed)


def one_of(allowed: Iterable[str]) -> str:
    names = sorted(allowed)
    if len(names) > 12:
        return ", ".join(names[:12]) + f", ... ({len(names)} in all)"
    return ", ".join(names)


class ImportanceFileError(ValueError):
    """An importance file given on the command line is unreadable or does not fit the parent (exit 2)."""


class DiskFullError(OSError):
    """No space left on device while writing ``folder``; ``need_bytes``: about how much more the
    write needed, when the writer knew (else None). The CLI's exit 7."""

    def __init__(self, folder: str, need_bytes: int | None = None):
        super().__init__(errno.ENOSPC, "no space left on device", str(folder))
        self.folder = str(folder)
        self.need_bytes = need_bytes


class MeasureError(RuntimeError):
    """The engine could not load or run a model (the worker's stderr tail says why): exit 6, not a bug."""


class BuildError(Exception):
    """A build that cannot run (infeasible contract, parent without weights, no architecture
    found): the message for the user and the exit code the CLI returns (the table above)."""

    def __init__(self, message: str, exit_code: int = EXIT_INVALID):
        super().__init__(message)
        self.exit_code = exit_code
