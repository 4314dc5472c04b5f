"""The catalog tables: completeness against the language's names, and sane figures."""

import pytest

from autocompress.catalog.engines import ENGINES, cudagraph_capture_sizes, scheduler_defaults
from autocompress.catalog.hardware import HARDWARE, GiB, device_from_custom, resolve_device
from autocompress.catalog.precisions import PRECISIONS, activation_bytes, peak_flops
from autocompress.lang import model

HARDWARE_NAMES = ("rtx-5070", "rtx-5080", "rtx-5090", "rtx-4090", "l4", "l40s", "a100-80g", "h100-sxm",
                  "h100-pcie", "h200", "b200", "gb200", "cpu")


def test_keys_match_language_names():
    assert set(PRECISIONS) == set(model.PRECISIONS)
    assert set(ENGINES) == set(model.ENGINES)
    assert tuple(HARDWARE) == HARDWARE_NAMES


@pytest.mark.parametrize("name", HARDWARE_NAMES)
def test_device_figures(name):
    d = HARDWARE[name]
    assert d.name == name and d.source
    assert d.memory_bytes > 0 and d.bandwidth_bytes_s > 0 and d.flops_fp32 > 0 and d.link_bandwidth_bytes_s > 0
    if d.flops_fp8 is not None:
        assert d.flops_fp8 > d.flops_bf16  # fp8 peaks are twice the bf16 ones on every part listed
    assert d.flops_bf16 > d.flops_fp32 or d.kind == "cpu"


def test_facts_table_values():
    h = HARDWARE["h100-sxm"]
    assert (h.memory_bytes, h.bandwidth_bytes_s, h.flops_bf16, h.flops_fp8, h.sms) == (80 * GiB, 3350e9, 989e12,
                                                                                       1979e12, 132)
    assert HARDWARE["a100-80g"].flops_fp8 is None and HARDWARE["cpu"].flops_fp8 is None
    cpu = HARDWARE["cpu"]
    assert cpu.kind == "cpu" and cpu.flops_fp32 == 95e9 and cpu.flops_bf16 == 0.3e9 and cpu.memory_bytes == 24 * GiB
    assert "DEFAULT" in cpu.source and "acc profile" in cpu.source


def test_precisions():
    assert {k: p.bytes for k, p in PRECISIONS.items()} == {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
    assert peak_flops(HARDWARE["h100-sxm"], "fp8") == 1979e12
    assert peak_flops(HARDWARE["a100-80g"], "fp8") == 312e12  # weight-only fp8 runs at the bf16 peak
    assert peak_flops(HARDWARE["cpu"], "fp32") == 95e9
    assert activation_bytes("fp8") == 2 and activation_bytes("fp32") == 4


def test_engines():
    v, t = ENGINES["vllm"], ENGINES["transformers"]
    assert "fp8" in v.kv_precisions and "fp8" not in t.kv_precisions
    assert v.tensor_parallel and not t.tensor_parallel
    assert v.kv_block_size == 16 and v.gpu_memory_utilization == 0.92 and v.cuda_graphs
    assert "integer" in v.cpu_kv_rule


def test_scheduler_defaults():
    h, l4, a100 = HARDWARE["h100-sxm"], HARDWARE["l4"], HARDWARE["a100-80g"]
    assert scheduler_defaults("vllm", h, server=False) == (16384, 1024)
    assert scheduler_defaults("vllm", h, server=True) == (8192, 1024)
    assert scheduler_defaults("vllm", l4, server=False) == (8192, 256)
    assert scheduler_defaults("vllm", l4, server=True) == (2048, 256)
    assert scheduler_defaults("vllm", a100, server=False) == (8192, 256)  # facts.md: "not A100"


def test_capture_sizes():
    # [1,2,4] + 8..248 step 8 (31) + 256..512 step 16 (17)
    s = cudagraph_capture_sizes(1024)
    assert len(s) == 51 and s[:4] == [1, 2, 4, 8] and s[-1] == 512
    assert cudagraph_capture_sizes(128)[-1] == 256 and len(cudagraph_capture_sizes(128)) == 35
    assert cudagraph_capture_sizes(2) == [1, 2, 4]


def test_custom_device():
    c = model.CustomDevice("npu-x", 8 * GiB, 500e9, 100e12)
    d = device_from_custom(c)
    assert d.kind == "gpu" and d.flops_bf16 == 100e12 and d.flops_fp8 is None and d.flops_fp32 == 100e12 / 16
    assert "assumed" in d.source
    assert resolve_device(c) == d and resolve_device("l4") is HARDWARE["l4"]
    with pytest.raises(KeyError, match="unknown hardware"):
        resolve_device("tpu")
