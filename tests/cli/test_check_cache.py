"""A damaged ``acc check`` cache entry (truncated, a flipped byte, unreadable) is never loaded: one
warning line on stderr names the entry file, the check is recomputed with the fresh answer, the
entry is rewritten, and the next run is a clean hit (in-process via cli.main; torch-free)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
from pathlib import Path

import pytest
from _clikit import FEASIBLE, copy_example

from autocompress import cache, check
from autocompress.cli import main as cli


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """One fresh ``acc check --format json`` in a private cache: the spec, the answer (exit code,
    stdout, stderr), the cache entry's file and its bytes. Each test damages a copy of the entry."""
    root = tmp_path_factory.mktemp("check-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACC_CACHE_DIR", str(root / "cache"))
        mp.delenv("ACC_DEBUG", raising=False)
        spec = copy_example(FEASIBLE, root)
        answer = _run("check", str(spec), "--format", "json")
        (entry,) = (root / "cache" / "check").glob("*.json")
        yield {"spec": spec, "answer": answer, "entry": entry, "bytes": entry.read_bytes()}


def truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])  # a full disk or a killed copy


def _flip(p: Path, at: int) -> None:
    data = bytearray(p.read_bytes())
    data[at] ^= 0x01
    p.write_bytes(bytes(data))


def flip_syntax(p: Path) -> None:
    _flip(p, 0)  # the opening brace: not JSON any more


def flip_value(p: Path) -> None:
    _flip(p, p.read_bytes().index(b'"verdict": "feasible"') + len('"verdict": "'))  # "geasible": still JSON


def flip_dependency(p: Path) -> None:
    _flip(p, p.read_bytes().index(b'"deps": {') + len('"deps": {\n    "') + 3)  # a dependency's path


def flip_checksum(p: Path) -> None:
    _flip(p, p.read_bytes().index(b'"sha256": "') + len('"sha256": "') + 7)


def not_an_entry(p: Path) -> None:
    p.write_text("[]\n")


DAMAGES = {truncate: "not JSON", flip_syntax: "not JSON", flip_value: "checksum mismatch",
           flip_dependency: "checksum mismatch", flip_checksum: "checksum mismatch",
           not_an_entry: "not a cache entry"}


def _warning(entry: Path, why: str) -> str:
    return f"warning: cached check at {entry} is corrupt ({why}); recomputing\n"


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
def test_a_damaged_entry_is_a_warning_and_a_recompute(fresh, damage, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(fresh["entry"].parents[1]))
    spec, entry, (code, out, err) = str(fresh["spec"]), fresh["entry"], fresh["answer"]
    entry.write_bytes(fresh["bytes"])
    assert check.run_check(spec).cached  # intact: a hit
    damage(entry)
    assert entry.read_bytes() != fresh["bytes"]

    assert _run("check", spec, "--format", "json") == (code, out, _warning(entry, DAMAGES[damage]) + err)
    assert entry.read_bytes() == fresh["bytes"]  # rewritten
    assert _run("check", spec, "--format", "json") == (code, out, err)  # no warning: a clean hit
    assert check.run_check(spec).cached
    damage(entry)  # what acc build logs: the damage line alone, without the spec's warnings
    assert check.run_check(spec).damaged == (_warning(entry, DAMAGES[damage]).rstrip("\n"),)


def test_an_unreadable_entry_is_a_warning_and_a_recompute(fresh, monkeypatch):
    monkeypatch.setenv("ACC_CACHE_DIR", str(fresh["entry"].parents[1]))
    spec, entry, (code, out, err) = str(fresh["spec"]), fresh["entry"], fresh["answer"]
    entry.write_bytes(fresh["bytes"])
    real = Path.read_bytes

    def bad_sector(self):
        if self == entry:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))
        return real(self)

    with monkeypatch.context() as m:
        m.setattr(Path, "read_bytes", bad_sector)
        got = _run("check", spec, "--format", "json")
    assert got == (code, out, _warning(entry, "unreadable (Input/output error)") + err)
    assert _run("check", spec, "--format", "json") == (code, out, err)


def test_a_plain_miss_says_nothing(fresh, monkeypatch, tmp_path):
    """No entry, or an intact entry whose spec changed: recomputed without a warning."""
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))
    spec = copy_example(FEASIBLE, tmp_path)
    code, out, err = _run("check", str(spec), "--format", "json")
    assert (code, err) == (fresh["answer"][0], fresh["answer"][2]) and json.loads(out)["verdict"] == "feasible"
    spec.write_text(spec.read_text() + "\n# a comment\n")
    assert _run("check", str(spec), "--format", "json")[2] == err
    assert len(list((tmp_path / "cache" / "check").glob("*.json"))) == 2


# ---- the store ---------------------------------------------------------------------------------

def test_the_store_names_what_is_wrong_with_an_entry(tmp_path):
    dep = tmp_path / "spec.acspec"
    dep.write_text("model x\n")
    store = cache.JsonCache(tmp_path / "check")
    assert store.lookup("k") == (None, None)  # no entry: a plain miss
    store.put("k", {"exit_code": 0, "report": {"fits": True}}, [str(dep)])
    good = store.path("k").read_bytes()
    assert store.lookup("k") == ({"exit_code": 0, "report": {"fits": True}}, None)
    for damage, why in DAMAGES.items():
        if damage is flip_value:  # this entry's value: true -> false, still JSON
            store.path("k").write_bytes(good.replace(b"true", b"false"))
            assert store.lookup("k") == (None, "checksum mismatch")
            continue
        store.path("k").write_bytes(good)
        damage(store.path("k"))
        assert store.lookup("k") == (None, why), damage.__name__
        assert store.get("k") is None
    store.path("k").write_bytes(good)
    dep.write_text("model y\n")  # a dependency changed: a plain miss
    assert store.lookup("k") == (None, None)
