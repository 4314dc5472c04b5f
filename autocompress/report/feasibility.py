"""The feasibility report: built once as a plain dict, rendered as JSON or Markdown (pure functions).

Every number is a prediction of the named cost-model profile; the report says so, and quotes the
profile's measured error or states that it was never measured. Numbers are rounded to four
significant digits so reports are deterministic across platforms (golden files pin them).
"""

from __future__ import annotations

import hashlib
import json
import os

from autocompress import __version__
from autocompress.ir import Architecture, arch_to_dict
from autocompress.report.plots import markdown

SCHEMA_ID = "autocompress/feasibility-report/v3"
MiB = 1 << 20


def _r(x: float | None) -> float | None:
    if x is None:
        return None
    return float(f"{x:.4g}")


def arch_report(arch: Architecture, importance: float | None = None) -> dict:
    """``ir.arch_to_dict`` plus the importance kept (rounded), as every report prints architectures."""
    out = arch_to_dict(arch)
    if importance is not None:
        out["importance_kept"] = _r(importance)
    return out


def breakdown_dict(c) -> dict:
    """Where one request's E2E goes (one wave; E2E = waves x the sum): the engine's fixed prefill
    cost, the prefill steps, and the decode steps split into engine overheads (launches, per-layer
    and per-step costs, from the mean decode step's share) and the rest (the ops themselves)."""
    return {"fixed_s": _r(c.fixed_s), "prefill_s": _r(c.prefill_s), "decode_ops_s": _r(c.decode_s * (1 - c.overhead_share)),
            "decode_overhead_s": _r(c.decode_s * c.overhead_share), "waves": c.waves}


def evaluation_dict(ev) -> dict:
    m = ev.memory
    return {
        "workloads": [{"name": c.workload, "mode": c.mode, "ttft_s": _r(c.ttft_s), "tpot_s": _r(c.tpot_s),
                       "e2e_s": _r(c.e2e_s), "throughput_tok_s": _r(c.throughput_tok_s),
                       "decode_bound": c.decode_bound, "prefill_bound": c.prefill_bound,
                       "cuda_graphs": c.cuda_graphs, "breakdown": breakdown_dict(c)} for c in ev.workloads],
        "checks": [{"name": c.name, "metric": c.metric, "op": c.op, "bound": _r(c.bound),
                    "predicted": _r(c.predicted), "ok": c.ok, "ratio": _r(c.ratio)} for c in ev.checks],
        "memory": {"weights": m.weights_bytes, "peak_activation": m.peak_activation_bytes,
                   "non_torch": m.non_torch_bytes, "gemm_shapes": m.gemm_shape_bytes,
                   "cuda_graphs": m.cuda_graph_bytes, "margin": m.margin_bytes,
                   "kv_cache": m.kv_reserved_bytes, "total": m.total_bytes, "limit": m.limit_bytes,
                   "context_overhead": m.context_overhead_bytes, "fits": m.fits, "message": m.message,
                   "cpu_kv_space_gib": m.cpu_kv_space_gib},
        "decode_floor_s": {name: _r(v) for name, v in ev.floors},
        "ok": ev.ok,
    }


def build_report(spec, path: str, source: str, parent, derived, feas, importance_file: dict | None = None,
                 variants: tuple = ()) -> dict:
    """The report dict (schema ``specs/feasibility-report.schema.json``). ``importance_file``:
    ``{"file", "sha256"}`` of the importance file the objective used, None for the prior.
    ``variants``: the global sizes swept (``feasibility.variants``), when the parent has any."""
    t = spec.target
    prof = derived.profile
    where = derived.origin
    known = None
    if prof.known_error:
        known = {k: {"median": _r(v.median), "p95": _r(v.p95)} for k, v in prof.known_error}
    report = {
        "schema": SCHEMA_ID,
        "autocompress": __version__,
        "spec": {"path": os.path.basename(path), "sha256": hashlib.sha256(source.encode()).hexdigest()},
        "parent": {"name": spec.parent.value, "kind": parent.kind, "description": parent.description,
                   "config_sha256": parent.content_hash, "has_weights": parent.has_weights,
                   "architecture": arch_report(parent.architecture)},
        "target": {"hardware": derived.device.name, "engine": t.engine, "weight_precision": t.weight_precision,
                   "kv_precision": t.kv_precision, "tensor_parallel": t.tensor_parallel,
                   "memory_limit_bytes": t.memory_limit_bytes},
        "cost_model": {"profile": prof.name, "source": prof.source, "known_error": known,
                       "kind": "predicted", "origin": where[0], "origin_note": where[1]},
        "derived": [{"setting": a, "value": b, "why": c} for a, b, c in derived.rows],
        "importance": "prior" if importance_file is None else {"source": "file", **importance_file},
        "verdict": feas.verdict,
        "reason": feas.reason,
        "parent_costs": evaluation_dict(feas.parent),
        "start": None,
        "uniform": None,
        "binding": list(feas.binding),
        "hidden_sweep": [{"hidden": d, "status": st, "objective": _r(v) if v == v else None}
                         for d, st, v in feas.lp],
        "diagnosis": [{"bound": x.bound, "metric": x.metric, "op": x.op, "value": _r(x.value), "best": _r(x.best),
                       "note": x.note, "basis": x.basis} for x in feas.diagnosis],
        "serve_with": {"max_num_seqs": derived.limits.max_num_seqs,
                       "max_num_batched_tokens": derived.limits.max_num_batched_tokens} if t.engine == "vllm" else None,
    }
    if variants:
        report["variants"] = [{**v, "importance_kept": _r(v["importance_kept"])} for v in variants]
    if feas.start is not None:
        report["start"] = {**evaluation_dict(feas.start.evaluation),
                           "architecture": arch_report(feas.start.evaluation.arch, feas.start.importance)}
    if feas.uniform is not None:
        report["uniform"] = {**evaluation_dict(feas.uniform.evaluation),
                             "architecture": arch_report(feas.uniform.evaluation.arch, feas.uniform.importance)}
    return report


