"""Fixtures for the cost-model tests."""

import pytest

from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.profile import load_profile


@pytest.fixture
def h100():
    return HARDWARE["h100-sxm"]


@pytest.fixture
def gpu_vllm(h100):
    return load_profile(None, h100, "vllm")
