"""Engine adapters: load an exported model in a real engine, run a contract workload, measure it.

* ``Engine`` (protocol): ``load(model_dir, target, limits)`` / ``run(workload, seed, settings)``
  -> ``Measurement`` / ``close()``, and a context manager.
* ``open_engine(name)``: ``"vllm"`` -> ``VLLMEngine``, ``"transformers"`` -> ``HFEngine`` (the table
  below; keys equal ``autocompress.lang.model.ENGINES``).
* ``base.derive_limits(arch, target, workloads)``: engine settings from our derivation and memory model.

Definitions match ``autocompress.cost.latency`` (facts.md "Benchmark definitions"). Nothing heavy is
imported here: torch, transformers and vllm load inside the adapters' ``load``.
"""

from __future__ import annotations

from autocompress.measure.engines.base import Engine
from autocompress.measure.engines.hf_engine import HFEngine
from autocompress.measure.engines.vllm_engine import VLLMEngine

ADAPTERS = {"vllm": VLLMEngine, "transformers": HFEngine}  # engine name -> adapter class


def open_engine(name: str, **kwargs) -> Engine:
    """An unloaded adapter for engine ``name``; call ``load`` (or use it as a context manager after)."""
    return ADAPTERS[name](**kwargs)
