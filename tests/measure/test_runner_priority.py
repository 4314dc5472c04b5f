"""ACC_MEASURE_NICE: the engine worker's priority on a shared host (unit)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autocompress.measure.runner import MeasureError, priority_hook


def test_the_worker_takes_the_niceness_asked_for():
    # raising niceness is allowed to anyone, so the test holds without root
    out = subprocess.run([sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"],
                         capture_output=True, text=True, check=True, preexec_fn=priority_hook("19")).stdout
    assert out.strip() == "19"
    assert priority_hook(None) is None and priority_hook("") is None


def test_a_bad_value_is_a_clear_error():
    with pytest.raises(MeasureError, match="expected an integer niceness"):
        priority_hook("high")
