"""The build report: what was built, its predicted costs against the bounds, and quality retained.

Written next to the exported model as ``autocompress-report.md`` / ``.json`` plus labelled
charts (``report.plots``: ``architecture.png``, ``costs.png``, ``quality-cost.png``; skipped, and
said so, without matplotlib). Costs are predictions of the named profile (``acc verify``
measures them where the hardware is present); quality numbers are measured here, on held-out
data, and say on how many tokens, with their standard errors.

"Quality retained" names each held-out set, its sources, its license and whether it is in the
distillation's domain, as the evaluation recorded them (``evaluate.heldout.compared``), and the
summary states the gap when a kind's out-of-domain KL passes the evaluation's threshold.
"Sensitivity" gives the size the check finds with each binding bound moved by the profile's known
error (``feasibility.sensitivity``, computed once when the report is written).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from autocompress import __version__
from autocompress.cache import atomic_write_text
from autocompress.export.card import card_block, parent_license, write_card
from autocompress.feasibility.exact import evaluate
from autocompress.feasibility.sensitivity import bound_sensitivity
from autocompress.report.accuracy import render_accuracy_markdown
from autocompress.report.feasibility import arch_report, evaluation_dict, fmt_value, layer_runs
from autocompress.report.plot_data import build_plots
from autocompress.report.plots import markdown as plots_markdown
from autocompress.report.plots import write_plots

SCHEMA_ID = "autocompress/build-report/v1"


def write_build_report(out: Path, spec, spec_path, check_report, chosen, arch, parent, derived, settings, quality,
                       distill, timings, total_seconds, baseline: dict | None = None) -> dict:
    ev = evaluate(arch, spec, derived.profile, derived.device, derived.limits)
    report = {
        "schema": SCHEMA_ID,
        "autocompress": __version__,
        "spec": Path(spec_path).name,
        "output": os.path.relpath(out, Path(spec_path).resolve().parent),  # relative: no machine paths in reports
        "strategy": settings.strategy,
        "how": chosen.get("how"),
        "refine": chosen.get("refine"),
        "shortlist": chosen.get("shortlist"),
        "how_search": chosen.get("how_search"),
        "search": chosen.get("search"),  # the router's own record (v2: choices moved, KL of the prior and of the decode)
        "architecture": arch_report(arch, chosen["architecture"].get("importance_kept")),
        "parent_architecture": arch_report(parent.architecture),
        "predicted": {**evaluation_dict(ev), "profile": derived.profile.name, "profile_source": derived.profile.source},
        "quality": quality,
        "baseline": baseline,
        "distill": distill,
        "settings": [{"setting": a, "value": b, "why": c} for a, b, c in settings.rows],
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "total_s": round(total_seconds, 1),
        "feasibility_verdict": check_report["verdict"],
        "parent_predicted": check_report.get("parent_costs"),
        # the size the check finds with each binding bound moved by the profile's known error
        "sensitivity": asdict(bound_sensitivity(spec, parent.architecture, derived)),
    }
    report["plots"] = write_plots(out, build_plots(report))
    atomic_write_text(out / "autocompress-report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out / "autocompress-report.md", render_build_markdown(report))
    _write_cards(out, report, check_report, parent, spec_path)
    return report


def _write_cards(out: Path, report: dict, check_report: dict, parent, spec_path) -> None:
    """The model card and config block of the export, and of the baseline's export when built."""
    lic = parent_license(parent)
    write_card(out, card_block(report, check_report, lic), lic["files"])
    b = report.get("baseline")
    if b:
        pred = {**b["predicted"], "profile": report["predicted"]["profile"],
                "profile_source": report["predicted"]["profile_source"]}
        base = {**report, "strategy": b["strategy"], "architecture": b["architecture"], "quality": b["quality"],
                "predicted": pred, "plots": []}
        write_card(Path(spec_path).resolve().parent / b["output"], card_block(base, check_report, lic), lic["files"])


