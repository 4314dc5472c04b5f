"""A fast sample of the fault sweep (``python -m bench.faults``, ``bench.lib.faults``) on the tiny
build: killed with SIGKILL at two randomized points of a fixed seed, a build reruns to the weights
of a solo build; interrupted with SIGINT at a randomly drawn stage (seeded), it exits 130 with one
line and no traceback, leaves nothing half-written and resumes to the solo weights; out of disk
space at another drawn stage (a real full tmpfs where mounting is permitted, else the simulated
write failure), it exits 7 with one line naming a folder, leaves a previous output intact and
resumes to the solo weights once space is free; two specs built at once on one cache and one
``--work`` folder both end with their solo builds' weights; the same spec started twice at once,
the second refuses with exit 2 naming the first's pid and the first ends with the solo weights.

No outcome depends on timing: a fault that lands after the build exited is a no-op trial (its
rerun is still compared), a fault anywhere in a stage must leave the same guarantees, and the
build holding the output's lock is paused until the second has answered. Independent builds run
side by side, one thread each: the two solo builds, the two concurrency cases, the two kill
trials, the SIGINT and the full-disk rows."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from bench.lib.faults import NAMES, OUT, Solo, can_mount, disk_full_trial, footprint, interrupt_trial, judge, \
    kill_trial, make_template, points, project, run, same_spec, two_specs, weights_hash  # noqa: E402

pytestmark = pytest.mark.integration

SEED = 11  # its first two kill points: distill and export
# the stage each draws, points(1, seed)[0]: the parent's evaluation (its HumanEval pass, then the
# stage's commit); distillation (checkpoints and the student, written by safetensors' Rust code)
SIGINT_SEED, ENOSPC_SEED = 13, 9


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The template project, the solo weights hash per spec, the solo ``spec.acspec`` build's stage
    windows, the two concurrency rows (the solo builds side by side, then the two cases) and the
    solo ``spec.acspec`` project (its output is the full-disk row's previous output)."""
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
    return template, refs, Solo.of(solos[0][1]), judge(two, refs), judge(same, refs), root / "solo-spec.acspec"


@pytest.fixture(scope="module")
def faults(builds, tmp_path_factory):
    """The SIGINT row and the full-disk row, side by side."""
    template, refs, solo, _, _, solo_project = builds
    root = tmp_path_factory.mktemp("faults-rows")
    previous = solo_project / OUT
    size = 2 * footprint(solo_project) + 2 * footprint(previous) + (64 << 20)
    with ThreadPoolExecutor(2) as pool:
        sigint = pool.submit(interrupt_trial, template, root / "sigint", points(1, SIGINT_SEED)[0], solo,
                             refs["spec.acspec"])
        enospc = pool.submit(disk_full_trial, template, root / "enospc", points(1, ENOSPC_SEED)[0].stage, solo,
                             refs["spec.acspec"], previous, size, not can_mount())
        return sigint.result(), enospc.result()


def test_the_solo_log_ends_every_stage(builds):
    """Every kill point is anchored at a stage's end in the log: a stage whose end line changed
    would turn its trials into no-ops."""
    spans = builds[2].spans
    assert list(spans) == NAMES[:-1] and all(end > start for start, end in spans.values()), spans


def test_killed_at_random_points_the_rerun_has_the_solo_weights(builds, tmp_path):
    template, refs, solo = builds[:3]
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda ip: kill_trial(template, tmp_path / f"trial-{ip[0]}", ip[1], solo,
                                                   refs["spec.acspec"]), enumerate(points(2, SEED))))
    for r in rows:
        assert r["exit_killed"] == (0 if r["no_op"] else -signal.SIGKILL), r
        assert r["output_left"] in (None, True), r  # no output, or a whole one
        assert r["rerun_exit"] == 0 and r["equal"] and not r["traceback"], r


def test_interrupted_in_a_random_stage_it_exits_130_leaves_nothing_half_written_and_resumes(faults):
    r = faults[0]
    # its point, in the parent's evaluation, is seconds before the build's end: a build that ran to
    # the end anyway ignored the signal (as one started with SIGINT ignored would), not a no-op
    assert not r["no_op"], r
    assert r["exit"] == 130 and r["message"] and not r["traceback"], r
    assert r["temporaries"] == [] and r["damaged"] == [] and r["output"] in ("none", "new", "new, no report yet"), r
    assert r["rerun_exit"] == 0 and r["equal"] and r["resumed"] and not r["rerun_traceback"], r
    assert r["ok"], r


def test_a_full_disk_in_a_random_stage_exits_7_naming_a_folder_keeps_the_previous_output_and_resumes(faults):
    r = faults[1]
    if not r["no_op"]:
        assert r["exit"] == 7 and r["lines"] == 1 and r["folder_inside"] and not r["traceback"], r
        assert r["temporaries"] == [] and r["damaged"] == [], r
        assert r["output"] in ("previous, intact", "new", "new, no report yet"), r
    assert r["rerun_exit"] == 0 and r["equal"] and r["resumed"] and not r["rerun_traceback"], r
    assert r["ok"], r


def test_two_specs_on_one_cache_and_work_folder_at_once_have_their_solo_weights(builds):
    row = builds[3]
    assert row["exits"] == [0, 0] and row["equal"] and not row["traceback"], row


def test_the_same_spec_twice_at_once_the_second_refuses_naming_the_first(builds):
    row = builds[4]
    assert row["refused"] and row["exits"] == [0, 2], row
    assert row["equal"] and not row["traceback"], row
