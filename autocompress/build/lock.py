"""Locks between processes that share a work, cache or output folder: ``fcntl.flock`` on a lock file.

A lock file holds its holder's pid and command line (one JSON line), for the messages only: the
kernel's ``flock`` is what excludes, and it is released when its holder dies however it dies
(SIGKILL included), so a lock file left by a killed process is *stale*: the next process takes the
lock at once, says so (naming the dead pid), and writes its own pid. Lock files are never removed
(removing one while another process waits on it would let a third lock a new file beside it).

Two uses:

* ``hold``: refuse when another process holds the lock (``LockBusy``, exit 2, naming its pid and
  command). ``acc build`` holds its output folder's lock for the whole build: a second build of the
  same spec (same output) refuses rather than waits, so a user who started it twice by mistake
  learns so at once instead of watching a hung terminal.
* ``wait_for``: block until the holder is done, with one log line ``waiting for <what> (pid N)``.
  A stage, the teacher's top-k cache and the token cache are computed under it, so a process that
  needs what another is computing waits and then finds the finished result instead of computing it
  twice.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from autocompress.diagnostics import EXIT_INVALID, BuildError


class LockBusy(BuildError):
    """Another live process holds the lock (exit 2). ``pid``: the holder's, or None when unreadable."""

    def __init__(self, message: str, pid: int | None):
        super().__init__(message, EXIT_INVALID)
        self.pid = pid


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def holder(path: str | os.PathLike) -> dict:
    """What the lock file says about its (last) holder: ``{"pid": int, "command": str}``, or {}."""
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) and isinstance(info.get("pid"), int) else {}


def lock_path(folder: str | os.PathLike) -> Path:
    """The lock file of a folder whose listing must hold only its data (an output folder, teacher
    outputs, token caches), outside it: ``<tmp>/autocompress-<uid>/locks/<digest of the folder's absolute path>.lock``.
    Processes of one user on one machine share it, which is whom ``flock`` excludes anyway."""
    name = hashlib.sha256(os.path.realpath(folder).encode()).hexdigest()[:32]
    return Path(tempfile.gettempdir()) / f"autocompress-{os.getuid()}" / "locks" / f"{name}.lock"


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)  # not inherited by engine workers


def _record(fd: int, path: Path, log: Callable[[str], None]) -> None:
    """Our lock now: say so if a dead process's record was there, and write ours."""
    was = holder(path)
    if was and was["pid"] != os.getpid() and not pid_alive(was["pid"]):
        log(f"taking over the stale lock {path} of pid {was['pid']} (no longer running)")
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv)}) + "\n").encode(), 0)


def _try(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


@contextlib.contextmanager
def hold(path: str | os.PathLike, what: str, log: Callable[[str], None] = _stderr) -> Iterator[None]:
    """Hold the lock ``path`` for the block, or raise ``LockBusy`` at once when a live process holds it.
    ``what``: the thing locked, for the message ("output out/tiny")."""
    path = Path(path)
    fd = _open(path)
    try:
        if not _try(fd, fcntl.LOCK_EX):
            info = holder(path)
            pid = info.get("pid")
            who = f"pid {pid} ({info.get('command', '?')})" if pid else "another process"
            raise LockBusy(f"{what} is locked by {who}, a build of the same spec still running; wait for it to "
                           f"finish or stop it (lock file {path})", pid)
        _record(fd, path, log)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def wait_for(path: str | os.PathLike, what: str, log: Callable[[str], None] = _stderr) -> Iterator[None]:
    """Hold the lock ``path`` for the block, waiting (with one log line) while another process holds it."""
    path = Path(path)
    fd = _open(path)
    try:
        if not _try(fd, fcntl.LOCK_EX):
            pid = holder(path).get("pid")
            log(f"waiting for {what} (pid {pid if pid else '?'})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        _record(fd, path, log)
        yield
    finally:
        os.close(fd)


__all__ = ["LockBusy", "hold", "holder", "lock_path", "pid_alive", "wait_for"]
