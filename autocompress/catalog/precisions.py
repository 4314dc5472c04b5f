"""Numeric precisions: bytes per element and which peak-FLOPs figure of a device applies.

Keys equal ``autocompress.lang.model.PRECISIONS`` (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    bytes: int  # storage bytes per element (weights or KV cache)
    flops_attr: str  # the ``Device`` field holding the dense peak for matmuls in this precision
    activation: str  # dtype activations are kept in when weights use this precision


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 4, "flops_fp32", "fp32"),
    "bf16": Precision("bf16", 2, "flops_bf16", "bf16"),
    "fp16": Precision("fp16", 2, "flops_bf16", "fp16"),  # fp16 and bf16 tensor-core peaks are equal
    # vLLM fp8 (W8A8, dynamic activation scales): GEMMs run at the fp8 peak; activations between
    # kernels, embeddings, the LM head and norms stay 16-bit. Devices without fp8 (A100) fall back to
    # weight-only fp8 (Marlin) at the bf16 peak: see ``peak_flops``.
    "fp8": Precision("fp8", 1, "flops_fp8", "bf16"),
}


def peak_flops(device, precision: str) -> float:
    """Dense peak FLOP/s of ``device`` for matmuls in ``precision`` (fp8 falls back to bf16)."""
    value = getattr(device, PRECISIONS[precision].flops_attr)
    if value is None:
        value = device.flops_bf16
    return float(value)


def activation_bytes(weight_precision: str) -> int:
    """Bytes per activation element when the model's weights are in ``weight_precision``."""
    return PRECISIONS[PRECISIONS[weight_precision].activation].bytes
