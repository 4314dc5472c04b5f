"""The size a contract allows at its binding bound moved by the profile's known error."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from autocompress.contract import load_contract
from autocompress.cost.profile import ErrorStat
from autocompress.feasibility.sensitivity import bound_sensitivity, with_limit
from autocompress.plan.budget import Budget
from autocompress.plan.derive import derive

EXAMPLES = Path(os.environ["ACC_TEST_EXAMPLES"])  # tests/conftest.py


def _host():
    c = load_contract(str(EXAMPLES / "cpu-vllm.acspec"))
    return c, derive(c.spec, c.parent.architecture, c.base)


def test_with_limit_moves_one_bound_only():
    c, _ = _host()
    spec = c.spec
    def limits(s):
        return {b.name: b.value for b in Budget.of(s)}

    base = limits(spec)
    assert limits(with_limit(spec, Budget.of(spec)["memory"], 1e9)) == {**base, "memory": 1e9}
    assert limits(with_limit(spec, Budget.of(spec)["chat.e2e"], 30.0)) == {**base, "chat.e2e": 30.0}


def test_the_check_finds_more_parameters_under_a_looser_memory_bound():
    c, d = _host()
    d = replace(d, profile=replace(d.profile, known_error=(("memory", ErrorStat(0.02, 0.04, 13)),)))
    s = bound_sensitivity(c.spec, c.parent.architecture, d)
    assert s.binding == ("memory",) and s.unknown == ()
    (b,) = s.bounds
    assert (b.bound, b.median, b.p95, b.samples) == ("memory", 0.02, 0.04, 13)
    assert [sh.stat for sh in b.shifts] == ["p95", "median", "none", "median", "p95"]
    assert [sh.error for sh in b.shifts] == [-0.04, -0.02, 0.0, 0.02, 0.04]
    assert [sh.limit for sh in b.shifts] == sorted(sh.limit for sh in b.shifts)
    params = [sh.params for sh in b.shifts]
    assert None not in params and params == sorted(params) and params[0] < params[-1]  # the spread is real


def test_a_profile_without_measured_error_shifts_nothing():
    c, d = _host()
    d = replace(d, profile=replace(d.profile, known_error=None))
    s = bound_sensitivity(c.spec, c.parent.architecture, d)
    assert s.bounds == () and s.unknown == s.binding == ("memory",)