def render_json(report: dict) -> str:
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


# ---- Markdown ------------------------------------------------------------------------------

def fmt_value(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    if metric == "memory":
        return f"{v / MiB:,.0f} MiB" if v < 10 * (1 << 30) else f"{v / (1 << 30):,.2f} GiB"
    if metric == "throughput":
        return f"{v:,.0f} tok/s"
    return f"{v * 1e3:,.3g} ms" if v < 1 else f"{v:,.3g} s"


def _check_cell(c: dict | None) -> str:
    if c is None:
        return "-"
    mark = "ok" if c["ok"] else f"**x{c['ratio']:.2f}**"
    return f"{fmt_value(c['metric'], c['predicted'])} ({mark})"


def layer_runs(arch: dict) -> list[tuple[str, str, str]]:
    """(layers, mixer, ffn) with consecutive identical layers merged: '3-7', 'attn kv 1', 'mlp 768'."""
    def mix(m):
        return "removed" if m is None else f"attn kv {m['kv_heads']}" if m["kind"] == "attention" else \
            f"mamba {m['heads']} heads"

    def ffn(f):
        return "removed" if f is None else f"mlp {f['width']}" if f["kind"] == "mlp" else \
            f"moe {f['experts']}x{f['expert_width']}"
    rows, start = [], 0
    layers = arch["layers"]
    for i in range(1, len(layers) + 1):
        if i == len(layers) or layers[i] != layers[start]:
            span = f"{start}" if i - 1 == start else f"{start}-{i - 1}"
            rows.append((span, mix(layers[start]["mixer"]), ffn(layers[start]["ffn"])))
            start = i
    return rows


VERDICT_TEXT = {"feasible": "FEASIBLE", "infeasible": "INFEASIBLE (proved)", "not_found": "NOT FOUND (not proved)"}


def render_markdown(report: dict, plots: list[dict] | None = None) -> str:
    """``plots``: entries of ``report.plots.write_plots`` to embed (``acc check --format md --out``)."""
    t, p = report["target"], report["parent"]
    out = [f"## autocompress check: `{report['spec']['path']}`: **{VERDICT_TEXT[report['verdict']]}**", ""]
    if report.get("reason"):
        out += [f"> {report['reason']}", ""]
    limit = f", memory <= {fmt_value('memory', t['memory_limit_bytes'])}" if t["memory_limit_bytes"] else ""
    out.append(f"- **Parent**: {p['description']}")
    out.append(f"- **Target**: {t['hardware']}, {t['engine']}, {t['weight_precision']} weights, "
               f"{t['kv_precision']} KV cache, tensor parallel {t['tensor_parallel']}{limit}")
    cm = report["cost_model"]
    err = ("never measured on this target: treat predictions as estimates" if not cm["known_error"] else
           "measured error " + ", ".join(f"{k} median {v['median']:.1%} / p95 {v['p95']:.1%}"
                                         for k, v in cm["known_error"].items()))
    out.append(f"- **All numbers are predicted** by cost-model profile `{cm['profile']}` ({cm['source']}; {err}).")
    out.append(f"- **Profile origin**: {cm['origin_note']}.")
    imp = report["importance"]
    out.append("- **Objective**: the importance prior (no build state read)" if imp == "prior" else
               f"- **Objective**: measured importance from `{imp['file']}` (sha256 {imp['sha256'][:12]}...)")
    if report.get("serve_with"):
        sw = report["serve_with"]
        out.append(f"- **Serve with**: `--max-num-seqs {sw['max_num_seqs']} "
                   f"--max-num-batched-tokens {sw['max_num_batched_tokens']}` (predictions assume these)")
    out += ["", "### Bounds", "",
            "| bound | contract | parent | starting point | uniform baseline | binding |",
            "|---|---|---|---|---|---|"]
    start, uni = report.get("start"), report.get("uniform")
    by = lambda rep, name: next((c for c in rep["checks"] if c["name"] == name), None) if rep else None  # noqa: E731
    for c in report["parent_costs"]["checks"]:
        bound = f"{c['op']} {fmt_value(c['metric'], c['bound'])}"
        out.append(f"| {c['name']} | {bound} | {_check_cell(c)} | {_check_cell(by(start, c['name']))} | "
                   f"{_check_cell(by(uni, c['name']))} | {'yes' if c['name'] in report['binding'] else ''} |")
    if start:
        a = start["architecture"]
        out += ["", f"### Starting architecture: hidden {a['hidden']}, {a['params'] / 1e6:,.1f}M params "
                    f"(parent {p['architecture']['params'] / 1e6:,.1f}M), importance kept {a['importance_kept']:.3f}",
                "", "| layers | mixer | FFN |", "|---|---|---|"]
        out += [f"| {s} | {m} | {f} |" for s, m, f in layer_runs(a)]
        if uni:
            u = uni["architecture"]
            out += ["", f"Uniform baseline (identical sizes in every layer): hidden {u['hidden']}, "
                        f"{u['params'] / 1e6:,.1f}M params, importance kept {u['importance_kept']:.3f}."]
        else:
            out += ["", "Uniform baseline: **no uniform architecture meets this contract**; only a heterogeneous "
                        "one does."]
    if report.get("variants"):
        out += ["", "### Global sizes (one value for every layer: the export format's)", "",
                "| Mamba2 heads | expert width | verdict | importance kept | |", "|---|---|---|---|---|"]
        dash = lambda v: "-" if v is None else f"{v}"  # noqa: E731
        out += [f"| {dash(v['mamba_heads'])} | {dash(v['expert_width'])} | {v['verdict']} | "
                f"{'-' if v['importance_kept'] is None else format(v['importance_kept'], '.3f')} | "
                f"{'chosen' if v['chosen'] else ''} |" for v in report["variants"]]
    floors = report["parent_costs"]["decode_floor_s"]
    out += ["", "### Decode floor (bytes that must move / bandwidth, parent)", ""]
    out += [f"- {w}: {fmt_value('tpot', v)} per decode step" for w, v in floors.items()]
    mem = (start or report["parent_costs"])["memory"]
    which = "starting point" if start else "parent"
    out += ["", f"### Memory ({which}, engine accounting)", "", "| term | bytes |", "|---|---|"]
    for k in ("weights", "peak_activation", "non_torch", "gemm_shapes", "cuda_graphs", "margin", "kv_cache", "total",
              "limit"):
        if k != "gemm_shapes" or mem.get(k):  # charged by vllm-cpu profiles only (cost.memory.gemm_shapes)
            out.append(f"| {k} | {fmt_value('memory', mem[k])} |")
    if mem["message"]:
        out += ["", f"> {mem['message']}"]
    if report["diagnosis"]:
        out += ["", "### What would make it feasible", ""]
        for d in report["diagnosis"]:
            if d["basis"] == "engine":
                out.append(f"- `{d['bound']}` {d['op']} {fmt_value(d['metric'], d['value'])}: {d['note']}.")
            elif d["best"] is None:
                out.append(f"- `{d['bound']}`: {d['note']}.")
            else:
                basis = "with every other bound kept" if d["basis"] == "others kept" else "with every other bound dropped"
                out.append(f"- `{d['bound']}` {d['op']} {fmt_value(d['metric'], d['value'])}: the best reachable "
                           f"{basis} is **{fmt_value(d['metric'], d['best'])}** "
                           f"(continuous relaxation, a lower bound; {d['note']}).")
    if plots is not None:
        out += ["", "### Plots", ""] + markdown(plots)
    out += ["", "<details><summary>Derived settings</summary>", "", "| setting | value | why |", "|---|---|---|"]
    out += [f"| {r['setting']} | {r['value']} | {r['why']} |" for r in report["derived"]]
    out += ["", "</details>", ""]
    return "\n".join(out)
