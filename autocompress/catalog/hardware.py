"""The hardware catalog: one literal table, every figure with its source.

GPU figures come from the vendors' spec sheets as collected in the brief's hardware table
(docs: ``/work/shared/brief/facts.md`` "Hardware"): dense (no sparsity) tensor-core peaks,
GeForce BF16 with FP32 accumulate. Memory sizes are the nominal GB of the sheet read as GiB (the
driver reports slightly less, e.g. 79.6 GiB on an H100 80GB; ``acc profile`` measures the real
figure). FP32 peaks are the non-tensor CUDA-core figures of the same sheets. Link bandwidths
(for tensor-parallel all-reduce) are per direction: NVLink for SXM/datacenter parts, PCIe x16
otherwise; they are not in facts.md and are marked as vendor-sheet values.

Keys are the names the ``.acspec`` ``hardware`` field accepts (a test checks the list).
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
T = 1e12
G = 1e9

PCIE4_X16 = 32e9  # PCIe 4.0 x16, per direction
PCIE5_X16 = 64e9  # PCIe 5.0 x16, per direction


@dataclass(frozen=True)
class Device:
    name: str
    kind: str  # "gpu" | "cpu"
    memory_bytes: int
    bandwidth_bytes_s: float
    flops_bf16: float  # dense 16-bit matmul peak, FLOP/s
    flops_fp8: float | None  # None: no fp8 tensor cores (A100, this CPU)
    flops_fp32: float
    sms: int  # streaming multiprocessors (GPU) or cores (CPU)
    link_bandwidth_bytes_s: float  # per direction, used for the tensor-parallel all-reduce
    source: str

    def __post_init__(self) -> None:
        if self.kind not in ("gpu", "cpu"):
            raise ValueError(f"device kind must be gpu or cpu, got {self.kind!r}")
        if self.memory_bytes <= 0 or self.bandwidth_bytes_s <= 0 or self.flops_bf16 <= 0:
            raise ValueError(f"device figures must be positive: {self.name}")


_SHEET = "vendor spec sheet via facts.md hardware table"
_EST = "vendor spec sheet via facts.md (BF16/FP8 estimated from the FP4 figure)"

HARDWARE: dict[str, Device] = {
    # name: memory, bandwidth, bf16, fp8, fp32, SMs, link
    "rtx-5070": Device("rtx-5070", "gpu", 12 * GiB, 672 * G, 62 * T, 247 * T, 31 * T, 48, PCIE5_X16, _EST),
    "rtx-5080": Device("rtx-5080", "gpu", 16 * GiB, 960 * G, 113 * T, 450 * T, 56 * T, 84, PCIE5_X16, _EST),
    "rtx-5090": Device("rtx-5090", "gpu", 32 * GiB, 1792 * G, 209.5 * T, 419 * T, 105 * T, 170, PCIE5_X16, _SHEET),
    "rtx-4090": Device("rtx-4090", "gpu", 24 * GiB, 1008 * G, 165 * T, 330 * T, 82.6 * T, 128, PCIE4_X16, _SHEET),
    "l4": Device("l4", "gpu", 24 * GiB, 300 * G, 121 * T, 242 * T, 30.3 * T, 58, PCIE4_X16, _SHEET),
    "l40s": Device("l40s", "gpu", 48 * GiB, 864 * G, 362 * T, 733 * T, 91.6 * T, 142, PCIE4_X16, _SHEET),
    # A100 80GB SXM: NVLink 3, 600 GB/s total = 300 GB/s per direction.
    "a100-80g": Device("a100-80g", "gpu", 80 * GiB, 2039 * G, 312 * T, None, 19.5 * T, 108, 300e9, _SHEET),
    # Hopper / Blackwell SXM: NVLink 4 900 GB/s, NVLink 5 1.8 TB/s total (half per direction).
    "h100-sxm": Device("h100-sxm", "gpu", 80 * GiB, 3350 * G, 989 * T, 1979 * T, 67 * T, 132, 450e9, _SHEET),
    "h100-pcie": Device("h100-pcie", "gpu", 80 * GiB, 2000 * G, 756 * T, 1513 * T, 51 * T, 114, PCIE5_X16, _SHEET),
    # H200 memory: measured on a lent H200, torch.cuda.mem_get_info() total = 150,109,880,320 B
    # (139.8 GiB; nvidia-smi 143771 MiB), below the sheet's 141 GB. Same probe: device copy 4.23 TB/s,
    # bf16 8192^3 matmul 742 TFLOP/s (0.75 of peak), torch eager launch 9.8 us, CUDA-graph kernel 1.1 us.
    "h200": Device("h200", "gpu", 150_109_880_320, 4800 * G, 989 * T, 1979 * T, 67 * T, 132, 450e9,
                   _SHEET + "; memory measured (torch total)"),
    "b200": Device("b200", "gpu", 180 * GiB, 8000 * G, 2250 * T, 4500 * T, 75 * T, 148, 900e9, _SHEET),
    "gb200": Device("gb200", "gpu", 186 * GiB, 8000 * G, 2500 * T, 5000 * T, 80 * T, 148, 900e9,
                    _SHEET + " (per GPU)"),
    # This development host: 2 cores, 24 GiB. fp32 matmul ~95 GFLOP/s and bf16 ~0.3 GFLOP/s (no
    # AVX512-BF16) as measured in product.md. Memory bandwidth: measured on the dev host
    # with `python -c "a=np.ones(2**26); b=np.empty_like(a); np.copyto(b,a)"` (best of 5, read+write
    # bytes counted): 12.4 GB/s. No fp8.
    "cpu": Device("cpu", "cpu", 24 * GiB, 12.4 * G, 0.3 * G, None, 95 * G, 2, 12.4 * G,
                  "DEFAULT (dev-host measurement, not a vendor figure): run `acc profile` to measure"),
}


def device_from_custom(custom) -> Device:
    """A ``Device`` from a spec's inline ``CustomDevice`` (missing figures derived and labelled)."""
    fp32 = custom.fp32_flops if custom.fp32_flops is not None else custom.flops / 16  # typical tensor/CUDA-core ratio
    return Device(
        name=custom.name,
        kind="gpu",
        memory_bytes=int(custom.memory_bytes),
        bandwidth_bytes_s=float(custom.bandwidth_bytes_s),
        flops_bf16=float(custom.flops),
        flops_fp8=None if custom.fp8_flops is None else float(custom.fp8_flops),
        flops_fp32=float(fp32),
        sms=0,
        link_bandwidth_bytes_s=PCIE4_X16,
        source="custom device from the spec" + ("" if custom.fp32_flops is not None else " (fp32 = bf16/16, assumed)"),
    )


def resolve_device(hardware) -> Device:
    """The ``Device`` for a spec's ``target.hardware`` (a catalog name or a ``CustomDevice``)."""
    if isinstance(hardware, Device):
        return hardware
    if isinstance(hardware, str):
        try:
            return HARDWARE[hardware]
        except KeyError:
            raise KeyError(f"unknown hardware {hardware!r}; known: {', '.join(HARDWARE)}") from None
    return device_from_custom(hardware)
