"""docs/scale-out.md's memory and time tables are the output of `python bench/scale_out.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import scale_out

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def scale():
    return scale_out, *scale_out.architectures(scale_out.Setup().spec)


def test_the_doc_holds_the_commands_output(scale):
    mod, parent, student = scale
    doc = (ROOT / "docs" / "scale-out.md").read_text()
    assert mod.render(parent, student, mod.Setup()) in doc, "paste the output of `python bench/scale_out.py`"


def test_memory_lines_follow_their_formulas(scale):
    mod, parent, student = scale
    s = mod.Setup()
    rows = {name: gib for name, gib, _ in mod.memory(parent, student, s)}
    P = student.params()
    assert rows["student weights (bf16, sharded)"] == 2 * P / s.gpus
    assert rows["AdamW moments (fp32, sharded)"] == 8 * P / s.gpus
    total, n = mod.fits(parent, student, s)
    assert total * mod.GiB > 80 * mod.GiB and n > s.gpus  # fp32 moments: 8 GPUs are not enough
    assert mod.fits(parent, student, s, moment_bytes=4)[1] <= s.gpus


def test_stage_times_scale_as_stated(scale):
    from dataclasses import replace

    mod, parent, student = scale
    s = mod.Setup()
    eight = {name: h for name, _, h, _ in mod.stage_times(parent, student, s)}
    sixteen = {name: h for name, _, h, _ in mod.stage_times(parent, student, replace(s, gpus=16))}
    assert sixteen["teacher top-k, per 1B tokens"] == pytest.approx(eight["teacher top-k, per 1B tokens"] / 2)
    assert sixteen["search: router"] == eight["search: router"]  # every GPU runs it
    assert sixteen["distill, per 1B tokens (compute)"] == pytest.approx(eight["distill, per 1B tokens (compute)"] / 2)
