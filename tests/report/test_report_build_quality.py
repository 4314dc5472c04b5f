"""The build report's held-out quality (sets named, in and out of domain, parent / model / uniform
with SEs, the domain gap in the summary) and its calibration sensitivity: pure renderers, pinned."""

from __future__ import annotations

import copy

from _reportkit import GOLDEN, check_golden

from autocompress.report.build import gap_summary, quality_markdown, sensitivity_markdown, sensitivity_summary
from autocompress.report.verify import render_verify_markdown


def _stats(ppl, kl=None, top1=None, tokens=3072):
    s = {"tokens": tokens, "rows": 24, "ppl": ppl, "ppl_se": ppl * 0.04, "nll": 0.0, "nll_se": 0.04, "kl": kl,
         "kl_se": None if kl is None else kl * 0.08, "top1": top1, "top1_se": None if top1 is None else 0.012}
    return s


SETS = [
    {"name": "code", "kind": "code", "in_domain": True, "license": "Python Software Foundation License",
     "sources": "standard-library .py sources (tests, IDLE, site-packages left out), the 5% hash split"},
    {"name": "prose", "kind": "prose", "in_domain": True, "license": "Python Software Foundation License",
     "sources": "pydoc_data.topics, the language reference behind help(), in ~1,500-character sections, "
                "the 5% hash split"},
    {"name": "code-ood", "kind": "code", "in_domain": False, "license": "MIT (lark)",
     "sources": "the lark parser's .py sources, third-party Python: lark 1.2.2, 35 files cut into ~1,500-character "
                "sections, 212 of them (329,692 characters) in digest order"},
    {"name": "prose-ood", "kind": "prose", "in_domain": False,
     "license": "the spdx package is CC0-1.0; each text is its license's own",
     "sources": "SPDX license texts, legal prose: spdx 2.5.1, 339 files cut into ~1,500-character sections, 243 of "
                "them (401,490 characters) in digest order"},
]


def _quality():
    parent = {"code": _stats(7.45), "prose": _stats(27.8), "code-ood": _stats(5.1), "prose-ood": _stats(9.6)}
    student = {"code": _stats(7.75, 0.39, 0.71), "prose": _stats(28.9, 0.255, 0.66),
               "code-ood": _stats(5.6, 0.37, 0.73), "prose-ood": _stats(14.0, 0.70, 0.52)}
    gaps = [{"kind": "code", "in_domain": "code", "out_of_domain": "code-ood", "kl_in": 0.39, "kl_out": 0.37,
             "ratio": 0.37 / 0.39, "threshold": 1.5, "flagged": False},
            {"kind": "prose", "in_domain": "prose", "out_of_domain": "prose-ood", "kl_in": 0.255, "kl_out": 0.70,
             "ratio": 0.70 / 0.255, "threshold": 1.5, "flagged": True}]
    return {"parent": parent, "student": student, "humaneval": {}, "sets": SETS, "sets_missing": [],
            "domain_gaps": gaps}


def _baseline():
    return {"student": {"code": _stats(8.2, 0.45, 0.69), "prose": _stats(30.1, 0.29, 0.64),
                        "code-ood": _stats(5.9, 0.42, 0.71), "prose-ood": _stats(15.2, 0.78, 0.50)}}


SENSITIVITY = {
    "profile": "cpu-vllm-measured", "profile_source": "measured", "binding": ["memory"], "unknown": [], "seconds": 1.4,
    "bounds": [{"bound": "memory", "metric": "memory", "op": "<=", "value": 2952790016.0, "median": 0.0156,
                "p95": 0.0287, "samples": 13, "shifts": [
                    {"error": -0.0287, "stat": "p95", "limit": 2868043943.0, "verdict": "feasible",
                     "params": 99_400_000, "uniform_params": 96_800_000},
                    {"error": 0.0, "stat": "none", "limit": 2952790016.0, "verdict": "feasible",
                     "params": 118_900_000, "uniform_params": 115_600_000},
                    {"error": 0.0287, "stat": "p95", "limit": 3037536089.0, "verdict": "feasible",
                     "params": 133_800_000, "uniform_params": None}]}]}


def test_quality_section_names_every_set_and_scores_parent_model_and_uniform():
    q, b = _quality(), _baseline()
    text = "\n".join(gap_summary(q) + sensitivity_summary(SENSITIVITY, 119_200_000) + [""]
                     + quality_markdown(q, "autocompress", b) + sensitivity_markdown(SENSITIVITY, 119_200_000)) + "\n"
    assert text == "\n".join(gap_summary(copy.deepcopy(q)) + sensitivity_summary(SENSITIVITY, 119_200_000) + [""]
                             + quality_markdown(copy.deepcopy(q), "autocompress", copy.deepcopy(b))
                             + sensitivity_markdown(SENSITIVITY, 119_200_000)) + "\n"
    check_golden(GOLDEN / "build-quality.md", text)
    assert "| prose-ood | **no** | SPDX license texts" in text and "| code | yes | standard-library" in text
    for who in ("parent", "autocompress", "uniform baseline"):  # every set, every model
        assert text.count(f"| {who} |") == 4
    row = "| prose-ood (out of domain) | autocompress | 3,072 | 14.00 ± 0.56 | 0.7000 ± 0.0560 | 52.0% ± 1.2% |"
    assert row in text


def test_the_summary_states_only_a_gap_over_the_threshold():
    q = _quality()
    lines = gap_summary(q)
    assert len(lines) == 1 and "prose" in lines[0] and "2.75x" in lines[0] and "SPDX license texts" in lines[0]
    for g in q["domain_gaps"]:
        g["flagged"] = False
    assert gap_summary(q) == []


def test_a_report_written_before_sets_and_ses_still_renders():
    q = {"parent": {"code": {"ppl": 6.0}}, "student": {"code": {"ppl": 7.5, "kl": 0.2, "top1": 0.8}}}
    text = "\n".join(quality_markdown(q, "model"))
    assert "| code | parent | - | 6.00 | - | - |" in text and "| code | model | - | 7.50 | 0.2000 | 80.0% |" in text
    assert "held-out set" not in text and "standard error" not in text and gap_summary(q) == []


def test_missing_out_of_domain_set_is_said():
    q = _quality()
    q["sets_missing"] = ["prose-ood: the spdx package is not installed (scripts/install-full.sh installs it)"]
    text = "\n".join(quality_markdown(q, "autocompress"))
    assert "| prose-ood | - | not measured: the spdx package is not installed" in text


def test_sensitivity_without_a_measured_error_says_so():
    s = {**SENSITIVITY, "profile": "gpu-vllm-default", "profile_source": "default", "bounds": [],
         "unknown": ["npc.tpot"], "binding": ["npc.tpot"]}
    text = "\n".join(sensitivity_markdown(s, 1))
    assert "no measured error for npc.tpot" in text and "unknown" in text and sensitivity_summary(s, 1) == []


def test_verify_report_shows_the_same_quality_section():
    r = {"status": "predicted", "spec": "x.acspec", "model": "out", "hardware": "cpu", "engine": "vllm",
         "environment": "not measured: no engine", "profile": {"name": "p", "source": "default"},
         "bounds": [], "quality": _quality()}
    text = render_verify_markdown(r)
    body = "\n".join(quality_markdown(_quality(), "model")[1:])
    assert "### Quality retained (measured at build time on held-out data)" in text and body in text
