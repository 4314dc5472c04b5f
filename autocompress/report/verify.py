"""The verified contract report (``acc verify``) as Markdown for a pull request.

Measured and predicted numbers sit in separate columns; when nothing was measured the measured
columns are absent and the heading says "predicted", with the calibration profile and its known
error, so a prediction is never read as a measurement.
"""

from __future__ import annotations

from autocompress.report.feasibility import fmt_value


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


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
           f"- **Predictions**: {calib}"]
    if measured:
        m = r["measurements"]
        vers = ", ".join(f"{k} {v}" for k, v in sorted(r["versions"].items()))
        out += [f"- **Measured on**: {r['host']}; {vers}; load average before {m['load_before'][0]:.2f}, after "
                f"{m['load_after'][0]:.2f}; engine start {m['load_s']:.0f} s, all runs {m['seconds']:.0f} s",
                "", "| bound | contract | predicted | measured | margin | pass |", "|---|---|---|---|---|---|"]
        for b in r["bounds"]:
            out.append(f"| {b['name']} | {b['op']} {fmt_value(b['metric'], b['bound'])} | "
                       f"{fmt_value(b['metric'], b['predicted'])} | **{fmt_value(b['metric'], b['measured'])}** | "
                       f"{_pct(b['margin'])} | {'yes' if b['pass'] else '**NO**'} |")
        out += ["", "Margin = (bound - measured) / bound for upper bounds, (measured - bound) / bound for throughput; "
                    "memory is the serving process's peak resident memory (VmHWM). Latencies are medians over the "
                    "timed requests unless the bound names a percentile.", "",
                "| workload | requests | TTFT median | TPOT median | E2E median | throughput | other processes |",
                "|---|---|---|---|---|---|---|"]
        for w in m["measurements"]:
            other = w.get("other_cpu")
            out.append(f"| {w['workload']} | {w['n']} (+{w['warmup']} warm-up) | {w['ttft_s'] * 1e3:.1f} ms | "
                       f"{w['tpot_s'] * 1e3:.2f} ms | {w['e2e_s']:.3f} s | {w['throughput_tok_s']:.1f} tok/s | "
                       f"{'-' if other is None else f'{other:.2f} cores'} |")
        busy = max((w.get("other_cpu") or 0.0) for w in m["measurements"])
        if busy > 0.05:
            out += ["", f"**Warning**: other processes used up to {busy:.2f} CPU cores while the workloads ran; on a "
                        "shared host the measured latencies are pessimistic. Re-run `acc verify` on an idle machine."]
    else:
        out += ["", f"Nothing was measured ({r['environment'].removeprefix('not measured: ')}). "
                    "The numbers below are predictions.", "",
                "| bound | contract | predicted | predicted ok |", "|---|---|---|---|"]
        for b in r["bounds"]:
            out.append(f"| {b['name']} | {b['op']} {fmt_value(b['metric'], b['bound'])} | "
                       f"{fmt_value(b['metric'], b['predicted'])} | {'yes' if b['predicted_ok'] else '**no**'} |")
    q = r.get("quality")
    if q:
        out += ["", "### Quality retained (measured at build time on held-out data)", "",
                "| data | parent ppl | model ppl | KL | top-1 |", "|---|---|---|---|---|"]
        for kind, s in q["student"].items():
            kl = "-" if s.get("kl") is None else f"{s['kl']:.4f}"
            t1 = "-" if s.get("top1") is None else f"{s['top1']:.1%}"
            out.append(f"| {kind} | {q['parent'][kind]['ppl']:.2f} | {s['ppl']:.2f} | {kl} | {t1} |")
    out.append("")
    return "\n".join(out)
