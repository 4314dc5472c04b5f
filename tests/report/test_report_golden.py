"""Feasibility reports of every example: pinned Markdown and JSON, schema-valid, deterministic."""

from __future__ import annotations

import copy
import json

import pytest
from _reportkit import EXAMPLES_DIR, GOLDEN, check_golden, example_params, example_result, schema_errors

from autocompress.report.feasibility import render_json, render_markdown


@pytest.mark.parametrize("name", example_params())
def test_markdown_golden(name):
    report, _ = example_result(name)
    text = render_markdown(report)
    assert text == render_markdown(copy.deepcopy(report))  # pure: same dict, same text
    check_golden(GOLDEN / f"{name}.md", text)


@pytest.mark.parametrize("name", example_params())
def test_json_golden(name):
    report, _ = example_result(name)
    text = render_json(report)
    assert json.loads(text) == json.loads(json.dumps(report))
    check_golden(GOLDEN / f"{name}.json", text)


@pytest.mark.parametrize("name", example_params())
def test_json_report_matches_schema(name):
    report, _ = example_result(name)
    errors = schema_errors(json.loads(render_json(report)))
    assert not errors, "\n".join(errors)


SHIPPED = ("nemotron-h-56b-b200-128k", "nemotron-nano-b200-128k")  # examples/reports/: linked from the README


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_example_reports_are_current(name):
    from _reportkit import REPO

    report, _ = example_result(name)
    assert (REPO / "examples" / "reports" / f"{name}.md").read_text(encoding="utf-8") == render_markdown(report)


@pytest.mark.parametrize("name", ["cpu-vllm", "npc-5070-infeasible"])  # the two fastest: ~1 s each
def test_report_is_deterministic(name):
    from autocompress.checker import compute

    again, _, _ = compute(str(EXAMPLES_DIR / f"{name}.acspec"), None)
    report, _ = example_result(name)
    assert render_json(again) == render_json(report)
    assert render_markdown(again) == render_markdown(report)


# ---- the schema is strict: it rejects what build_report never writes --------------------------

def _mutations():
    def drop(key):
        return lambda r: r.pop(key)

    def setk(path, value):
        def f(r):
            obj = r
            for k in path[:-1]:
                obj = obj[k]
            obj[path[-1]] = value
        return f

    return {
        "missing verdict": drop("verdict"),
        "missing parent_costs": drop("parent_costs"),
        "extra top-level key": setk(["surprise"], 1),
        "verdict enum": setk(["verdict"], "maybe"),
        "cost-model source enum": setk(["cost_model", "source"], "guessed"),
        "importance enum": setk(["importance"], "measured"),
        "schema id": setk(["schema"], "autocompress/feasibility-report/v1"),
        "check ok type": setk(["parent_costs", "checks", 0, "ok"], "yes"),
        "check op enum": setk(["parent_costs", "checks", 0, "op"], "<"),
        "extra key in a check": setk(["parent_costs", "checks", 0, "extra"], 0),
        "layer mixer kind": setk(["parent", "architecture", "layers", 0, "mixer"], {"kind": "rnn", "kv_heads": 1}),
        "negative weights": setk(["parent_costs", "memory", "weights"], -1),
        "sha256 pattern": setk(["spec", "sha256"], "abc"),
        "hidden as string": setk(["parent", "architecture", "hidden"], "576"),
    }


@pytest.mark.parametrize("what", list(_mutations()))
def test_schema_rejects_malformed_reports(what):
    report = json.loads(render_json(example_result("npc-5070-infeasible")[0]))
    assert not schema_errors(report)
    _mutations()[what](report)
    assert schema_errors(report), what


def test_schema_verdict_consistency():
    feasible = json.loads(render_json(example_result("cpu-vllm")[0]))
    infeasible = json.loads(render_json(example_result("npc-5070-infeasible")[0]))
    broken = copy.deepcopy(feasible)
    broken["verdict"] = "infeasible"  # infeasible with a starting point: rejected
    assert schema_errors(broken)
    broken = copy.deepcopy(infeasible)
    broken["diagnosis"] = []  # infeasible without a diagnosis: rejected
    assert schema_errors(broken)
    broken = copy.deepcopy(infeasible)
    broken["reason"] = ""  # a verdict other than feasible always says why
    assert schema_errors(broken)
    not_found = json.loads(render_json(example_result("batch-h100-not-found")[0]))
    assert not schema_errors(not_found)
    broken = copy.deepcopy(not_found)
    broken["diagnosis"] = copy.deepcopy(infeasible["diagnosis"])  # nothing proved: no "what would make it feasible"
    assert schema_errors(broken)
    broken = copy.deepcopy(feasible)
    broken["start"]["surprise"] = 1  # candidates are closed too
    assert schema_errors(broken)
    broken = copy.deepcopy(feasible)
    del broken["start"]["architecture"]["importance_kept"]
    assert schema_errors(broken)