def shortlist_markdown(sl: dict | None, how_search: str | None = None, whose: str = "") -> list[str]:
    """The finalists' table (``build.shortlist``): KL before and after a short distillation, and
    after the runoff's longer one for its two entrants (``build.runoff``)."""
    if not sl:
        return []
    ro = sl.get("runoff")
    out = ["", f"### Finalists{whose} (each distilled {sl['steps']} steps x {sl['batch']} x {sl['seq_len']} tokens; KL to "
               f"the parent on {sl['validation_tokens']:,} held-apart training tokens, {sl['seconds']} s)", ""]
    if how_search:
        out += [f"The search alone would have built: {how_search}.", ""]
    if ro:
        out += [f"Runoff: the two finalists within {ro['margin']:.0%} of each other after {sl['steps']} steps were "
                f"distilled again for {ro['steps']} steps ({ro['seconds']} s); the least KL after it is built.", ""]
    runoff_kl = dict(zip(ro["entrants"], ro["kl_after"])) if ro else {}
    extra = (f" after {ro['steps']} (runoff) |", "---|") if ro else ("", "")
    out += ["| finalist | params | KL before distillation (search's rows) | KL held apart, before | after |"
            + extra[0] + " |", "|---|---|---|---|---|" + extra[1] + "---|"]
    for i, f in enumerate(sl["finalists"]):
        kl = "-" if f["kl_search"] is None else f"{f['kl_search']:.3f}"
        more = (f" {runoff_kl[i]:.3f} |" if i in runoff_kl else " - |") if ro else ""
        out.append(f"| {f['name']} | {f['params'] / 1e6:,.1f}M | {kl} | {f['kl_before']:.3f} | {f['kl_after']:.3f} |"
                   + more + (" **chosen**" if i == sl["chosen"] else " ") + " |")
    return out


def frontier_note(f: dict | None) -> str:
    """The default's uniform frontier in the candidates' heading: its own forwards and time, beside
    the greedy's (``search.uniform.frontier_candidates``)."""
    if not f:
        return ""
    return (f"; then the uniform grid's frontier, measured as the uniform arm measures it: {f['forwards']} of its "
            f"{f['frontier']} candidates, {f['tokens']} tokens, {f['seconds']} s; {f.get('listed', f['forwards'])} "
            "listed here, the rest are points the greedy already had")


def _se(v: float | None, se: float | None, fmt: str) -> str:
    """``v ± se`` in one format (percent formats give the SE in points); "-" without a value."""
    if v is None:
        return "-"
    return f"{v:{fmt}}" if se is None else f"{v:{fmt}} ± {se:{fmt}}"


def _set_label(s: dict) -> str:
    return f"{s['name']} ({'in' if s['in_domain'] else 'out of'} domain)"


def gap_summary(q: dict) -> list[str]:
    """The summary's line for each kind whose out-of-domain KL passes the evaluation's threshold
    (``evaluate.heldout.domain_gaps``); none otherwise."""
    sets = {s["name"]: s for s in q.get("sets") or []}
    out = []
    for g in q.get("domain_gaps") or []:
        if g["flagged"]:
            what = (sets.get(g["out_of_domain"]) or {"sources": "out of domain"})["sources"].split(":")[0]
            out.append(f"- **Out-of-domain {g['kind']} loses more**: KL to the parent {g['kl_out']:.3f} on "
                       f"{g['out_of_domain']} ({what}), {g['ratio']:.2f}x the {g['kl_in']:.3f} on the in-domain "
                       f"{g['in_domain']} rows (over {g['threshold']:g}x): the in-domain rows resemble the "
                       "distillation data and understate the loss on other text")
    return out


def quality_markdown(q: dict, strategy: str, baseline: dict | None = None, heading: str = "### Quality retained "
                     "(measured on held-out data)") -> list[str]:
    """The held-out sets (what each is), then parent, model and uniform baseline on each, ± one SE.
    ``q``: the report's quality block (``evaluate.heldout.compared``); ``baseline``: the uniform
    baseline's. Reports written before the sets were recorded render without those columns."""
    sets = {s["name"]: s for s in q.get("sets") or []}
    out = [heading, ""]
    if sets:
        out += ["| held-out set | in the distillation's domain | sources | license |", "|---|---|---|---|"]
        out += [f"| {s['name']} | {'yes' if s['in_domain'] else '**no**'} | {s['sources']} | {s['license'] or '-'} |"
                for s in sets.values()]
        for why in q.get("sets_missing") or []:
            out.append(f"| {why.split(':')[0]} | - | not measured: {why.split(': ', 1)[-1]} | - |")
        out += [""]
    out += ["| data | model | tokens | perplexity | KL(parent‖model) | top-1 agreement |",
            "|---|---|---|---|---|---|"]
    models = [("parent", q["parent"]), (strategy, q["student"])]
    if baseline:
        models.append(("uniform baseline", baseline["student"]))
    for name in q["student"]:
        label = _set_label(sets[name]) if name in sets else name
        for who, qs in models:
            s = qs.get(name)
            if s is None:
                continue
            tokens = f"{s['tokens']:,}" if s.get("tokens") is not None else "-"
            out.append(f"| {label} | {who} | {tokens} | {_se(s['ppl'], s.get('ppl_se'), '.2f')} | "
                       f"{_se(s.get('kl'), s.get('kl_se'), '.4f')} | {_se(s.get('top1'), s.get('top1_se'), '.1%')} |")
    if any("ppl_se" in s for s in q["student"].values()):
        out += ["", "± one standard error over rows (each row a stretch of text; sample SD / sqrt(rows)); "
                    "perplexity's by the delta method. KL is the parent's top-k + tail approximation, a lower bound."]
    gaps = q.get("domain_gaps") or []
    if gaps:
        out += [""] + [f"- out-of-domain {g['kind']}: KL {g['kl_out']:.3f} against {g['kl_in']:.3f} in the domain, "
                       f"{g['ratio']:.2f}x" + (f" (over {g['threshold']:g}x: stated in the summary)" if g["flagged"]
                                               else f" (within {g['threshold']:g}x)") for g in gaps]
    return out


