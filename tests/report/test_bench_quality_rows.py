"""bench/quality_at_equal_cost.py keeps finished rows across sessions only for the exact same
benchmark contract, and bench/pareto_sweep.py rewrites the host contract's binding (memory) bound."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(name: str):
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_committed_row_is_kept_only_for_the_same_contract_text(tmp_path):
    q = _bench("quality_at_equal_cost")
    text = q.contract_spec("cpu-vllm", 1, 60, 128, 20, "../out/cpu-vllm-s1")
    assert "seed 1" in text and "steps 60  seq_len 128 tokens" in text and 'output "../out/cpu-vllm-s1"' in text
    out = tmp_path / "quality"
    rows = [{"contract": "cpu-vllm", "seed": 1, "spec": text, "commit": "abc1234", "written": "w", "report": {}},
            {"contract": "cpu-vllm", "seed": 0, "report": {}}]  # an old row: no spec, never kept
    (tmp_path / "quality.json").write_text(json.dumps(rows))
    args = argparse.Namespace(out=str(out), fresh=False)
    assert q.committed_row(args, "cpu-vllm", 1, text)["commit"] == "abc1234"
    other = q.contract_spec("cpu-vllm", 1, 30, 128, 20, "../out/cpu-vllm-s1")  # another distillation budget
    assert q.committed_row(args, "cpu-vllm", 1, other) is None
    assert q.committed_row(args, "cpu-vllm", 0, q.contract_spec("cpu-vllm", 0, 60, 128, 20, "../out/cpu-vllm-s0")) is None
    assert q.committed_row(argparse.Namespace(out=str(out), fresh=True), "cpu-vllm", 1, text) is None
    assert q.committed_row(argparse.Namespace(), "cpu-vllm", 1, text) is None  # the Pareto sweep's arguments


def test_the_pareto_levels_rewrite_the_memory_bound_and_nothing_else(tmp_path, monkeypatch):
    p = _bench("pareto_sweep")
    monkeypatch.setattr(p, "ROOT", tmp_path)
    (tmp_path / "examples").mkdir()
    original = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    (tmp_path / "examples" / "cpu-vllm.acspec").write_text(original)
    name = p.level_example(0.7, 3791 * 2 ** 20)
    text = (tmp_path / "bench" / "work" / "examples" / f"{name}.acspec").read_text()
    assert name == "cpu-vllm-x70" and "memory <= 2654 MiB" in text
    changed = [(a, b) for a, b in zip(original.splitlines(), text.splitlines()) if a != b]
    assert len(changed) == 1 and "memory" in changed[0][0]


def test_the_capacity_table_counts_sub_blocks_widths_and_thirds():
    c = _bench("capacity")
    att = {"kind": "attention", "kv_heads": 3}
    layers = [{"mixer": att, "ffn": {"width": 100}}, {"mixer": None, "ffn": {"width": 50}},
              {"mixer": {"kind": "attention", "kv_heads": 1}, "ffn": None},
              {"mixer": att, "ffn": {"width": 50}}, {"mixer": att, "ffn": {"width": 100}},
              {"mixer": None, "ffn": None}]
    s = c.shape({"hidden": 64, "params": 2_500_000, "layers": layers})
    assert (s["attention"], s["kv"], s["ffn"], s["distinct_widths"]) == (4, "1x1/3x3", 4, 2)
    assert s["ffn_widths"] == "50-100 (median 75)" and s["params_m"] == 2.5
    assert s["thirds"] == "50/17/33"  # layers 0-1: 150, 2-3: 50, 4-5: 100 of 300 channels
    assert c.chosen_kl("measured choice: greedy (hidden 512), KL 4.037 (27 of 30 layers differ)") == 4.037
    assert c.chosen_kl("no measurement") is None
