"""Processes sharing a work folder or cache: a stage another process computes is waited for, not
computed twice; a second holder of a build lock is refused with the first's pid; a lock left by a
dead process is taken over; concurrent ``acc check`` runs on one cache all succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autocompress.build import lock
from autocompress.build.stages import run_stage

REPO = Path(__file__).resolve().parents[2]

# one process running a tiny stage: it counts its computations in <work>/computed, marks <work>/started
# when it is inside the stage, and stays there until <work>/go exists (when asked to)
STAGE = """
import json, sys, time
from pathlib import Path
from autocompress.build.stages import run_stage
work, hold = Path(sys.argv[1]), sys.argv[2] == "hold"
def fn(tmp, partial):
    with open(work / "computed", "a") as f:
        f.write("x")
    (work / "started").touch()
    end = time.time() + 120
    while hold and not (work / "go").exists() and time.time() < end:
        time.sleep(0.05)
    (tmp / "result.json").write_text(json.dumps({"value": 42}))
    return {"value": 42}
r = run_stage(work, "tiny", "k1", fn, log=lambda m: print(m, flush=True))
print("RESULT", json.dumps({"cached": r.cached, "summary": r.summary}), flush=True)
"""


def _python(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **kw)


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while not path.exists():
        assert time.time() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_a_stage_another_process_computes_is_waited_for_not_recomputed(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    first = _python("-c", STAGE, str(work), "hold")
    _wait_for(work / "started")
    second = _python("-c", STAGE, str(work), "go")
    waiting = second.stdout.readline()  # it blocks on the stage's lock
    (work / "go").touch()
    out1, out2 = first.communicate(timeout=120)[0], waiting + second.communicate(timeout=120)[0]
    assert first.returncode == 0 and second.returncode == 0, out1 + out2
    assert (work / "computed").read_text() == "x"  # one computation
    assert f"waiting for tiny-k1 (pid {first.pid})" in out2
    res = json.loads(out2.split("RESULT ", 1)[1])
    assert res == {"cached": True, "summary": {"value": 42}}
    assert json.loads((work / "tiny-k1" / "result.json").read_text()) == {"value": 42}
    assert not list(work.glob(".tiny-k1.tmp-*"))  # written under a temporary name, renamed


HOLD = """
import sys, time
from autocompress.build import lock
with lock.hold(sys.argv[1], "output out/x"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_holder_is_refused_with_the_first_pid(tmp_path):
    path = tmp_path / ".x.lock"
    holder = _python("-c", HOLD, str(path), "30")
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(lock.LockBusy) as err:
            with lock.hold(path, "output out/x"):
                pytest.fail("took a held lock")
        assert err.value.pid == holder.pid and err.value.exit_code == 2
        assert f"pid {holder.pid}" in str(err.value) and "\n" not in str(err.value)
    finally:
        holder.kill()
        holder.wait()
    logs = []
    with lock.hold(path, "output out/x", logs.append):  # its holder was killed: the lock is free, and stale
        assert lock.holder(path)["pid"] == os.getpid()
    assert logs == [f"taking over the stale lock {path} of pid {holder.pid} (no longer running)"]


def test_a_stale_lock_file_of_a_dead_pid_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / ".x.lock"
    path.write_text(json.dumps({"pid": dead.pid, "command": "acc build x.acspec"}) + "\n")
    logs = []
    with lock.hold(path, "output out/x", logs.append):
        assert lock.holder(path)["pid"] == os.getpid()
    assert "stale" in logs[0] and str(dead.pid) in logs[0]
    # and a stage whose lock file names a dead process runs at once
    work = tmp_path / "work"
    stage_lock = lock.lock_path(work / "tiny-k1")
    stage_lock.parent.mkdir(parents=True, exist_ok=True)
    stage_lock.write_text(json.dumps({"pid": dead.pid, "command": "?"}))
    r = run_stage(work, "tiny", "k1", lambda tmp, partial: {"v": 1}, log=logs.append)
    assert r.summary == {"v": 1} and not r.cached and "stale" in logs[-1]


def test_build_refuses_when_its_output_is_locked(tmp_path, monkeypatch):
    from autocompress.build import pipeline
    from autocompress.progress import Progress

    out = tmp_path / "out" / "x"
    holder = _python("-c", HOLD, str(lock.lock_path(out)), "30")
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(pipeline, "_run_build", lambda *a, **k: pytest.fail("built while locked"))
        with pytest.raises(lock.LockBusy) as err:
            import contextlib
            with contextlib.ExitStack() as held:
                pipeline._lock_outputs(held, [out], Progress())
        assert err.value.pid == holder.pid and err.value.exit_code == 2
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.integration
def test_concurrent_checks_on_one_cache_all_succeed(tmp_path):
    env = {**os.environ, "ACC_CACHE_DIR": str(tmp_path / "cache")}
    spec = REPO / "examples" / "cpu-vllm.acspec"
    runs = [subprocess.Popen([sys.executable, "-m", "autocompress.cli", "check", str(spec)], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [r.communicate(timeout=300) for r in runs]
    codes = [r.returncode for r in runs]
    assert len(set(codes)) == 1 and codes[0] in (0, 1), outs
    assert all("Traceback" not in o + e for o, e in outs)
    assert len({o for o, _ in outs}) == 1  # the same report from each
    entries = list((tmp_path / "cache" / "check").glob("*.json"))
    assert entries and all(json.loads(p.read_text())["sha256"] for p in entries)
