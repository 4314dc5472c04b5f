"""The reports' plots: the data behind each one pinned per example (golden), the Pareto front
against a brute force, labelled figures, and reports that say a plot was skipped without matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from _reportkit import EXAMPLES_DIR, GOLDEN, check_golden, example_params, example_result
from _stockkit import without

from autocompress.report.feasibility import render_markdown
from autocompress.report.plot_data import check_plots, pareto_data, pareto_front


@pytest.mark.parametrize("name", example_params())
def test_check_plot_data_golden(name):
    report, _ = example_result(name)
    data = check_plots(report)
    assert data["costs"]["workloads"] and data["costs"]["ratios"]
    if report["start"]:
        arch = data["architecture"]
        assert arch["layers"] == len(report["parent"]["architecture"]["layers"])
        assert all(len(s["ffn_share"]) == arch["layers"] for s in arch["series"])
    check_golden(GOLDEN / "plots" / f"{name}.json", json.dumps(data, indent=1, sort_keys=True) + "\n")


def test_cost_breakdown_adds_up_to_e2e():
    """The bars of the cost plot are the whole request: waves x (fixed + prefill + decode) = E2E."""
    for name in ("cpu-vllm", "serve-h100", "batch-h100-not-found", "nemotron-nano-l40s"):
        report, _ = example_result(name)
        for w in check_plots(report)["costs"]["workloads"]:
            for b in w["bars"]:
                parts = b["fixed_s"] + b["prefill_s"] + b["decode_ops_s"] + b["decode_overhead_s"]
                assert b["waves"] * parts == pytest.approx(b["e2e_s"], rel=2e-3), (name, b)
                assert b["fixed_s"] + b["prefill_s"] == pytest.approx(b["ttft_s"], rel=2e-3), (name, b)


def test_removed_sub_blocks_are_marked():
    parent = {"hidden": 8, "params": 100, "layers": [{"mixer": {"kind": "attention", "kv_heads": 4},
                                                      "ffn": {"kind": "mlp", "width": 64}}] * 3}
    child = {"hidden": 8, "params": 50, "layers": [
        {"mixer": {"kind": "attention", "kv_heads": 2}, "ffn": {"kind": "mlp", "width": 32}},
        {"mixer": None, "ffn": {"kind": "mlp", "width": 64}},
        {"mixer": {"kind": "attention", "kv_heads": 4}, "ffn": None}]}
    from autocompress.report.plot_data import architecture_data

    d = architecture_data("t", parent, {"x": child})
    s = d["series"][0]
    assert s["ffn_share"] == [0.5, 1.0, 0.0] and s["heads"] == [2, 0, 4]
    assert s["removed_mixer"] == [1] and s["removed_ffn"] == [2] and d["heads_label"] == "KV heads"


def _brute_front(points):
    return sorted((p["label"] for p in points
                   if not any(q["cost"] <= p["cost"] and q["quality"] <= p["quality"] and
                              (q["cost"], q["quality"]) != (p["cost"], p["quality"]) for q in points)),
                  key=lambda n: next((p["cost"], p["label"]) for p in points if p["label"] == n))


def test_pareto_front_matches_brute_force():
    import random

    rng = random.Random(0)
    for _ in range(200):
        pts = [{"label": f"p{i}", "cost": rng.randint(0, 5), "quality": rng.randint(0, 5)} for i in range(7)]
        assert pareto_front(pts) == _brute_front(pts)
    hi = pareto_data("t", [{"label": "a", "cost": 1, "quality": 0.6}, {"label": "b", "cost": 2, "quality": 0.5}],
                     "cost", "accuracy", lower_quality_is_better=False)
    assert hi["front"] == ["a"]  # b costs more and is worse


def test_figures_are_labelled():
    pytest.importorskip("matplotlib")
    from autocompress.report.plots import DRAW

    report, _ = example_result("cpu-vllm")
    data = check_plots(report)
    data["quality-cost"] = pareto_data("q", [{"label": "parent", "cost": 1.5, "quality": 12.0},
                                             {"label": "autocompress", "cost": 1.0, "quality": 14.0}],
                                       "contract load", "code ppl", x_line=1.0)
    for name, d in data.items():
        fig = DRAW[d["kind"]](d)
        assert fig.get_suptitle() or any(ax.get_title() for ax in fig.axes), name
        main = [ax for ax in fig.axes if ax.get_xlabel() or ax.get_ylabel()]
        assert main, name
        assert any(ax.get_legend() for ax in fig.axes) or fig.legends, name  # a legend says what a mark means


def test_check_markdown_embeds_the_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from autocompress.report.plots import write_plots

    report, _ = example_result("cpu-vllm")
    entries = write_plots(tmp_path, check_plots(report), prefix="check-")
    text = render_markdown(report, entries)
    for e in entries:
        assert (tmp_path / e["file"]).read_bytes().startswith(b"\x89PNG")
        assert f"]({e['file']})" in text
    assert render_markdown(report) == render_markdown(report, None)  # no plots asked: the golden text


_NO_MPL = without("matplotlib") + textwrap.dedent(
    """
    from autocompress.checker import compute
    from autocompress.report.feasibility import render_markdown
    from autocompress.report.plot_data import check_plots
    from autocompress.report.plots import write_plots
    report, _, _ = compute(sys.argv[1], None)
    entries = write_plots(sys.argv[2], check_plots(report))
    print(render_markdown(report, entries))
    """
)


def test_without_matplotlib_reports_say_the_plot_was_skipped(tmp_path):
    p = subprocess.run([sys.executable, "-c", _NO_MPL, str(EXAMPLES_DIR / "cpu-vllm.acspec"), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "plot `architecture` skipped: matplotlib is not installed" in p.stdout
    assert "plot `costs` skipped" in p.stdout and "### Bounds" in p.stdout
    assert not list(tmp_path.glob("*.png"))
