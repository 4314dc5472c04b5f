"""The ``acc`` command line: parse the arguments, run the command's module, map errors to exit codes.

Exit codes (documented in the README):
  0  success; for ``acc check``: the contract is feasible
  1  the contract is infeasible, proved (``acc check``, ``acc build``), or not met (``acc verify``)
  2  invalid input: a spec, profile, output folder or command-line error, rendered with file:line:col
  3  internal error: a bug in autocompress; the message asks to report it
  4  no architecture was found, but infeasibility is not proved (``acc check``, ``acc build``)
  5  a distributed ``acc build`` lost a process (killed, or stopped answering): rerunning resumes
  6  a measurement failed (the engine worker crashed or ran past its time limit): rerunning resumes
  7  no space left on device (ENOSPC): one line names the folder (and the space needed when known);
     every stage writes under a temporary name, so nothing half-written is kept: free space, rerun
130  interrupted (Ctrl-C, SIGINT): "interrupted: rerun the same command to resume" (check, diff and
     fmt keep nothing to resume: "interrupted"); never a traceback
A path given on the command line that is missing, a folder where a file is expected (or the
reverse) or unreadable is one line naming it, exit 2.
(``acc eval``: 0, or 2 for a bad argument or benchmark data that is not installed)

Layering: ``acc check`` must answer in well under two seconds, and a repeated check from the
cache in a fraction of one, so this module, ``check_cmd`` and ``diff_cmd`` import only light modules
(no torch, and until a check misses the cache no parser or solver: ``autocompress.check``). Every
other command's module is imported by the dispatch table below only when that command runs:
``fmt`` loads the parser, ``build`` and ``eval`` torch and their stages, ``verify`` and ``profile``
the measurement code.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator

from autocompress import __version__
from autocompress.cli import check_cmd, diff_cmd
from autocompress.cli.parser import build_parser
from autocompress.diagnostics import (EXIT_DISK_FULL, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_MEASURE,
                                      DiskFullError, ImportanceFileError, MeasureError, SpecError,
                                      interrupted_message)

BUG_HINT = "this is a bug in autocompress {v}; please report it with the spec and this message"


def _print_errors(err: SpecError) -> None:
    # Plain text, no markup: the rendered caret lines must keep their columns.
    text = err.render()
    sys.stderr.write(text + "\n")
    n = len([d for d in err.diagnostics if d.severity == "error"])
    sys.stderr.write(f"{n} error{'s' if n != 1 else ''} in {err.path}\n")


# ---- dispatch: each command's module, imported when the command runs ---------------------------------

@contextlib.contextmanager
def held_sigint() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, then raise it. torch's import runs C++ that a
    KeyboardInterrupt can cross: ``bench.faults`` saw one in its import of triton end in SIGABRT
    after a traceback, instead of the one line and exit 130. The import takes seconds at most."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
    if got:
        raise KeyboardInterrupt


def _fmt(args) -> int:
    from autocompress.cli import fmt_cmd  # the parser (lark)

    return fmt_cmd.run(args)


def _build(args) -> int:
    if "OMP_WAIT_POLICY" not in os.environ:
        # Set before torch loads. OpenMP threads that spin at every barrier lose ~10x on a host shared
        # with other work (a HellaSwag forward took 5.4 s instead of 0.47 s here); the build's own math
        # waits passively. Engine measurements keep the engine's default (``measure.runner.worker_env``
        # drops it).
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ["ACC_SET_OMP_WAIT_POLICY"] = "1"
    if importlib.util.find_spec("torch") is None:
        sys.stderr.write("acc build needs torch and transformers: install them with scripts/install-full.sh\n")
        return EXIT_INVALID
    with held_sigint():
        from autocompress.cli import build_cmd  # torch and every stage of the build

    return build_cmd.run(args)


def _verify(args) -> int:
    from autocompress.cli import verify_cmd  # the exact cost model and the measurement code

    return verify_cmd.run(args)


def _profile(args) -> int:
    from autocompress.cli import profile_cmd  # the measurement code and the fit

    return profile_cmd.run(args)


def _eval(args) -> int:
    # set before torch loads: on shared cores spinning OpenMP threads made scoring ~10x slower in wall time
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    with held_sigint():
        from autocompress.cli import eval_cmd  # torch, the benchmarks' data and scorer

    return eval_cmd.run(args)


# what a path given on the command line was, when the OS refused it
_OS_REASONS = {errno.ENOENT: "no such file or folder", errno.EISDIR: "is a folder, expected a file",
               errno.ENOTDIR: "is not a folder (or a part of the path is a file)",
               errno.EACCES: "permission denied: cannot be read or written", errno.EPERM: "operation not permitted"}


# A write in Rust (safetensors' ``save_file``) raises the library's own error, with the OS error
# only in its text: "Error while serializing: I/O error: No space left on device (os error 28)".
_RUST_ENOSPC = f"(os error {errno.ENOSPC})"


def disk_full(err: BaseException) -> OSError | None:
    """The ENOSPC error behind ``err`` (itself or one it was raised from; a Rust writer's error that
    says so in its text, as an ``OSError`` with its traceback), else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            return err
        if not isinstance(err, OSError) and _RUST_ENOSPC in str(err):
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)).with_traceback(err.__traceback__)
        err = err.__cause__ or err.__context__
    return None


