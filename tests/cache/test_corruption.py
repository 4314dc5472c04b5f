"""A damaged cache is a warning and a recompute, never a load and never a traceback: stage folders
(JSON and safetensors files, the DONE marker, the checksums), the measurement journal, the check cache."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autocompress import cache
from autocompress.build.stages import run_stage
from autocompress.measure.journal import RunJournal

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402


def truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: max(0, p.stat().st_size // 2)])


def flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[-2] ^= 0x01  # the last bytes: tensor data or JSON text, still the same length
    p.write_bytes(bytes(data))


def delete(p: Path) -> None:
    p.unlink()


class Stage:
    """A stage writing a JSON file and a safetensors file; counts its computations."""

    def __init__(self):
        self.runs = 0

    def __call__(self, tmp: Path, partial: Path) -> dict:
        self.runs += 1
        (tmp / "result.json").write_text(json.dumps({"loss": 0.25, "steps": [1, 2, 3]}))
        save_file({"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}, str(tmp / "weights.safetensors"))
        return {"loss": 0.25}


def _contents(folder: Path) -> tuple:
    return json.loads((folder / "result.json").read_text()), load_file(str(folder / "weights.safetensors"))["w"].clone()


@pytest.mark.parametrize("name", ["result.json", "weights.safetensors", "DONE", "CHECKSUMS.json"])
@pytest.mark.parametrize("damage", [truncate, flip, delete])
def test_a_damaged_stage_file_is_a_warning_and_a_recompute(tmp_path, name, damage):
    fn, logs = Stage(), []
    clean = run_stage(tmp_path, "tiny", "k1", fn, logs.append)
    want = _contents(clean.path)
    assert json.loads((clean.path / "CHECKSUMS.json").read_text())["sha256"].keys() == {
        "DONE", "result.json", "weights.safetensors"}
    assert run_stage(tmp_path, "tiny", "k1", fn, logs.append).cached and fn.runs == 1  # intact: loaded

    damage(clean.path / name)
    logs.clear()
    again = run_stage(tmp_path, "tiny", "k1", fn, logs.append)
    assert fn.runs == 2 and not again.cached
    if name != "DONE" or damage is not delete:  # a folder without DONE is an unfinished one: no warning
        (line,) = [ln for ln in logs if "corrupt" in ln]
        assert re.fullmatch(rf"warning: cached tiny at {re.escape(str(clean.path))} is corrupt \((.+)\); recomputing",
                            line), line
        assert name in line or "DONE" in line
    got = _contents(again.path)
    assert got[0] == want[0] and torch.equal(got[1], want[1]) and again.summary == {"loss": 0.25}
    assert cache.corruption(again.path) is None
    assert run_stage(tmp_path, "tiny", "k1", fn, logs.append).cached and fn.runs == 2


def test_an_unreadable_stage_file_is_a_recompute(tmp_path):
    fn, logs = Stage(), []
    clean = run_stage(tmp_path, "tiny", "k1", fn, logs.append)
    (clean.path / "result.json").unlink()
    (clean.path / "result.json").mkdir()  # reading it fails (IsADirectoryError)
    again = run_stage(tmp_path, "tiny", "k1", fn, logs.append)
    assert fn.runs == 2 and any("result.json: unreadable" in ln for ln in logs)
    assert json.loads((again.path / "result.json").read_text())["loss"] == 0.25


def _journal(tmp_path: Path, logs: list) -> RunJournal:
    return RunJournal(tmp_path / "journal.jsonl", "k" * 64, logs.append)


def _filled(tmp_path: Path) -> Path:
    j = _journal(tmp_path, [])
    for i in range(3):
        j.append("A", "model", {"tpot": i}, {"i": i})
    return j.path


def test_a_truncated_last_journal_line_is_dropped_with_a_warning(tmp_path):
    path = _filled(tmp_path)
    text = path.read_text()
    path.write_text(text[: len(text) - 10])  # killed mid-append
    logs = []
    j = _journal(tmp_path, logs)
    assert [e["result"]["tpot"] for e in j.replay] == [0, 1]
    assert any("last line is truncated or damaged; dropped" in ln for ln in logs)


def test_a_flipped_last_journal_line_is_dropped_with_a_warning(tmp_path):
    path = _filled(tmp_path)
    path.write_text(path.read_text().replace('"tpot": 2', '"tpot": 3'))  # valid JSON, wrong checksum
    logs = []
    assert [e["result"]["tpot"] for e in _journal(tmp_path, logs).replay] == [0, 1]
    assert any("dropped" in ln for ln in logs)


@pytest.mark.parametrize("how", ["flip", "garble"])
def test_a_corrupt_middle_line_makes_the_journal_untrusted(tmp_path, how):
    path = _filled(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"tpot": 1', '"tpot": 9') if how == "flip" else lines[2][:20] + "\n"
    path.write_text("".join(lines))
    logs = []
    j = _journal(tmp_path, logs)
    assert not j.replay  # measured afresh
    assert any("is corrupt (line 3 of 4" in ln and "not trusted" in ln for ln in logs)
    j.append("A", "model", {"tpot": 5}, {})
    assert [e["result"]["tpot"] for e in _journal(tmp_path, []).replay] == [5]


def test_a_damaged_check_cache_entry_is_a_miss(tmp_path):
    store = cache.JsonCache(tmp_path)
    store.put("k", {"exit_code": 0, "report": {"fits": True}})
    assert store.get("k") == {"exit_code": 0, "report": {"fits": True}}
    p = tmp_path / "k.json"
    p.write_text(p.read_text().replace("true", "false"))  # still JSON, another value
    assert store.get("k") is None
    truncate(p)
    assert store.get("k") is None
