"""The data behind every plot of the reports, as plain JSON-able dicts (pure; no matplotlib).

``report.plots`` draws them; the golden tests pin these dicts, not pixels. Each builder reads
only report dicts (``ir.arch_to_dict`` architectures, ``report.feasibility.evaluation_dict``
evaluations), so a cached report plots exactly like a fresh one. Numbers keep four significant
digits, as in the reports.

* ``architecture_data``: per layer, the FFN kept as a share of the parent's (width; MoE: experts x
  expert width), the mixer's heads (attention KV heads, Mamba2 heads) against the parent's, and
  which sub-blocks were removed; one series per model (autocompress, the uniform baseline).
* ``cost_data``: per workload, one request's E2E split into the engine's fixed prefill cost, the
  prefill steps, the decode ops and the decode overheads; each bound's prediction over the bound;
  the memory terms against the limit; one bar per model (parent, result, baseline).
* ``pareto_data``: quality against cost for any set of points, with the points on the front
  (no other point is at most as costly and at least as good); the benchmark of quality at equal
  cost uses it as well as the build report.
"""

from __future__ import annotations

from autocompress.plan.budget import bound_name

MEMORY_TERMS = ("weights", "kv_cache", "peak_activation", "non_torch", "gemm_shapes", "cuda_graphs", "margin",
                "context_overhead")
TIME_TERMS = ("fixed_s", "prefill_s", "decode_ops_s", "decode_overhead_s")


