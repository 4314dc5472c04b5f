"""The check itself: a spec file to its feasibility report, the stages in order, no cache.

parse (``lang``) -> resolve the parent (``parents``) -> derive settings and the search space
(``plan``) -> assess feasibility over the swept variants (``feasibility``) -> the report dict
(``report.feasibility``). ``check.run_check`` caches the answer.
"""

from __future__ import annotations

import os

from autocompress import cache
from autocompress.families.registry import family_warning
from autocompress.feasibility.objective import load_importance, prior_importance
from autocompress.feasibility.variants import assess_variants
from autocompress.lang.api import load_spec_with_warnings, parse_spec_with_warnings
from autocompress.parents.resolve import resolve_parent
from autocompress.plan.derive import derive
from autocompress.report.feasibility import build_report


def compute(path: str, importance_file: str | None, source: str | None = None) -> tuple[dict, list[str], list[str]]:
    """(report, rendered warnings, files the answer depends on) of the spec at ``path``, with the
    importance file ``importance_file`` (None: the prior). ``source``: the spec's text when it is
    not the file at ``path`` (an older revision of it, read from git by ``acc diff --base``);
    relative paths in it still resolve from ``path``'s folder."""
    if source is None:
        spec, warns = load_spec_with_warnings(path)
        with open(path, encoding="utf-8", errors="replace") as fh:
            source = fh.read()
    else:
        spec, warns = parse_spec_with_warnings(source, path)
    base = os.path.dirname(os.path.abspath(path))
    parent = resolve_parent(spec.parent, base, spec_path=path, source=source)
    warns = warns + [w for w in (family_warning(spec, parent.architecture.family),) if w is not None]
    derived = derive(spec, parent.architecture, base)
    deps = [path, str(parent.path)]
    if derived.profile.path:
        deps.append(derived.profile.path)
    importance = prior_importance(parent.architecture)
    imp_info = None
    if importance_file:
        importance = load_importance(importance_file, parent.architecture)
        deps.append(importance_file)
        imp_info = {"file": os.path.basename(importance_file), "sha256": cache.sha256_file(importance_file)}
    swept = assess_variants(spec, parent.architecture, derived.profile, derived.device, derived.space, importance,
                            derived.limits)
    report = build_report(spec, path, source, parent, derived, swept.feasibility, imp_info, swept.rows)
    rendered = [w.render(path, source) for w in warns]
    return report, rendered, deps
