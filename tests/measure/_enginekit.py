"""Tiny assets for the engine tests: a heterogeneous DeciLM export, a CPU target, workloads."""

from __future__ import annotations

from pathlib import Path

import _exportkit as kit  # tests/export, on the path (pyproject's pytest pythonpath)

from autocompress.lang.model import Target, Workload

VOCAB = 512  # random prompt ids are drawn below this


def cpu_target(engine: str = "vllm") -> Target:
    return Target(hardware="cpu", engine=engine, weight_precision="fp32", kv_precision="fp32")


def workload(mode: str = "serve", c: int = 2, n_in: int = 48, n_out: int = 8, h: float = 0.0,
             name: str = "w") -> Workload:
    return Workload(name=name, concurrency=c, mode=mode, input_tokens=n_in, output_tokens=n_out, prefix_cache=h)


def tiny_checkpoint(root: Path) -> tuple[Path, object, object]:
    """(folder, Architecture, reference transformers model) of the heterogeneous tiny DeciLM."""
    from autocompress.export.decilm import decilm_config_from_architecture
    from autocompress.export.writer import export_decilm

    tok = kit.build_tokenizer(root / "tokenizer", VOCAB)
    arch = kit.hetero_arch(vocab=VOCAB)
    cfg = decilm_config_from_architecture(arch, **kit.GLOBALS)
    model = kit.random_decilm(cfg)
    out = export_decilm(root / "hetero", cfg, model.state_dict(), tok)
    return out, arch, model


def long_checkpoint(root: Path, max_position: int = 1024) -> tuple[Path, object, object]:
    """The same heterogeneous DeciLM with room for 512-token prompts (prefix caching needs whole
    128-token blocks on vLLM CPU)."""
    import dataclasses

    from autocompress.export.decilm import decilm_config_from_architecture
    from autocompress.export.writer import export_decilm

    tok = kit.build_tokenizer(root / "tokenizer", VOCAB)
    arch = dataclasses.replace(kit.hetero_arch(vocab=VOCAB), max_position=max_position)
    cfg = decilm_config_from_architecture(arch, **kit.GLOBALS)
    model = kit.random_decilm(cfg)
    out = export_decilm(root / "hetero-long", cfg, model.state_dict(), tok)
    return out, arch, model


def check_consistent(m, w, requests: int | None = None) -> None:
    """The measurement's definitions hold (facts.md "Benchmark definitions")."""
    import math

    assert (m.workload, m.mode, m.concurrency) == (w.name, w.mode, w.concurrency)
    assert m.n == len(m.samples) and m.n >= 1
    if requests is not None:
        assert m.n == requests
    for s in m.samples:
        assert s.output_tokens == w.output_tokens and s.input_tokens == w.input_tokens
        assert s.e2e_s >= s.ttft_s > 0
        assert math.isclose(s.tpot_s * (s.output_tokens - 1) + s.ttft_s, s.e2e_s, rel_tol=0.01)
    per_sample = w.concurrency if w.mode == "batch" else 1
    tokens = sum(s.output_tokens for s in m.samples) * per_sample
    assert math.isclose(m.throughput_tok_s, tokens / m.elapsed_s, rel_tol=1e-9)
    if w.mode == "batch":
        assert math.isclose(m.elapsed_s, sum(s.e2e_s for s in m.samples), rel_tol=1e-9)
    else:
        assert max(s.e2e_s for s in m.samples) <= m.elapsed_s * (1 + 1e-9)
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        ps = [v for (name, _, v) in m.percentiles if name == metric]
        assert len(ps) == 3 and ps == sorted(ps)
        values = sorted(getattr(s, metric) for s in m.samples)
        assert values[0] <= ps[0] <= ps[-1] <= values[-1]
        assert math.isclose(getattr(m, metric), ps[0])  # the median is p50
    assert m.e2e_s >= m.ttft_s > 0
    assert m.memory.rss_increase_bytes > 0 and m.memory.weights_bytes > 0
    assert m.versions and m.device and m.method
