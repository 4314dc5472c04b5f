"""A fast sample of the fault sweep (``python -m bench.faults``, ``bench.lib.faults``) on the tiny
build: killed with SIGKILL at two randomized points of a fixed seed, a build reruns to the weights
of a solo build; two specs built at once on one cache and one ``--work`` folder both end with their
solo builds' weights; the same spec started twice at once, the second refuses with exit 2 naming
the first's pid and the first ends with the solo weights.

No outcome depends on timing: a kill that lands after the build exited is a no-op trial (its rerun
is still compared), and the build holding the output's lock is paused until the second has
answered. Independent builds run side by side, one thread each: the two solo builds, the two
concurrency cases, the two trials."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from bench.lib.faults import NAMES, Solo, judge, kill_trial, make_template, points, project, run, same_spec, \
    two_specs, weights_hash  # noqa: E402

pytestmark = pytest.mark.integration

SEED = 11  # its first two points: distill and export


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The template project, the solo weights hash per spec, the solo ``spec.acspec`` build's stage
    windows, and the two concurrency rows (the solo builds side by side, then the two cases)."""
    root = tmp_path_factory.mktemp("faults")
    template = make_template(root / "template")
    specs = ("spec.acspec", "spec-b.acspec")
    with ThreadPoolExecutor(2) as pool:
        solos = list(pool.map(lambda s: run(project(template, root / f"solo-{s}"), s), specs))
        for rc, b in solos:
            assert rc == 0, b.text()[-3000:]
        two, same = pool.submit(two_specs, template, root / "two"), pool.submit(same_spec, template, root / "same")
        two, same = two.result(), same.result()
    refs = {s: weights_hash(b.out()) for s, (_, b) in zip(specs, solos)}
    return template, refs, Solo.of(solos[0][1]), judge(two, refs), judge(same, refs)


def test_the_solo_log_ends_every_stage(builds):
    """Every kill point is anchored at a stage's end in the log: a stage whose end line changed
    would turn its trials into no-ops."""
    spans = builds[2].spans
    assert list(spans) == NAMES[:-1] and all(end > start for start, end in spans.values()), spans


def test_killed_at_random_points_the_rerun_has_the_solo_weights(builds, tmp_path):
    template, refs, solo, _, _ = builds
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda ip: kill_trial(template, tmp_path / f"trial-{ip[0]}", ip[1], solo,
                                                   refs["spec.acspec"]), enumerate(points(2, SEED))))
    for r in rows:
        assert r["exit_killed"] == (0 if r["no_op"] else -signal.SIGKILL), r
        assert r["output_left"] in (None, True), r  # no output, or a whole one
        assert r["rerun_exit"] == 0 and r["equal"] and not r["traceback"], r


def test_two_specs_on_one_cache_and_work_folder_at_once_have_their_solo_weights(builds):
    row = builds[3]
    assert row["exits"] == [0, 0] and row["equal"] and not row["traceback"], row


def test_the_same_spec_twice_at_once_the_second_refuses_naming_the_first(builds):
    row = builds[4]
    assert row["refused"] and row["exits"] == [0, 2], row
    assert row["equal"] and not row["traceback"], row