def sensitivity_summary(sens: dict | None, params: int) -> list[str]:
    """The summary's line: the range of sizes the check finds within the profile's p95 error on
    each binding bound (``feasibility.sensitivity``); none without a measured error."""
    out = []
    for b in (sens or {}).get("bounds") or []:
        sizes = [sh["params"] for sh in b["shifts"] if sh["params"] is not None]
        if sizes:
            out.append(f"- **Calibration spread**: with `{b['bound']}` moved by the profile's known error (p95 "
                       f"{b['p95']:.1%}), the check finds {min(sizes) / 1e6:,.1f}M to {max(sizes) / 1e6:,.1f}M params "
                       f"(this model {params / 1e6:,.1f}M; see Sensitivity)")
    return out


def sensitivity_markdown(sens: dict | None, params: int) -> list[str]:
    """The size the check finds at each binding bound moved by the profile's known error
    (``feasibility.sensitivity``), beside this model's ``params``."""
    if not sens:
        return []
    out = ["", f"### Sensitivity to the profile's known error (profile `{sens['profile']}`, {sens['profile_source']})",
           ""]
    if not sens["binding"]:
        return out + ["No bound binds at the starting point the check finds: a small misprediction moves no size."]
    if not sens["bounds"]:
        return out + [f"Binding: {', '.join(sens['binding'])}. The profile has no measured error for "
                      f"{', '.join(sens['unknown'])} (never measured against this engine: `acc profile` measures it), "
                      "so the spread it causes is unknown."]
    out += ["A profile that over-predicts a cost by e leaves the model the bound x (1 + e) in predicted terms; one "
            "that under-predicts, the bound x (1 - e). The check's search (prior importance, as `acc check`) at each "
            f"limit ({sens['seconds']} s; -: it found none); this model has {params / 1e6:,.1f}M params.", "",
            "| bound | profile error | limit (predicted terms) | check's architecture | uniform grid's best |",
            "|---|---|---|---|---|"]
    for b in sens["bounds"]:
        n = f", {b['samples']} models" if b.get("samples") else ""
        for sh in b["shifts"]:
            err = "at the bound" if sh["stat"] == "none" else f"{sh['error']:+.1%} ({sh['stat']}{n})"
            mp = "-" if sh["params"] is None else f"{sh['params'] / 1e6:,.1f}M"
            up = "-" if sh["uniform_params"] is None else f"{sh['uniform_params'] / 1e6:,.1f}M"
            out.append(f"| {b['bound']} | {err} | {b['op']} {fmt_value(b['metric'], sh['limit'])} | {mp} "
                       f"({sh['verdict']}) | {up} |")
    if sens["unknown"]:
        out += ["", f"No measured error for {', '.join(sens['unknown'])}: not shifted."]
    return out


