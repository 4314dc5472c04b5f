"""``acc check``: the chain of stages from a spec file to a feasibility report (no weights).

parse -> resolve parent -> derive settings -> assess feasibility -> report. The report is a
plain JSON-able dict (schema ``specs/feasibility-report.schema.json``) that every renderer
(terminal, Markdown, JSON) reads, so a cached report renders exactly like a fresh one.

The cache key is the spec's bytes plus the code version; the entry records the files the answer
depends on (spec, parent config / GGUF, profile, importance file), so a hit is served only while
they are unchanged, without importing lark or cvxpy.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

from autocompress import cache
from autocompress.diagnostics import EXIT_INFEASIBLE, EXIT_OK


@dataclass(frozen=True)
class CheckResult:
    report: dict
    warnings: tuple[str, ...]
    exit_code: int
    cached: bool


def _compute(path: str) -> tuple[dict, list[str], list[str]]:
    from autocompress.derive import derive
    from autocompress.feasibility import assess
    from autocompress.feasibility.importance import load_importance, prior_importance
    from autocompress.parents import resolve_parent
    from autocompress.report.feasibility import build_report
    from autocompress.spec import load_spec_with_warnings

    spec, warns = load_spec_with_warnings(path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        source = fh.read()
    base = os.path.dirname(os.path.abspath(path))
    parent = resolve_parent(spec.parent, base, spec_path=path, source=source)
    derived = derive(spec, parent.architecture, base)
    deps = [path, str(parent.path)]
    if derived.profile.path:
        deps.append(derived.profile.path)
    importance = prior_importance(parent.architecture)
    if spec.output:  # an importance file left by a previous ``acc build`` of this spec sharpens the objective
        out = os.path.normpath(os.path.join(base, spec.output))
        imp_path = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.acc", "importance.json")
        if os.path.exists(imp_path):
            importance = load_importance(imp_path, parent.architecture)
            deps.append(imp_path)
    feas = assess(spec, parent.architecture, derived.profile, derived.device, derived.space, importance,
                  derived.limits)
    report = build_report(spec, path, source, parent, derived, feas)
    rendered = [w.render(path, source) for w in warns]
    return report, rendered, deps


def run_check(path: str, use_cache: bool = True) -> CheckResult:
    with open(path, "rb") as fh:
        data = fh.read()
    key = cache.key("check", os.path.abspath(path), data)
    store = cache.JsonCache(cache.cache_root() / "check")
    if use_cache:
        hit = store.get(key)
        if hit is not None:
            return CheckResult(hit["report"], tuple(hit["warnings"]), hit["exit_code"], True)
    # A cold check builds ~100k container objects that mostly live to its end (modules, cvxpy's
    # problems, cost tables): the cyclic collector ran ~160 times for ~0.1 s (6% of the check)
    # to free a few MB. It is paused meanwhile, and what the check built is then frozen (moved
    # out of later collections), else the first collection after it walks all of it at once.
    paused = gc.isenabled()
    gc.disable()
    try:
        report, warnings, deps = _compute(path)
    finally:
        if paused:
            gc.freeze()
            gc.enable()
    code = EXIT_OK if report["verdict"] == "feasible" else EXIT_INFEASIBLE
    store.put(key, {"report": report, "warnings": warnings, "exit_code": code}, deps)
    return CheckResult(report, tuple(warnings), code, False)