# a temporary name of ``cache.atomic_write_bytes`` (.NAME.XXXX.tmp) or ``cache.atomic_dir`` (.NAME.tmp-XXXX)
_TEMPORARY = re.compile(r"^\.(?P<name>.+?)\.(?:[^./]+\.tmp|tmp-[^/]+)$")


def shown_path(path: str | os.PathLike) -> str:
    """``path`` with each temporary name replaced by the name it was to become."""
    parts = Path(os.fspath(path)).parts
    return str(Path(*[m.group("name") if (m := _TEMPORARY.match(p)) else p for p in parts])) if parts else ""


def _write_site(err: BaseException) -> tuple[str | None, int | None]:
    """(the file or folder being written, the bytes it was to hold) where ``err`` was raised: the
    error's own file name, else the innermost of our frames that names one (``path``, ``tmp``,
    ``final``, ``folder``: ``cache.atomic_write_bytes`` and ``atomic_dir`` do, and a stage's function
    its temporary folder ``tmp``, which ``run_stage`` holds beside its ``final``); a file object's
    write error carries no name, nor does safetensors' Rust writer."""
    size = None
    tb, frames = err.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    name = err.filename if isinstance(err, OSError) and err.filename else None
    for frame in reversed(frames):
        if not frame.f_globals.get("__name__", "").startswith("autocompress"):
            continue
        loc = frame.f_locals
        if size is None and isinstance(loc.get("data"), (bytes, bytearray)):
            size = len(loc["data"])
        if name is None:
            name = next((os.fspath(loc[k]) for k in ("path", "tmp", "final", "folder")
                         if isinstance(loc.get(k), (str, os.PathLike))), None)
        if name is not None:
            break
    return name, size


def disk_full_message(err: OSError) -> str:
    """``no space left on device writing <folder>: need about <N> MiB more`` (the size when known:
    what the write was to hold, less what is free now that its temporary file is gone)."""
    if isinstance(err, DiskFullError):
        folder, need = err.folder, err.need_bytes
    else:
        name, size = _write_site(err)
        folder, need = None, None
        if name:
            shown = shown_path(os.path.abspath(name))
            # a stage's temporary folder (``atomic_dir``: ``.NAME.tmp-XXXX``, gone by now) is the folder
            # being written, shown by the name it was to have; a file's folder is its parent
            made = re.match(r"^\..+\.tmp-[^/]+$", os.path.basename(os.path.normpath(name)))
            folder = shown if made or os.path.isdir(shown) else os.path.dirname(shown)
        if folder and size:
            try:
                st = os.statvfs(folder)
                need = max(size - st.f_bavail * st.f_frsize, 2**20)
            except OSError:
                need = size
    text = f"no space left on device writing {folder or 'a file'}"
    if need:
        text += f": need about {max(1, -(-need // 2**20))} MiB more"
    return text + "; free space and rerun the same command: the stages already done are kept"


def os_error_message(err: OSError) -> str:
    """One line naming the path (the destination of a rename, without temporary names) and what
    was wrong with it."""
    what = _OS_REASONS.get(err.errno, err.strerror or type(err).__name__)
    return f"{shown_path(err.filename2 or err.filename)}: error: {what}"


COMMANDS = {"check": check_cmd.run, "build": _build, "fmt": _fmt, "verify": _verify, "profile": _profile,
            "diff": diff_cmd.run, "eval": _eval}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return EXIT_INVALID
    try:
        return COMMANDS[args.command](args)
    except SpecError as err:
        _print_errors(err)
        return EXIT_INVALID
    except ImportanceFileError as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_INVALID
    except KeyboardInterrupt:
        # a stage interrupted mid-way leaves only its temporary folder, which the rerun removes
        # (``build.stages``); the stages before it are cached
        sys.stderr.write(interrupted_message(args.command) + "\n")
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - the last line of defence: never a bare traceback
        full = disk_full(err)
        if full is not None:
            sys.stderr.write(disk_full_message(full) + "\n")
            return EXIT_DISK_FULL
        if isinstance(err, OSError) and err.filename and err.errno in _OS_REASONS:
            sys.stderr.write(os_error_message(err) + "\n")
            return EXIT_INVALID
        if os.environ.get("ACC_DEBUG"):
            raise
        if isinstance(err, MeasureError):
            # Not a bug: the engine worker crashed, ran past its time limit (a busy host) or could not
            # take ACC_MEASURE_NICE. The stages before it are cached: the same command resumes there.
            sys.stderr.write(f"measurement failed: {err}\n"
                             "the stages before it are cached: rerun the same command, on a quieter machine or "
                             "with ACC_MEASURE_NICE=-10 as root (README \"Measuring on a shared machine\")\n")
            return EXIT_MEASURE
        sys.stderr.write(f"internal error: {type(err).__name__}: {err}\n")
        sys.stderr.write(BUG_HINT.format(v=__version__) + " (set ACC_DEBUG=1 for the traceback)\n")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