def render_build_markdown(r: dict) -> str:
    a, p = r["architecture"], r["parent_architecture"]
    out = [f"## autocompress build: `{r['spec']}` ({r['strategy']})", "",
           f"- **Model**: `{r['output']}` ({r['distill'].get('format', '?')} format), hidden {a['hidden']}, "
           f"{a['params'] / 1e6:,.1f}M params (parent {p['params'] / 1e6:,.1f}M); {r['how']}",
           f"- **Costs are predicted** by profile `{r['predicted']['profile']}` ({r['predicted']['profile_source']}); "
           "`acc verify` measures them where the target is present."]
    out += sensitivity_summary(r.get("sensitivity"), a["params"]) + gap_summary(r["quality"]) + ["",
           "### Bounds (predicted)", "", "| bound | contract | predicted | ok |", "|---|---|---|---|"]
    for c in r["predicted"]["checks"]:
        out.append(f"| {c['name']} | {c['op']} {fmt_value(c['metric'], c['bound'])} | "
                   f"{fmt_value(c['metric'], c['predicted'])} | {'yes' if c['ok'] else '**no**'} |")
    out += sensitivity_markdown(r.get("sensitivity"), a["params"])
    ref = r.get("refine")
    if ref:
        out += ["", f"### Candidates (KL to the parent before distillation, measured on {ref.get('tokens', '?')} "
                    f"training tokens the greedy never saw; {ref['forwards']} forwards"
                    + (f", {ref['seconds']} s" if ref.get("seconds") is not None else "")
                    + frontier_note(ref.get("uniform_frontier")) + ")", "",
                "| candidate | hidden | attention | FFN | FFN widths | GEMM shapes | KL |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {c['name']} | {c['hidden']} | {c['attention']} | {c['ffn']} | {c.get('ffn_widths', '-')} | "
                f"{c.get('shapes', '-')} | {c['kl']:.3f} |" for c in sorted(ref["candidates"], key=lambda c: c["kl"])]
    out += shortlist_markdown(r.get("shortlist"), r.get("how_search"))
    q = r["quality"]
    b_quality = (r.get("baseline") or {}).get("quality")
    out += [""] + quality_markdown(q, r["strategy"], b_quality)
    he = q.get("humaneval") or {}
    if he.get("student"):
        out += ["", f"HumanEval reference solutions ({he['student']['problems']} problems, "
                    f"{he['student']['tokens']:,} tokens), mean log-prob per token: parent "
                    f"{he['parent']['mean_logprob']:.4f}, student {he['student']['mean_logprob']:.4f}"]
    acc = q.get("accuracy") or {}
    if acc.get("student"):
        out += ["", render_accuracy_markdown(acc).rstrip()]
    elif acc.get("skipped"):
        out += ["", f"Benchmark accuracy: not measured ({acc['skipped']})"]
    if r.get("baseline"):
        b = r["baseline"]
        out += ["", f"Uniform baseline (same importance, cost model, bounds, selection and distillation budget): "
                    f"{b['architecture']['params'] / 1e6:,.1f}M params" + (f"; {b['how']}" if b.get("how") else "")]
        out.append("- held-out quality: in the table above")
        bhe = (b["quality"].get("humaneval") or {}).get("student")
        if bhe:
            out.append(f"- HumanEval mean log-prob per token: {bhe['mean_logprob']:.4f}")
        bacc = (b["quality"].get("accuracy") or {}).get("student")
        if bacc:
            s = bacc["summary"]
            kept = b["quality"]["accuracy"]["retained"]["mean"]
            out.append(f"- eight-benchmark mean: {100 * s['mean']:.1f} ± {100 * s['stderr']:.1f}"
                       + (f" ({kept:.1%} of the parent's)" if kept is not None else ""))
        out += shortlist_markdown(b.get("shortlist"), whose=" of the uniform baseline")
    out += ["", "### Plots", ""] + plots_markdown(r.get("plots") or [])
    out += ["### Architecture (per layer; the architecture plot above draws it)", "",
            "| layers | mixer | FFN |", "|---|---|---|"]
    out += [f"| {s} | {m} | {f} |" for s, m, f in layer_runs(a)]
    d = r["distill"]
    out += ["", f"Distillation: {d.get('steps')} steps, {d.get('tokens'):,} tokens, {d.get('seconds')} s "
                f"(loss {d.get('first_loss'):.4f} -> {d.get('last_loss'):.4f})" if d.get("first_loss") is not None else "",
            "", "### Stage wall times", ""]
    out += [f"- {k}: {v} s" for k, v in r["timings_s"].items()] + [f"- total: {r['total_s']} s", ""]
    out += ["<details><summary>Derived build settings</summary>", "", "| setting | value | why |", "|---|---|---|"]
    out += [f"| {x['setting']} | {x['value']} | {x['why']} |" for x in r["settings"]] + ["", "</details>", ""]
    return "\n".join(out)
