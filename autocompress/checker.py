"""The check itself: a spec file to its feasibility report, the stages in order, no cache.

parse (``lang``) -> resolve the parent (``parents``; both once: ``contract``) -> derive settings
and the search space (``plan``) -> assess feasibility over the swept variants (``feasibility``) ->
the report dict (``report.feasibility``). ``check.run_check`` caches the answer.
"""

from __future__ import annotations

import os

from autocompress import cache
from autocompress.contract import Contract, load_contract, parse_contract
from autocompress.cost.profile import ProfileError
from autocompress.diagnostics import Diagnostic, SpecError
from autocompress.families.registry import family_warning
from autocompress.feasibility.objective import load_importance, prior_importance
from autocompress.feasibility.variants import assess_variants
from autocompress.parents.confine import Confinement
from autocompress.plan.derive import derive
from autocompress.report.feasibility import build_report


def compute(path: str, importance_file: str | None, source: str | None = None,
            confine: str | None = None) -> tuple[dict, list[str], list[str]]:
    """(report, rendered warnings, files the answer depends on) of the spec at ``path``, with the
    importance file ``importance_file`` (None: the prior). ``source``: the spec's text when it is
    not the file at ``path`` (an older revision of it, read from git by ``acc diff --base``);
    relative paths in it still resolve from ``path``'s folder. ``confine``: the folder every path
    the spec names must resolve inside (``acc check --confine``)."""
    box = Confinement(confine) if confine is not None else None
    contract = load_contract(path, box) if source is None else parse_contract(source, path, box)
    return compute_contract(contract, importance_file)


def compute_contract(contract: Contract, importance_file: str | None) -> tuple[dict, list[str], list[str]]:
    """``compute`` of a contract already parsed and resolved (``contract.load_contract``)."""
    spec, path, source, base, parent = contract.spec, contract.path, contract.source, contract.base, contract.parent
    warns = list(contract.warnings) + [w for w in (family_warning(spec, parent.architecture.family),) if w is not None]
    try:
        derived = derive(spec, parent.architecture, base)
    except ProfileError as err:  # the spec's profile (missing, unreadable, invalid, for other hardware): exit 2
        raise SpecError([Diagnostic(spec.target.span, str(err), code="profile")], path, source) from None
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
