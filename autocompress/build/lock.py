"""Locks between processes that share a work, cache or output folder: ``fcntl.flock`` on a lock file.

A lock file holds its holder's pid and command line (one JSON line), for the messages only: the
kernel's ``flock`` is what excludes, and it is released when its holder dies however it dies
(SIGKILL included), so a lock file left by a killed process is *stale*: the next process takes the
lock at once, says so (naming the dead pid), and writes its own pid.

A holder removes its lock file when it releases the lock, still holding it, so lock files do not
pile up in the temporary folder. A process that opened the file before it was removed may then
lock a file no longer at the path, while a third creates and locks a new one there: so every
process, once it has the lock, checks that the path still names the file it locked (same device
and inode) and, if not, starts again on the file now there (``_acquire``). Only the one holder of
the file at the path ever removes it, so at most one process holds a lock that counts.

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


def _names(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed, nor removed and re-created)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


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


def _acquire(path: Path, busy: Callable[[], None]) -> int:
    """The descriptor of the lock file at ``path``, locked. ``busy()`` runs when another process
    holds it: it raises (``hold``) or returns, and the lock is then waited for (``wait_for``). A file
    its holder removed meanwhile is no lock (locked, or still held by the process removing it): it
    is dropped, and the file now at the path (created when none is) is tried instead."""
    while True:
        fd = _open(path)
        try:
            locked = _try(fd, fcntl.LOCK_EX)
            if not locked and _names(fd, path):  # held at the path (a removed file's holder is no holder)
                busy()
                fcntl.flock(fd, fcntl.LOCK_EX)
                locked = True
            if locked and _names(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _release(fd: int, path: Path) -> None:
    """Remove the lock file while still holding it (nobody can lock it anew at the path after
    that), then release the lock."""
    try:
        if _names(fd, path):
            path.unlink(missing_ok=True)
    except OSError:
        pass  # left in place: the next holder reuses it
    finally:
        os.close(fd)


@contextlib.contextmanager
def hold(path: str | os.PathLike, what: str, log: Callable[[str], None] = _stderr) -> Iterator[None]:
    """Hold the lock ``path`` for the block, or raise ``LockBusy`` at once when a live process holds it.
    ``what``: the thing locked, for the message ("output out/tiny")."""
    path = Path(path)

    def refuse() -> None:
        info = holder(path)
        pid = info.get("pid")
        who = f"pid {pid} ({info.get('command', '?')})" if pid else "another process"
        raise LockBusy(f"{what} is locked by {who}, a build of the same spec still running; wait for it to "
                       f"finish or stop it (lock file {path})", pid)

    fd = _acquire(path, refuse)
    try:
        _record(fd, path, log)
        yield
    finally:
        _release(fd, path)


@contextlib.contextmanager
def wait_for(path: str | os.PathLike, what: str, log: Callable[[str], None] = _stderr) -> Iterator[None]:
    """Hold the lock ``path`` for the block, waiting (with one log line) while another process holds it."""
    path = Path(path)
    said = False

    def wait() -> None:
        nonlocal said
        if not said:
            pid = holder(path).get("pid")
            log(f"waiting for {what} (pid {pid if pid else '?'})")
            said = True

    fd = _acquire(path, wait)
    try:
        _record(fd, path, log)
        yield
    finally:
        _release(fd, path)


__all__ = ["LockBusy", "hold", "holder", "lock_path", "pid_alive", "wait_for"]
