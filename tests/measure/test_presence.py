"""Which CUDA device is which catalog GPU (``measure.presence``): whole-token matching of real names."""

import pytest

from autocompress.catalog.hardware import HARDWARE
from autocompress.measure.presence import CUDA_NAMES, cuda_name_matches

# torch.cuda.get_device_name as these boards report it
REAL = {
    "NVIDIA GeForce RTX 5070": "rtx-5070",
    "NVIDIA GeForce RTX 5080": "rtx-5080",
    "NVIDIA GeForce RTX 5090": "rtx-5090",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "NVIDIA A100-SXM4-80GB": "a100-80g",
    "NVIDIA A100 80GB PCIe": "a100-80g",
    "NVIDIA A100-SXM4-40GB": None,
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": None,
    "NVIDIA H200": "h200",
    "NVIDIA B200": "b200",
    "NVIDIA GB200": "gb200",
    "NVIDIA GeForce RTX 5070 Ti": None,
}


def test_every_catalog_gpu_has_a_cuda_name_rule():
    assert set(CUDA_NAMES) == {n for n, d in HARDWARE.items() if d.kind == "gpu"}


@pytest.mark.parametrize("cuda_name,expected", REAL.items())
def test_a_real_device_name_matches_its_catalog_entry_and_no_other(cuda_name, expected):
    assert [n for n in CUDA_NAMES if cuda_name_matches(n, cuda_name)] == ([expected] if expected else [])


def test_a_custom_device_matches_on_all_its_tokens():
    assert cuda_name_matches("rtx-6000-ada", "NVIDIA RTX 6000 Ada Generation")
    assert not cuda_name_matches("rtx-6000-ada", "NVIDIA RTX A6000")
