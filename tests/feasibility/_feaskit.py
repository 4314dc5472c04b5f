"""Helpers for the feasibility tests: a tiny hand-built parent and the objects ``assess`` needs."""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.catalog.hardware import HARDWARE
from autocompress.cost.profile import load_profile
from autocompress.plan.derive import engine_limits
from autocompress.feasibility.assess import assess
from autocompress.feasibility.objective import prior_importance
from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.plan.space import derive_space
from autocompress.lang.model import Bound, ParentRef, Spec, Target, Workload

MiB = 1 << 20
ms = 1e-3


def tiny_arch(layers: int = 4, hidden: int = 256, heads: int = 4, head_dim: int = 64, kv: int = 2,
              ffn: int = 1024, vocab: int = 4096) -> Architecture:
    block = Block(Attention(heads, kv, head_dim), MLP(ffn))
    return Architecture("llama", vocab, hidden, heads, head_dim, True, (block,) * layers, 2048, "tiny")


def spec_for(*workloads: Workload, hardware: str = "rtx-5070", engine: str = "vllm",
             memory: int | None = None, precision: str = "bf16") -> Spec:
    target = Target(hardware, engine, precision, precision, 1, memory)
    return Spec(ParentRef("alias", "tiny"), target, tuple(workloads))


def serve(name: str = "chat", concurrency: int = 1, inp: int = 512, out: int = 64, prefix: float = 0.0,
          **bounds: float) -> Workload:
    """A serve-mode workload; ``bounds`` maps metric -> value (seconds or tok/s)."""
    bs = tuple(Bound(m, ">=" if m == "throughput" else "<=", v) for m, v in bounds.items())
    return Workload(name, concurrency, "serve", inp, out, prefix, bs)


def batch(name: str = "offline", n: int = 8, inp: int = 512, out: int = 128, **bounds: float) -> Workload:
    bs = tuple(Bound(m, ">=" if m == "throughput" else "<=", v) for m, v in bounds.items())
    return Workload(name, n, "batch", inp, out, 0.0, bs)


@dataclass
class Setup:
    spec: Spec
    arch: Architecture
    device: object
    profile: object
    space: object
    importance: object
    limits: object

    def assess(self, **kw):
        return assess(self.spec, self.arch, self.profile, self.device, self.space, self.importance,
                      self.limits, **kw)


def setup(spec: Spec, arch: Architecture | None = None) -> Setup:
    arch = arch or tiny_arch()
    device = HARDWARE[spec.target.hardware]
    profile = load_profile(None, device, spec.target.engine)
    space = derive_space(arch, spec.target.engine, device.kind)
    return Setup(spec, arch, device, profile, space, prior_importance(arch), engine_limits(spec, device))
