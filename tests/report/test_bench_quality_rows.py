"""The quality benchmark's baseline mode (bench/lib/baseline.py) keeps stored rows only for the exact
same benchmark contract, and its Pareto levels (bench/lib/pareto.py) rewrite the host contract's
binding (memory) bound."""

import argparse
import json
from pathlib import Path

from bench import quality
from bench.lib import baseline, pareto

ROOT = Path(__file__).resolve().parents[2]


def test_a_committed_row_is_kept_only_for_the_same_contract_text(tmp_path):
    q = baseline
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
    assert q.committed_row(argparse.Namespace(), "cpu-vllm", 1, text) is None  # arguments without --out


def test_the_pareto_levels_rewrite_the_memory_bound_and_nothing_else(tmp_path, monkeypatch):
    p = pareto
    monkeypatch.setattr(p, "ROOT", tmp_path)
    (tmp_path / "examples").mkdir()
    original = (ROOT / "examples" / "cpu-vllm.acspec").read_text()
    (tmp_path / "examples" / "cpu-vllm.acspec").write_text(original)
    name = p.level_example(0.7, 3791 * 2 ** 20)
    text = (tmp_path / "bench" / "work" / "examples" / f"{name}.acspec").read_text()
    assert name == "cpu-vllm-x70" and "memory <= 2654 MiB" in text
    changed = [(a, b) for a, b in zip(original.splitlines(), text.splitlines()) if a != b]
    assert len(changed) == 1 and "memory" in changed[0][0]


def test_the_levels_are_a_flag_of_the_baseline_mode():
    args = quality.parser().parse_args(["baseline", "--levels", "0.67", "0.7"])
    assert args.levels == [0.67, 0.7] and not args.no_contract and args.seed == 0
    assert Path(args.out) == ROOT / "bench" / "results" / "quality" / "baseline"  # whose contract row a level reuses
    assert quality.parser().parse_args(["baseline"]).levels is None