def _r(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def _ffn_size(f: dict | None) -> int:
    if f is None:
        return 0
    return f["width"] if f["kind"] == "mlp" else f["experts"] * f["expert_width"]


def _heads(m: dict | None) -> int:
    if m is None:
        return 0
    return m["kv_heads"] if m["kind"] == "attention" else m["heads"]


def architecture_data(title: str, parent: dict, models: dict[str, dict]) -> dict:
    """``models``: label -> architecture dict (``arch_to_dict``), in the order to draw them."""
    kinds = {m["kind"] for m in (layer["mixer"] for layer in parent["layers"]) if m}
    heads_label = " / ".join(sorted({"attention": "KV heads", "mamba2": "Mamba2 heads"}[k] for k in kinds)) or "heads"
    series = []
    for label, arch in models.items():
        ffn_share, heads, removed_mixer, removed_ffn = [], [], [], []
        for i, (layer, p) in enumerate(zip(arch["layers"], parent["layers"])):
            ffn_share.append(None if p["ffn"] is None else _r(_ffn_size(layer["ffn"]) / _ffn_size(p["ffn"])))
            heads.append(None if p["mixer"] is None else _heads(layer["mixer"]))
            if p["mixer"] is not None and layer["mixer"] is None:
                removed_mixer.append(i)
            if p["ffn"] is not None and layer["ffn"] is None:
                removed_ffn.append(i)
        series.append({"label": label, "hidden": arch["hidden"], "params": arch["params"], "ffn_share": ffn_share,
                       "heads": heads, "removed_mixer": removed_mixer, "removed_ffn": removed_ffn})
    return {"kind": "architecture", "title": title, "layers": len(parent["layers"]), "heads_label": heads_label,
            "parent": {"hidden": parent["hidden"], "params": parent["params"],
                       "heads": [None if layer["mixer"] is None else _heads(layer["mixer"]) for layer in parent["layers"]]},
            "series": series}


def cost_data(title: str, models: dict[str, dict]) -> dict:
    """``models``: label -> evaluation dict (``evaluation_dict``; the parent first, then the results)."""
    names = [w["name"] for w in next(iter(models.values()))["workloads"]]
    workloads = []
    for name in names:
        bars = []
        for label, ev in models.items():
            w = next(x for x in ev["workloads"] if x["name"] == name)
            b = w["breakdown"]
            bars.append({"label": label, "waves": b["waves"], **{t: b[t] for t in TIME_TERMS}, "e2e_s": w["e2e_s"],
                         "ttft_s": w["ttft_s"]})
        checks = next(iter(models.values()))["checks"]
        bounds = {c["metric"]: c["bound"] for c in checks if c["name"] == bound_name(name, c["metric"])}
        workloads.append({"name": name, "bars": bars, "bounds": {k: bounds[k] for k in sorted(bounds)}})
    ratios = []
    for c in next(iter(models.values()))["checks"]:
        ratios.append({"bound": c["name"], "op": c["op"], "values": [
            {"label": label, "ratio": next(x for x in ev["checks"] if x["name"] == c["name"])["ratio"]}
            for label, ev in models.items()]})
    memory = {"limit": next(iter(models.values()))["memory"]["limit"],
              "bars": [{"label": label, **{t: ev["memory"].get(t, 0) for t in MEMORY_TERMS},
                        "total": ev["memory"]["total"]}
                       for label, ev in models.items()]}
    return {"kind": "costs", "title": title, "workloads": workloads, "ratios": ratios, "memory": memory}


def pareto_front(points: list[dict], lower_quality_is_better: bool = True) -> list[str]:
    """Labels of the points no other point dominates (cost no higher and quality no worse, one of
    them strictly), sorted by cost."""
    def better_or_equal(a, b):  # a at least as good as b in quality
        return a <= b if lower_quality_is_better else a >= b

    front = []
    for p in points:
        dominated = any(q is not p and q["cost"] <= p["cost"] and better_or_equal(q["quality"], p["quality"])
                        and (q["cost"] < p["cost"] or q["quality"] != p["quality"]) for q in points)
        if not dominated:
            front.append(p)
    return [p["label"] for p in sorted(front, key=lambda p: (p["cost"], p["label"]))]


def pareto_data(title: str, points: list[dict], x_label: str, y_label: str,
                lower_quality_is_better: bool = True, x_line: float | None = None) -> dict:
    """``points``: ``{"label", "cost", "quality"}`` and optionally ``"group"`` (a colour per group,
    e.g. the strategy). ``x_line``: a vertical line (the bound when the cost is a bound ratio)."""
    pts = [{"label": p["label"], "cost": _r(p["cost"]), "quality": _r(p["quality"]), "group": p.get("group", "")}
           for p in points]
    return {"kind": "pareto", "title": title, "x_label": x_label, "y_label": y_label,
            "lower_quality_is_better": lower_quality_is_better, "x_line": x_line, "points": pts,
            "front": pareto_front(pts, lower_quality_is_better)}


def worst_ratio(ev: dict) -> float:
    """The contract load of one evaluation: its largest prediction-over-bound ratio (1 = on a bound)."""
    return max(c["ratio"] for c in ev["checks"])


# ---- the plots of each report -------------------------------------------------------------

def check_plots(report: dict) -> dict[str, dict]:
    """The feasibility report's plots: the starting architecture beside the uniform baseline, and
    the costs of the parent, the start and the baseline (what exists of them)."""
    spec = report["spec"]["path"]
    models = {k: report[key] for k, key in (("starting point", "start"), ("uniform baseline", "uniform"))
              if report.get(key)}
    out = {}
    if models:
        out["architecture"] = architecture_data(f"{spec}: per-layer architecture (predicted by acc check)",
                                                report["parent"]["architecture"],
                                                {k: v["architecture"] for k, v in models.items()})
    out["costs"] = cost_data(f"{spec}: predicted costs against the contract", {"parent": report["parent_costs"], **models})
    return out


def build_plots(r: dict) -> dict[str, dict]:
    """The build report's plots: the built architecture (beside the uniform baseline when it was
    built), the predicted costs, and quality (held-out perplexity, measured) against cost (the
    largest prediction-over-bound ratio)."""
    b = r.get("baseline")
    label = r["strategy"]
    archs = {label: r["architecture"], **({f"{b['strategy']} baseline": b["architecture"]} if b else {})}
    evs = {"parent": r["parent_predicted"], label: r["predicted"], **({f"{b['strategy']} baseline": b["predicted"]} if b else {})}
    out = {"architecture": architecture_data(f"{r['spec']}: per-layer architecture ({label}"
                                             + (f" and the {b['strategy']} baseline)" if b else ")"),
                                             r["parent_architecture"], archs),
           "costs": cost_data(f"{r['spec']}: predicted costs against the contract", evs)}
    q = r["quality"]
    kind = "code" if "code" in q["student"] else next(iter(q["student"]), None)
    if kind is not None and r.get("parent_predicted"):
        points = [{"label": "parent", "cost": worst_ratio(r["parent_predicted"]), "quality": q["parent"][kind]["ppl"],
                   "group": "parent"},
                  {"label": label, "cost": worst_ratio(r["predicted"]), "quality": q["student"][kind]["ppl"],
                   "group": label}]
        if b:
            points.append({"label": f"{b['strategy']} baseline", "cost": worst_ratio(b["predicted"]),
                           "quality": b["quality"]["student"][kind]["ppl"], "group": b["strategy"]})
        out["quality-cost"] = pareto_data(f"{r['spec']}: quality against cost", points,
                                          "contract load: largest predicted / bound (1 = on a bound)",
                                          f"held-out {kind} perplexity (measured)", x_line=1.0)
    return out
