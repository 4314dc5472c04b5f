"""The build report: what was built, its predicted costs against the bounds, and quality retained.

Written next to the exported model as ``autocompress-report.md`` / ``.json`` plus labelled
charts (``report.plots``: ``architecture.png``, ``costs.png``, ``quality-cost.png``; skipped, and
said so, without matplotlib). Costs are predictions of the named profile (``acc verify``
measures them where the hardware is present); quality numbers are measured here, on held-out
data, and say on how many tokens.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autocompress import __version__
from autocompress.cache import atomic_write_text
from autocompress.export.card import card_block, parent_license, write_card
from autocompress.feasibility.exact import evaluate
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


def render_build_markdown(r: dict) -> str:
    a, p = r["architecture"], r["parent_architecture"]
    out = [f"## autocompress build: `{r['spec']}` ({r['strategy']})", "",
           f"- **Model**: `{r['output']}` ({r['distill'].get('format', '?')} format), hidden {a['hidden']}, "
           f"{a['params'] / 1e6:,.1f}M params (parent {p['params'] / 1e6:,.1f}M); {r['how']}",
           f"- **Costs are predicted** by profile `{r['predicted']['profile']}` ({r['predicted']['profile_source']}); "
           "`acc verify` measures them where the target is present.", "",
           "### Bounds (predicted)", "", "| bound | contract | predicted | ok |", "|---|---|---|---|"]
    for c in r["predicted"]["checks"]:
        out.append(f"| {c['name']} | {c['op']} {fmt_value(c['metric'], c['bound'])} | "
                   f"{fmt_value(c['metric'], c['predicted'])} | {'yes' if c['ok'] else '**no**'} |")
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
    out += ["", "### Quality retained (measured on held-out data)", "",
            "| data | tokens | parent ppl | student ppl | KL(parent‖student) | top-1 agreement |",
            "|---|---|---|---|---|---|"]
    q = r["quality"]
    for kind, s in q["student"].items():
        pp = q["parent"][kind]["ppl"]
        kl = f"{s['kl']:.4f}" if s["kl"] is not None else "-"
        t1 = f"{s['top1']:.1%}" if s["top1"] is not None else "-"
        out.append(f"| {kind} | {s['tokens']:,} | {pp:.2f} | {s['ppl']:.2f} | {kl} | {t1} |")
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
        for kind, s in b["quality"]["student"].items():
            out.append(f"- {kind}: ppl {s['ppl']:.2f}, KL {s['kl']:.4f}, top-1 {s['top1']:.1%}")
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
