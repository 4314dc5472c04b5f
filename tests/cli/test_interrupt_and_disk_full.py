"""Ctrl-C and a full disk end every command with one line and a documented exit code, never a
traceback: 130 and "interrupted: rerun the same command to resume" ("interrupted" for the commands
that keep nothing), 7 and "no space left on device writing <folder>" (with the space needed when
the writer knew it). A build interrupted in a stage leaves only temporaries, and its rerun ends
with the weights of an uninterrupted build."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _clikit import FEASIBLE, cache_dir, copy_example  # noqa: F401  (fixture)

import autocompress.cache as cache
import autocompress.cli.main as cli_main
from autocompress.diagnostics import EXIT_DISK_FULL, EXIT_INTERNAL, EXIT_INTERRUPTED, DiskFullError


@pytest.mark.parametrize("command, line", [
    ("build", "interrupted: rerun the same command to resume"),
    ("verify", "interrupted: rerun the same command to resume"),
    ("eval", "interrupted: rerun the same command to resume"),
    ("profile", "interrupted: rerun the same command to resume"),
    ("check", "interrupted"), ("diff", "interrupted"), ("fmt", "interrupted")])
def test_keyboard_interrupt_is_exit_130_and_one_line(monkeypatch, capsys, command, line):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli_main.COMMANDS, command, interrupted)
    argv = {"build": ["build", "s.acspec"], "verify": ["verify", "out", "s.acspec"], "eval": ["eval", "m"],
            "profile": ["profile", "--hardware", "cpu", "--engine", "vllm"], "check": ["check", "s.acspec"],
            "diff": ["diff", "a.acspec", "b.acspec"], "fmt": ["fmt", "s.acspec"]}[command]
    assert cli_main.main(argv) == EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == line + "\n"


def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device", str(a[0]))



def test_enospc_at_a_write_site_is_exit_7_naming_the_folder_and_the_file_is_intact(tmp_path, capsys, monkeypatch,
                                                                                     cache_dir):  # noqa: F811
    spec = copy_example(FEASIBLE, tmp_path)
    spec.write_text(spec.read_text() + "\n\n\n")  # not canonical: --write would rewrite it
    before = spec.read_bytes()
    monkeypatch.setattr(cache, "atomic_write_bytes", _enospc)  # every atomic write goes through it
    assert cli_main.main(["fmt", "--write", str(spec)]) == EXIT_DISK_FULL == 7
    err = capsys.readouterr().err
    assert err.startswith(f"no space left on device writing {tmp_path}") and err.count("\n") == 1, err
    assert "Traceback" not in err and spec.read_bytes() == before


def test_enospc_inside_a_write_names_the_folder_and_the_size(tmp_path, capsys, monkeypatch, cache_dir):  # noqa: F811
    # a file object's write error carries no file name: the folder comes from the writer's frame
    spec = copy_example(FEASIBLE, tmp_path)
    spec.write_text(spec.read_text() + "\n\n\n")
    before = spec.read_bytes()

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    assert cli_main.main(["fmt", "--write", str(spec)]) == EXIT_DISK_FULL
    err = capsys.readouterr().err
    assert err.startswith(f"no space left on device writing {tmp_path}: need about 1 MiB more;"), err
    assert spec.read_bytes() == before and not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_temporary_name_is_shown_as_the_name_it_was_to_become():
    assert cli_main.shown_path("/w/out/.tiny.acc/.distill-0f3a.tmp-k2j4/model.safetensors") == \
        "/w/out/.tiny.acc/distill-0f3a/model.safetensors"
    assert cli_main.shown_path("/w/.report.json.x81k_2.tmp") == "/w/report.json"


def test_enospc_with_a_known_size_says_how_much_more(monkeypatch, capsys):
    def full(args):
        raise DiskFullError("/data/out", need_bytes=300 * 2**20 + 1)

    monkeypatch.setitem(cli_main.COMMANDS, "build", full)
    assert cli_main.main(["build", "s.acspec"]) == EXIT_DISK_FULL
    assert capsys.readouterr().err.startswith("no space left on device writing /data/out: need about 301 MiB more")


def test_enospc_wrapped_by_a_library_is_still_found(monkeypatch, capsys, tmp_path):
    # a writer (safetensors, torch.save) that re-raises the OS error as its own keeps it as the cause
    def wrapped(args):
        try:
            _enospc(tmp_path / "model.safetensors")
        except OSError as err:
            raise RuntimeError("failed writing file") from err

    monkeypatch.setitem(cli_main.COMMANDS, "build", wrapped)
    assert cli_main.main(["build", "s.acspec"]) == EXIT_DISK_FULL
    assert capsys.readouterr().err.startswith(f"no space left on device writing {tmp_path}")


def test_enospc_from_safetensors_rust_writer_is_exit_7_naming_the_folder(monkeypatch, capsys, tmp_path):
    # safetensors' save_file raises its own error type, the OS error only in its text, and no cause
    class SafetensorError(Exception):
        pass

    def fsync(fd):  # where a write of ours meets the full disk: the folder comes from our frame
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setitem(cli_main.COMMANDS, "build", lambda args: cache.atomic_write_bytes(
        tmp_path / "model.safetensors", b"\0" * 64))
    assert cli_main.main(["build", "s.acspec"]) == EXIT_DISK_FULL
    err = capsys.readouterr().err
    assert err.startswith(f"no space left on device writing {tmp_path}: need about 1 MiB more; free space and rerun "
                          "the same command") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone


def test_enospc_in_a_stages_temporary_folder_names_that_stage_folder(monkeypatch, capsys, tmp_path):
    # the stage's temporary folder (gone once the error unwinds) is named by the folder it was to become
    def build(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "work" / ".distill-0f3a.tmp-k2j4"))

    monkeypatch.setitem(cli_main.COMMANDS, "build", build)
    assert cli_main.main(["build", "s.acspec"]) == EXIT_DISK_FULL
    assert capsys.readouterr().err.startswith(f"no space left on device writing {tmp_path / 'work' / 'distill-0f3a'};")


def test_another_error_that_mentions_an_os_error_is_not_a_full_disk(monkeypatch, capsys):
    def build(args):
        raise RuntimeError("Error while serializing: I/O error: Permission denied (os error 13)")

    monkeypatch.setitem(cli_main.COMMANDS, "build", build)
    assert cli_main.main(["build", "s.acspec"]) == EXIT_INTERNAL
    assert capsys.readouterr().err.startswith("internal error: RuntimeError: ")


def test_ctrl_c_during_the_commands_imports_is_exit_130_and_one_line():
    # ``python -m autocompress.cli`` imports 0.15 s of modules before ``main`` handles Ctrl-C
    code = textwrap.dedent("""
        import runpy, sys

        class Interrupt:
            def find_spec(self, name, path=None, target=None):
                if name == "autocompress.cli.main":
                    raise KeyboardInterrupt

        sys.meta_path.insert(0, Interrupt())
        sys.argv = ["acc", "build", "s.acspec"]
        runpy.run_module("autocompress.cli", run_name="__main__")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (EXIT_INTERRUPTED, "interrupted: rerun the same command to resume\n")


