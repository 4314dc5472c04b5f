"""Tiny assets for the engine tests: a heterogeneous DeciLM export, a CPU target, workloads."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "export"))

import _exportkit as kit  # noqa: E402

from autocompress.spec.model import Target, Workload  # noqa: E402

VOCAB = 512  # random prompt ids are drawn below this


def cpu_target(engine: str = "vllm") -> Target:
    return Target(hardware="cpu", engine=engine, weight_precision="fp32", kv_precision="fp32")


def workload(mode: str = "serve", c: int = 2, n_in: int = 48, n_out: int = 8, h: float = 0.0,
             name: str = "w") -> Workload:
    return Workload(name=name, concurrency=c, mode=mode, input_tokens=n_in, output_tokens=n_out, prefix_cache=h)


def tiny_checkpoint(root: Path) -> tuple[Path, object, object]:
    """(folder, Architecture, reference transformers model) of the heterogeneous tiny DeciLM."""
    from autocompress.export import decilm_config_from_architecture, export_decilm

    tok = kit.build_tokenizer(root / "tokenizer", VOCAB)
    arch = kit.hetero_arch(vocab=VOCAB)
    cfg = decilm_config_from_architecture(arch, **kit.GLOBALS)
    model = kit.random_decilm(cfg)
    out = export_decilm(root / "hetero", cfg, model.state_dict(), tok)
    return out, arch, model
