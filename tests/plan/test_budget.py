"""The contract's budget: each bound resolved once (SI units, normalized form, E2E form, span), and
read by every stage that judges or optimises against it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autocompress import checker
from autocompress.lang.api import parse_spec
from autocompress.plan.budget import Budget, e2e_limit

REPO = Path(__file__).resolve().parent.parent.parent
PACKAGE = REPO / "autocompress"

SPEC = """\
model "smollm2-135m"
target {
  hardware  h100-sxm
  engine    vllm
  precision bf16
  memory    <= 1 GiB
}
workload npc {
  concurrency 4
  input  512 tokens
  output 64 tokens
  ttft     <= 200 ms
  tpot p99 <= 2 ms
  tpot     <= 900 us
}
workload chat {
  concurrency 16
  input  1K tokens
  output 256 tokens
  throughput >= 2000 tok/s
}
"""


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_each_bound_in_si_units_in_contract_order():
    spec = parse_spec(SPEC)
    b = Budget.from_spec(spec)
    assert b.names == ("npc.ttft", "npc.tpot", "npc.tpot", "chat.throughput", "memory")
    ttft, tpot99, tpot, thr, mem = b.bounds
    assert (ttft.metric, ttft.op, ttft.value, ttft.percentile) == ("ttft", "<=", pytest.approx(0.2), None)
    assert (tpot99.value, tpot99.percentile) == (pytest.approx(0.002), 99.0)
    assert tpot.value == pytest.approx(900e-6)
    assert (thr.metric, thr.op, thr.value) == ("throughput", ">=", 2000.0)
    assert (mem.metric, mem.op, mem.value, mem.workload) == ("memory", "<=", float(2**30), None)
    # the workload is the Spec's own object, and each cost field is the cost model's
    assert ttft.workload is spec.workloads[0] and thr.workload is spec.workloads[1]
    assert (ttft.field, tpot.field, thr.field) == ("ttft_s", "tpot_s", "throughput_tok_s")


def test_normalized_form_and_the_throughput_bound_as_e2e():
    spec = parse_spec(SPEC)
    b = Budget.from_spec(spec)
    ttft, thr, mem = b["npc.ttft"], b["chat.throughput"], b.memory
    assert (ttft.row, ttft.scale, ttft.e2e) == ("npc.ttft", ttft.value, None)
    assert (mem.row, mem.scale) == ("memory", float(2**30))
    # throughput >= 2000 tok/s of 16 sequences x 256 tokens <=> E2E <= 16 * 256 / 2000 s
    assert thr.row == "chat.e2e"
    assert thr.scale == thr.e2e == pytest.approx(16 * 256 / 2000) == e2e_limit(spec.workloads[1], 2000.0)
    # a normalized value of the row back in the bound's units: E2E at 0.5 of its bound is twice the throughput
    assert thr.from_normalized(0.5) == pytest.approx(4000.0) and thr.holds(thr.from_normalized(0.5))
    assert ttft.from_normalized(0.5) == pytest.approx(0.1) and ttft.holds(0.1) and not ttft.holds(0.3)
    assert not thr.holds(1999.0) and thr.holds(2000.0)


def test_lookups_by_name_workload_and_memory():
    b = Budget.from_spec(parse_spec(SPEC))
    assert [x.name for x in b.of_workload("npc")] == ["npc.ttft", "npc.tpot", "npc.tpot"]
    assert [x.name for x in b.of_workload("chat")] == ["chat.throughput"]
    assert b.workload_bounds == b.bounds[:-1] and b.memory is b.bounds[-1] and b["memory"] is b.memory
    assert b.get("npc.e2e") is None
    with pytest.raises(KeyError):
        b["npc.e2e"]  # noqa: B018
    # one metric at two percentiles shares a name; the relaxation's row (and the lookup) is the last
    assert list(b.rows) == ["npc.ttft", "npc.tpot", "chat.throughput"]
    assert b["npc.tpot"] is b.rows["npc.tpot"] is b.bounds[2] and b["npc.tpot"].percentile is None
    no_memory = Budget.from_spec(parse_spec(SPEC.replace("  memory    <= 1 GiB\n", "")))
    assert no_memory.memory is None and "memory" not in no_memory.names


def test_spans_point_at_the_contract():
    b = Budget.from_spec(parse_spec(SPEC))
    for bound, needle in ((b["npc.ttft"], "ttft"), (b.bounds[1], "tpot p99"), (b["chat.throughput"], "throughput"),
                          (b.memory, "memory")):
        assert bound.span.line == _line(SPEC, needle), bound.name


def test_resolved_once_per_spec_object():
    spec = parse_spec(SPEC)
    assert Budget.of(spec) is Budget.of(spec)
    # a spec equal in meaning but laid out differently keeps its own spans
    moved = parse_spec("\n\n" + SPEC)
    assert moved == spec and Budget.of(moved) is not Budget.of(spec)
    assert Budget.of(moved).memory.span.line == Budget.of(spec).memory.span.line + 2


def test_a_check_resolves_its_budget_once(monkeypatch):
    resolved = []
    build = Budget.from_spec

    def counted(cls, spec):
        resolved.append(spec)
        return build(spec)
    monkeypatch.setattr(Budget, "from_spec", classmethod(counted))
    report, _, _ = checker.compute(str(REPO / "examples" / "serve-h100.acspec"), None)
    assert report["verdict"] and len(resolved) == 1


# The stages that read the budget. A bound's name is never split back into workload and metric there.
CONSUMERS = (sorted((PACKAGE / "feasibility").glob("*.py")) + sorted((PACKAGE / "plan").glob("*.py"))
             + sorted((PACKAGE / "report").glob("*.py"))
             + [PACKAGE / p for p in ("search/tables.py", "search/router_v2.py", "measure/verify.py",
                                      "build/preflight.py")])


def test_no_consumer_splits_a_bound_name():
    found = []
    for path in CONSUMERS:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("split", "rsplit", "partition", "rpartition") and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "."):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, f"a bound name re-parsed (read the BudgetBound of plan.budget instead): {found}"