def test_ctrl_c_after_the_command_ended_leaves_its_exit_code_and_no_traceback(tmp_path):
    # a build that printed "built" and returned, interrupted as the interpreter exits (``bench.faults``
    # hit it: killed by SIGINT, without the line); the atexit hook stands for that late Ctrl-C
    spec = copy_example(FEASIBLE, tmp_path)
    code = textwrap.dedent(f"""
        import atexit, os, runpy, signal, sys

        atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))
        sys.argv = ["acc", "fmt", "--write", {str(spec)!r}]
        runpy.run_module("autocompress.cli", run_name="__main__")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (0, ""), p.stderr


def test_ctrl_c_during_the_heavy_imports_is_held_until_they_end():
    # torch's import can abort on a KeyboardInterrupt crossing its C++; the interrupt comes after it
    finished = []
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with cli_main.held_sigint():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            finished.append(True)
    assert finished == [True] and signal.getsignal(signal.SIGINT) is before


def test_the_launcher_turns_the_agents_sigint_into_an_interrupt(monkeypatch):
    pytest.importorskip("torch")
    from argparse import Namespace

    from torch.distributed.elastic.multiprocessing.api import SignalException

    import autocompress.cli.launch as launch

    def agent(config, entry):
        def run(*argv):
            raise SignalException("Process 1 got signal: 2", sigval=signal.SIGINT)
        return run

    monkeypatch.setattr(launch, "load_contract", lambda spec: None)
    monkeypatch.setattr(launch, "plan_outputs", lambda *a: None)
    monkeypatch.setattr(launch, "check_verdict", lambda verdict: None)
    monkeypatch.setattr(launch.check, "check_contract", lambda contract: None)
    monkeypatch.setattr(launch, "elastic_launch", agent)
    args = Namespace(spec="s.acspec", nproc=2, work=None, baseline=None, quiet=True, force=False)
    with pytest.raises(KeyboardInterrupt):
        launch.launch_build(args)


def test_a_launched_worker_interrupted_exits_130(monkeypatch, capsys):
    pytest.importorskip("torch")
    from argparse import Namespace

    import autocompress.cli.build_cmd as build_cmd

    def build(args):
        raise KeyboardInterrupt

    def leave(code):
        raise SystemExit(code)

    for name, fn in (("launched", lambda: True), ("init", lambda: None), ("shutdown", lambda: None),
                     ("is_main", lambda: True), ("leave", leave)):
        monkeypatch.setattr(build_cmd.dist, name, fn)
    monkeypatch.setattr(build_cmd, "build", build)
    with pytest.raises(SystemExit) as exc:
        build_cmd.run(Namespace(nproc=None))
    assert exc.value.code == 130
    assert capsys.readouterr().err == "interrupted: rerun the same command to resume\n"


# ---- a real build, interrupted in a stage (``_buildkit``: tests/compress, on pytest's pythonpath) -------


def default_sigint() -> None:
    """SIGINT at its default in a child, as under a terminal: tests run from a background job (a CI
    runner, ``cmd &``) start with SIGINT ignored, which a child would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(cache_root: Path) -> dict:
    env = {**os.environ, "ACC_CACHE_DIR": str(cache_root)}
    env.pop("ACC_DEBUG", None)
    return env


def _build(spec: Path, cache_root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autocompress.cli", "build", str(spec), "--quiet", "--no-verify"],
                            env=_env(cache_root), cwd=str(spec.parent), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint)


def _finish(p: subprocess.Popen) -> str:
    out, _ = p.communicate(timeout=900)
    assert p.returncode == 0, out[-3000:]
    return out


@pytest.mark.integration
def test_sigint_in_a_stage_exits_130_and_the_rerun_gives_the_same_weights(tmp_path):
    pytest.importorskip("torch")
    from _buildkit import make_project, weights_hash

    ref_root, root = tmp_path / "ref", tmp_path / "cut"
    ref_root.mkdir()
    root.mkdir()
    _finish(_build(make_project(ref_root), ref_root / "cache"))
    reference = weights_hash(ref_root / "out" / "tiny")

    spec = make_project(root)
    p = _build(spec, root / "cache")
    seen = []
    # the parent's held-out evaluation has printed; its HumanEval pass (seconds) is running in the
    # evaluate stage, whose result is not committed yet
    for line in p.stdout:
        seen.append(line)
        if line.startswith("[evaluate parent: held-out]"):
            time.sleep(0.2)
            p.send_signal(signal.SIGINT)
            break
    else:
        pytest.fail("the build ended before the stage line:\n" + "".join(seen[-30:]))
    rest, _ = p.communicate(timeout=300)
    out = "".join(seen) + rest
    assert p.returncode == 130, out[-3000:]
    assert "interrupted: rerun the same command to resume\n" in out and "Traceback" not in out
    work = root / "out" / ".tiny.acc"
    assert not [x for x in work.rglob("*") if ".tmp-" in x.name]  # the stage's temporary folder is gone
    assert not (root / "out" / "tiny").exists()  # nothing exported
    again = _finish(_build(spec, root / "cache"))
    assert "[importance] cached" in again  # the stages before the interrupt were kept
    assert weights_hash(root / "out" / "tiny") == reference


def test_the_acc_script_runs_the_guarded_entry_point():
    # the installed `acc` and `python -m autocompress.cli` share ``run``: Ctrl-C during the imports or
    # after the command ended is handled for both
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["acc"] == "autocompress.cli.__main__:run"


@pytest.fixture(scope="module")
def solo_weights(tmp_path_factory):
    pytest.importorskip("torch")
    from _buildkit import make_project, weights_hash

    root = tmp_path_factory.mktemp("solo")
    _finish(_build(make_project(root), root / "cache"))
    return weights_hash(root / "out" / "tiny")


# The two stages whose windows a timed signal rarely hits (``bench.faults``): the check, the
# build's first seconds, and the export, a tenth of a second. The signal is sent from inside the
# build at a fixed point of the stage: as the check starts, and once the export has written the
# output but before the build records it.
SIGINT_POINTS = {
    "check": ("autocompress.build.prepare", "check_contract", "before"),
    "export": ("autocompress.build.pipeline", "_export", "after"),
}


@pytest.mark.integration
@pytest.mark.parametrize("stage, sig", [("check", "SIGINT"), ("export", "SIGINT"), ("export", "SIGKILL")])
def test_a_signal_inside_the_check_and_the_export_and_the_rerun_resumes(tmp_path, stage, sig, solo_weights):
    """SIGINT: exit 130 and the line; SIGKILL (a kill the export's short window rarely sees in
    ``bench.faults``): the process dies where it stands. Either way the rerun ends with the solo weights."""
    from _buildkit import make_project, weights_hash

    module, name, when = SIGINT_POINTS[stage]
    spec = make_project(tmp_path)
    code = textwrap.dedent(f"""
        import importlib, os, runpy, signal, sys

        m = importlib.import_module({module!r})
        original = getattr(m, {name!r})

        def hit(*a, **k):
            if {when!r} == "before":
                os.kill(os.getpid(), signal.{sig})
            out = original(*a, **k)
            os.kill(os.getpid(), signal.{sig})
            return out

        setattr(m, {name!r}, hit)
        sys.argv = ["acc", "build", {str(spec)!r}, "--quiet", "--no-verify"]
        runpy.run_module("autocompress.cli", run_name="__main__")
    """)
    p = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path / "cache"), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=900, preexec_fn=default_sigint)
    out = p.stdout + p.stderr
    if sig == "SIGINT":
        assert p.returncode == 130, out[-3000:]
        assert "interrupted: rerun the same command to resume\n" in out and "Traceback" not in out
        assert not [x for x in (tmp_path / "out").rglob("*") if ".tmp-" in x.name]  # nothing half-written
    else:
        assert p.returncode == -signal.SIGKILL, out[-3000:]
    exported = tmp_path / "out" / "tiny"
    if exported.exists():  # interrupted after the export: the output is whole
        assert weights_hash(exported) == solo_weights
    _finish(_build(spec, tmp_path / "cache"))
    assert weights_hash(exported) == solo_weights
