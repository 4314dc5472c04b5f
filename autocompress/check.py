"""``acc check``: the feasibility report of a spec file (no weights), cached.

The stages themselves are ``checker``'s (parse -> resolve parent -> derive settings -> assess
feasibility -> report). The report is a plain JSON-able dict (schema
``specs/feasibility-report.schema.json``) that every renderer (terminal, Markdown, JSON) reads, so
a cached report renders exactly like a fresh one.

The cache key is the spec's bytes, the source of every module the check runs
(``cache.code_digest``) and the importance file when one is given; the entry records the files the
answer depends on (spec, parent config / GGUF, profile, importance file), so a hit is served only
while they are unchanged. A damaged entry (truncated, a flipped byte, unreadable: an entry
carries its checksum, ``cache.JsonCache``) is never loaded: the check is recomputed, the entry
rewritten, and the answer carries one warning line naming the entry file. This module imports
only the cache: a hit is served without importing the stages (lark, jsonschema, numpy, the cost
model and the LP: 0.4 s of CPU against about 0.15 s for the whole cached answer), which
``run_check`` imports on a miss.

The answer depends on the spec, the parent and the profile only: state left by an earlier
``acc build`` is read only when asked (``importance=``, the CLI's ``--importance FILE``), and the
report then names that file and its sha256, so two reviewers reading reports of one spec read the
same thing.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autocompress import cache
from autocompress.diagnostics import EXIT_INFEASIBLE, EXIT_NOT_FOUND, EXIT_OK

if TYPE_CHECKING:  # the contract module imports the parser, which a cached check never loads
    from autocompress.contract import Contract

VERDICT_EXIT = {"feasible": EXIT_OK, "infeasible": EXIT_INFEASIBLE, "not_found": EXIT_NOT_FOUND}


@dataclass(frozen=True)
class CheckResult:
    """``warnings``: the lines ``acc check`` prints on stderr: the spec's rendered warnings, after
    a line about a damaged cache entry when one was recomputed (``_cached``), which ``damaged``
    also holds alone (``acc build`` logs it without the spec's warnings)."""

    report: dict
    warnings: tuple[str, ...]
    exit_code: int
    cached: bool
    damaged: tuple[str, ...] = ()


def check_source(source: str | None, path: str, confine: str | None = None,
                 importance: str | None = None) -> CheckResult:
    """The feasibility report of spec text ``source`` standing at ``path`` (None: the file's own;
    not cached: the text is not the file's, so the file-keyed cache cannot vouch for it).
    ``confine``: a folder every path the spec names must resolve inside (``parents.confine``)."""
    from autocompress.checker import compute

    report, warnings, _ = compute(path, importance and os.path.abspath(importance), source, confine)
    return CheckResult(report, tuple(warnings), VERDICT_EXIT[report["verdict"]], False)


def _machine_profiles() -> str:
    """The machine profiles ``acc profile`` wrote (names and mtimes): a spec without a ``profile``
    line uses this machine's when it exists (``cost.profile.builtin_profile_path``), so writing one
    must change the answer's key."""
    folder = cache.cache_root() / "profiles"
    try:
        return ";".join(f"{e.name}:{e.stat().st_mtime_ns}" for e in sorted(os.scandir(folder), key=lambda e: e.name))
    except OSError:
        return ""


def run_check(path: str, use_cache: bool = True, importance: str | None = None,
              confine: str | None = None) -> CheckResult:
    """The feasibility report of the spec at ``path`` (cached). ``importance``: an importance file
    (``acc build``'s importance stage writes one) to use instead of the prior. ``confine``: a
    folder every path the spec names must resolve inside; such a check neither reads nor writes
    the cache (its key would read the spec before the spec's path is checked, and an entry's
    dependencies are files, not the symlinks that led to them)."""
    if confine is not None:
        return check_source(None, path, confine, importance)
    with open(path, "rb") as fh:
        data = fh.read()
    return _cached(path, data, use_cache, importance, None)


def check_contract(contract: Contract, use_cache: bool = True, importance: str | None = None) -> CheckResult:
    """``run_check`` of a contract a command already parsed and resolved (``contract.load_contract``):
    the same cache, keyed by the text the contract was parsed from; a miss computes the report from
    the contract, with no second parse or resolution."""
    return _cached(contract.path, contract.source.encode("utf-8"), use_cache, importance, contract)


def _cached(path: str, data: bytes, use_cache: bool, importance: str | None, contract) -> CheckResult:
    if importance is not None:
        importance = os.path.abspath(importance)
        if not os.path.isfile(importance):
            raise FileNotFoundError(2, "no such file", importance)
    key = cache.key("check", os.path.abspath(path), data, importance or "", cache.code_digest("autocompress.check"),
                    _machine_profiles())
    store = cache.JsonCache(cache.cache_root() / "check")
    damaged = ()
    if use_cache:
        hit, why = store.lookup(key)
        if hit is not None:
            return CheckResult(hit["report"], tuple(hit["warnings"]), hit["exit_code"], True)
        if why is not None:
            damaged = (f"warning: cached check at {store.path(key)} is corrupt ({why}); recomputing",)
    # A cold check builds ~100k container objects that mostly live to its end (modules, cvxpy's
    # problems, cost tables): the cyclic collector ran ~160 times for ~0.1 s (6% of the check)
    # to free a few MB. It is paused meanwhile, and what the check built is then frozen (moved
    # out of later collections), else the first collection after it walks all of it at once.
    paused = gc.isenabled()
    gc.disable()
    try:
        from autocompress.checker import compute, compute_contract  # a hit above needs none of the stages

        report, warnings, deps = (compute(path, importance) if contract is None
                                  else compute_contract(contract, importance))
    finally:
        if paused:
            gc.freeze()
            gc.enable()
    code = VERDICT_EXIT[report["verdict"]]
    store.put(key, {"report": report, "warnings": warnings, "exit_code": code}, deps)
    return CheckResult(report, (*damaged, *warnings), code, False, damaged)
