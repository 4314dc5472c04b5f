"""The eight-benchmark accuracy table (``acc eval``, the build report): dict -> Markdown (pure).

Input: ``{"student": stage result, "parent": stage result | None, "retained": ... | None}`` where a
stage result is ``accuracy.stage.run_accuracy``'s ``{"tasks", "summary", "settings", "humaneval"}``.
Scores are percentages with their standard errors (lm-eval's mean_stderr); the mean's SE treats
the tasks as independent.
"""

from __future__ import annotations

TITLES = {"arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge", "hellaswag": "HellaSwag", "piqa": "PIQA",
          "winogrande": "WinoGrande", "boolq": "BoolQ", "openbookqa": "OpenBookQA", "mmlu": "MMLU"}


def _pct(x: float, se: float | None = None) -> str:
    return f"{100 * x:.1f}" + (f" ± {100 * se:.1f}" if se is not None else "")


def render_accuracy_markdown(r: dict, heading: str = "###") -> str:
    s, p, ret = r["student"], r.get("parent"), r.get("retained")
    st = s["settings"]
    docs = s["summary"]["docs"]
    how = "every document (--full)" if st.get("full") else f"seeded subsamples (seed {st['seed']}, {docs} documents)"
    out = [f"{heading} Benchmark accuracy (lm-evaluation-harness 0.4.13 definitions, 0-shot, {how})", ""]
    head = "| task | metric | n |" + (" parent |" if p else "") + " model |" + (" retained |" if ret else "")
    out += [head, "|" + "---|" * (head.count("|") - 1)]
    for name, t in s["tasks"].items():
        row = f"| {TITLES.get(name, name)} | {t['metric']} | {t['n']}/{t['total']} |"
        if p:
            pt = p["tasks"][name]
            row += f" {_pct(pt['score'], pt['stderr'])} |"
        row += f" {_pct(t['score'], t['stderr'])} |"
        if ret:
            v = ret["tasks"].get(name)
            row += f" {v:.1%} |" if v is not None else " - |"
        out.append(row)
    row = f"| **mean of {s['summary']['tasks']}** | | {docs} |"
    if p:
        row += f" **{_pct(p['summary']['mean'], p['summary']['stderr'])}** |"
    row += f" **{_pct(s['summary']['mean'], s['summary']['stderr'])}** |"
    if ret:
        row += f" **{ret['mean']:.1%}** |" if ret["mean"] is not None else " - |"
    out.append(row)
    he_s, he_p = s.get("humaneval"), (p or {}).get("humaneval")
    if he_s:
        out += ["", f"HumanEval reference solutions, mean log-prob per token: model {he_s['mean_logprob']:.4f}"
                + (f", parent {he_p['mean_logprob']:.4f}" if he_p else "")]
    for kind, h in (r.get("heldout") or {}).items():
        out.append(f"- held-out {kind} perplexity (from the build report): parent {h['parent_ppl']:.2f}, "
                   f"model {h['student_ppl']:.2f}")
    return "\n".join(out) + "\n"
