"""Lock files do not pile up in the temporary folder: a holder removes its lock file on release,
still holding it, and a process that locked a file removed meanwhile starts again on the file now
at the path, so exclusion holds; a killed holder's file stays and is taken over (torch-free)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autocompress.build import lock

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    """``tempfile.gettempdir()`` (where ``lock.lock_path`` puts lock files) in this test's folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _lock_files(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*.lock"))


def _python(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tempfile.gettempdir())}
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_hold_and_release_cycle_leaves_no_lock_file(tmp_root):
    out, stage = tmp_root / "out" / "tiny", tmp_root / "work" / "tiny-k1"
    logs = []
    with lock.hold(lock.lock_path(out), f"output {out}", logs.append):
        with lock.wait_for(lock.lock_path(stage), stage.name, logs.append):
            assert len(_lock_files(tmp_root)) == 2  # both held, each a file with its holder's pid
            assert lock.holder(lock.lock_path(stage))["pid"] == os.getpid()
    assert _lock_files(tmp_root) == [] and logs == []
    with pytest.raises(RuntimeError):  # a failed block releases and removes too
        with lock.hold(lock.lock_path(out), f"output {out}", logs.append):
            raise RuntimeError("stage failed")
    assert _lock_files(tmp_root) == [] and logs == []


WAITER = """
import sys
from autocompress.build import lock
with lock.wait_for(sys.argv[1], "tiny-k1", log=lambda m: print(m, flush=True)):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_waiter_on_a_removed_file_locks_the_file_at_the_path(tmp_root):
    """The waiter opened the lock file and blocks on it; the holder removes it on release; the
    waiter's lock on the removed file is dropped and it locks a new file at the path, so a third
    process is refused while it holds that one, and its release removes it too."""
    path = lock.lock_path(tmp_root / "work" / "tiny-k1")
    with lock.hold(path, "output out/x"):
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(path)], cwd=REPO, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert waiter.stdout.readline().strip() == f"waiting for tiny-k1 (pid {os.getpid()})"
    try:
        assert waiter.stdout.readline().strip() == "held"
        assert lock.holder(path)["pid"] == waiter.pid
        with pytest.raises(lock.LockBusy) as err:
            with lock.hold(path, "output out/x"):
                pytest.fail("took a lock the waiter holds")
        assert err.value.pid == waiter.pid
    finally:
        out, _ = waiter.communicate("\n", timeout=60)
    assert waiter.returncode == 0, out
    assert not path.exists()


# each process takes the lock ROUNDS times and adds 1 to a counter file by read, pause, write: any
# overlap of two holders loses an increment
COUNTER = """
import sys, time
from pathlib import Path
from autocompress.build import lock
path, counter, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
for _ in range(rounds):
    with lock.wait_for(path, "counter", log=lambda m: None):
        n = int(counter.read_text())
        time.sleep(0.001)
        counter.write_text(str(n + 1))
"""


def test_contenders_that_remove_the_lock_file_still_exclude(tmp_root):
    path, counter = lock.lock_path(tmp_root / "work" / "counter"), tmp_root / "counter"
    counter.write_text("0")
    procs, rounds = [_python(COUNTER, str(path), str(counter), "40") for _ in range(4)], 40
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert int(counter.read_text()) == 4 * rounds
    assert _lock_files(tmp_root) == []


HOLD = """
import sys, time
from autocompress.build import lock
with lock.hold(sys.argv[1], "output out/x"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_killed_holders_lock_file_stays_and_is_taken_over(tmp_root):
    path = lock.lock_path(tmp_root / "out" / "x")
    holder = _python(HOLD, str(path))
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads(path.read_text())["pid"] == holder.pid  # nothing ran at its death
    logs = []
    with lock.hold(path, "output out/x", logs.append):
        assert lock.holder(path)["pid"] == os.getpid()
    assert logs == [f"taking over the stale lock {path} of pid {holder.pid} (no longer running)"]
    assert _lock_files(tmp_root) == []
