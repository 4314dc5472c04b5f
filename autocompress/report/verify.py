"""The verified contract report (``acc verify``) as Markdown for a pull request.

Measured and predicted numbers sit in separate columns; when nothing was measured the measured
columns are absent and the heading says "predicted", with the calibration profile and its known
error, so a prediction is never read as a measurement. A measured report also shows each bound's
ratio to the parent (measured interleaved with it, so the host's drift cancels) against the
predicted ratio, and the verdict corrected by the host-speed index. Quality is the build's, held-out
sets and standard errors included, rendered as the build report renders it (``report.build``).
"""

from __future__ import annotations

from autocompress.report.build import quality_markdown
from autocompress.report.feasibility import fmt_value


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _ratio_se(x: float | None, se: float | None) -> str:
    return _ratio(x) if se is None else f"{x:.3f} ± {se:.1%}"


def _yes(ok) -> str:
    return "-" if ok is None else "yes" if ok else "**NO**"


def render_verify_markdown(r: dict) -> str:
    measured = r["status"] == "measured"
    prof = r["profile"]
    err = prof.get("known_error") or {}
    err_txt = ", ".join(f"{k} median {v['median']:.1%} / p95 {v['p95']:.1%}" for k, v in sorted(err.items()))
    calib = (f"profile `{prof['name']}` ({prof['source']}"
             + (f"; error on held-out models: {err_txt})" if err_txt else "; never measured against this engine)"))
    head = "MEASURED" if measured else "PREDICTED ONLY"
    out = [f"## autocompress verify: `{r['spec']}`: {head}", "",
           f"- **Model**: `{r['model']}`",
           f"- **Target**: {r['hardware']} with {r['engine']}; {r['environment']}",
           f"- **Predictions**: {calib}; {prof.get('origin', '')}"]
    if measured:
        m = r["measurements"]
        vers = ", ".join(f"{k} {v}" for k, v in sorted(r["versions"].items()))
        out += [f"- **Measured on**: {r['host']}; {vers}; load average before {m['load_before'][0]:.2f}, after "
                f"{m['load_after'][0]:.2f}; {len(m['runs'])} engine runs in {m['seconds']:.0f} s, interleaved with "
                f"the {m['reference']} ({m['passes']} pass{'es' if m['passes'] > 1 else ''})", "",
                "| bound | contract | predicted | measured | margin | pass | ratio to parent: measured / predicted "
                "| host index | corrected | pass (corrected) |", "|---|---|---|---|---|---|---|---|---|---|"]
        differ = []
        for b in r["bounds"]:
            corr = fmt_value(b["metric"], b["corrected"]) if b.get("corrected") is not None else "-"
            out.append(f"| {b['name']} | {b['op']} {fmt_value(b['metric'], b['bound'])} | "
                       f"{fmt_value(b['metric'], b['predicted'])} | **{fmt_value(b['metric'], b['measured'])}** | "
                       f"{_pct(b['margin'])} | {_yes(b['pass'])} | {_ratio_se(b.get('ratio_measured'), b.get('ratio_se'))} / "
                       f"{_ratio(b.get('ratio_predicted'))} | {_ratio(b.get('host_index'))} | {corr} | "
                       f"{_yes(b.get('pass_corrected'))} |")
            if b.get("pass_corrected") is not None and b["pass_corrected"] != b["pass"]:
                differ.append(b["name"])
        out += ["", "Judged on the absolute measurement. Host index = the parent measured now / the profile's "
                    "prediction for it (> 1: the host runs slower than at calibration); corrected = measured / "
                    "index. Ratios: each model over the mean of the parent runs before and after it."]
        pd = m.get("paired")
        if pd and "error" in pd:
            out += ["", f"The paired-engine ratios ({pd['pairings']} pairings) failed: {pd['error']}. The ratios "
                        "above are the interleaved ones."]
        elif pd:
            out += ["", f"Ratios to the parent (± SE) are from **paired engines**: each model and the parent loaded "
                        f"side by side, taking turns in chunks of seconds, in {pd['pairings']} pair(s) of fresh "
                        f"processes per model with the start order swapped ({pd['rounds']} rounds, "
                        f"{pd['engine_starts']} engine starts, {pd['seconds']:.0f} s). The interleaved ratios are in "
                        "the JSON (`ratio_interleaved`); absolute values and memory are the interleaved runs'."]
        if differ:
            out += ["", f"**The corrected verdict differs** for {', '.join(differ)}: the host's speed now, not the "
                        "model, decides it. Re-run `acc verify` when the host is quiet."]
        others = sorted({n for b in r["bounds"] for n in (b.get("others") or {})})
        if others:
            out += ["", "Measured in the same run (interleaved, same engine settings):", "",
                    "| bound | model | " + " | ".join(f"{n} | model / {n}, per pass" for n in others) + " |",
                    "|---|---|" + "---|---|" * len(others)]
            for b in r["bounds"]:
                cells = []
                for n in others:
                    o = b["others"][n]
                    per = o.get("model_over_this") or []
                    ab = (f"**{sum(per) / len(per):.3f}** ({', '.join(f'{x:.3f}' for x in per)})" if per else "-")
                    if o.get("model_over_this_paired") is not None:
                        ab += f"; paired **{o['model_over_this_paired']:.3f} ± {o['model_over_this_se']:.1%}**"
                    cells.append(f"{fmt_value(b['metric'], o['measured'])} ({_yes(o['pass'])}) | {ab}")
                out.append(f"| {b['name']} | {fmt_value(b['metric'], b['measured'])} | " + " | ".join(cells) + " |")
            out += ["", "model / other: the two measured in the same pass, minutes apart, with no reference between "
                        "them in the quotient (> 1: the model is dearer for a latency or memory bound); paired: the "
                        "two models' paired ratios to the parent divided, their SEs added in quadrature."]
        source = r["measurements"].get("memory_source", "the serving process's peak resident memory (VmHWM)")
        out += ["", f"Memory is {source}. Latencies: the mean over runs of "
                    "each run's median, unless the bound names a percentile (all samples pooled)."]
    else:
        out += ["", f"Nothing was measured ({r['environment'].removeprefix('not measured: ')}). "
                    "The numbers below are predictions.", "",
                "| bound | contract | predicted | predicted ok |", "|---|---|---|---|"]
        for b in r["bounds"]:
            out.append(f"| {b['name']} | {b['op']} {fmt_value(b['metric'], b['bound'])} | "
                       f"{fmt_value(b['metric'], b['predicted'])} | {'yes' if b['predicted_ok'] else '**no**'} |")
    q = r.get("quality")
    if q:  # the build report's block, rendered as the build report renders it
        out += [""] + quality_markdown(q, "model", heading="### Quality retained (measured at build time on held-out "
                                                           "data)")
    out.append("")
    return "\n".join(out)
