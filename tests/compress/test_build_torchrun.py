"""acc build of a tiny model under torchrun (2 gloo ranks) against the same build in one process.

Stated tolerance (docs/scale-out.md): everything before distillation is bit-identical at the same
threads per process (importance, permuted weights, teacher outputs, the chosen architecture); the distillation loss curve is within
1e-4 relative and the exported weights within 1e-5 absolute (measured: 8.8e-6 and 1.6e-7; the
losses are ~5e-3 nats, where float32 rounding of log p - log q is ~1e-5 relative). Killing one rank
mid-distillation and rerunning resumes from the sharded checkpoint, and the result has the
uninterrupted 2-rank build's weights hash; so does a torchrun restart (``--max-restarts``) of the
killed attempt, which must not meet the dead attempt's rendezvous keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from _buildkit import SPEC, make_project, weights_hash  # noqa: E402

pytestmark = pytest.mark.integration
# a tighter bound than the other build tests (more is pruned: losses ~5e-3, not ~5e-4) and 4 rows
# per step, 2 per rank
DIST_SPEC = SPEC.replace("tpot <= 0.55 ms      # the parent: 0.572 ms predicted", "tpot <= 0.53 ms").replace(
    "batch 2 }", "batch 4 }")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def _build(root: Path, cmd: list[str], *extra: str, rc: int = 0, **env) -> str:
    # one thread in every process: bit-identity holds at equal threads per process (a float32 sum
    # split over 2 threads rounds differently: docs/scale-out.md)
    env = {**os.environ, "ACC_CACHE_DIR": str(root / "cache"), "OMP_NUM_THREADS": "1", **env}
    p = subprocess.run([*cmd, "build", "spec.acspec", "--quiet", "--no-verify", *extra], cwd=root, env=env,
                       capture_output=True, text=True, timeout=900)
    assert (p.returncode == 0) == (rc == 0), (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    return p.stdout + p.stderr


def _project(root: Path) -> Path:
    make_project(root)
    (root / "spec.acspec").write_text(DIST_SPEC)
    return root


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    one = _project(tmp_path_factory.mktemp("one"))
    _build(one, [sys.executable, "-m", "autocompress.cli"])
    two = _project(tmp_path_factory.mktemp("two"))
    log = _build(two, [*TORCHRUN, "-m", "autocompress.cli"])
    return one, two, log


def _stage(root: Path, pattern: str) -> Path:
    (found,) = (root / "out" / ".tiny.acc").glob(pattern)
    return found


def test_ranks_split_the_work_and_rank_0_alone_writes(builds):
    one, two, log = builds
    assert log.count("[export]") == 1 and log.count("built ") == 1  # one export, one report
    assert "2 processes (FSDP2)" in log
    work = two / "out" / ".tiny.acc"
    assert not list(work.glob(".*rank*")) and not list(work.glob("*.partial")) and not list(work.glob(".*tmp*"))
    for name in ("model.safetensors", "autocompress-report.md", "autocompress-report.json", "autocompress-manifest.json"):
        assert (two / "out" / "tiny" / name).is_file()
    for pattern in ("importance-*/importance.json", "importance-*/permuted.safetensors",
                    "teacher-*/*/chunk-00000.safetensors"):
        assert _stage(one, pattern).read_bytes() == _stage(two, pattern).read_bytes(), pattern
    a, b = (json.loads(_stage(r, "search-*/architecture.json").read_text()) for r in (one, two))
    assert a["architecture"] == b["architecture"] and a["how"] == b["how"]
    assert a["refine"]["candidates"] == b["refine"]["candidates"]


def test_loss_curve_and_weights_match_one_process_within_the_stated_tolerance(builds):
    import torch
    from safetensors.torch import load_file

    one, two, _ = builds
    la, lb = (json.loads(_stage(r, "distill-*/distill.json").read_text())["losses"] for r in (one, two))
    assert len(la) == len(lb) == 6
    assert max(abs(x - y) / y for x, y in zip(lb, la)) < 1e-4
    wa, wb = (load_file(str(r / "out" / "tiny" / "model.safetensors")) for r in (one, two))
    assert sorted(wa) == sorted(wb)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-5
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)  # the sharded recipe really ran


def test_killing_one_rank_mid_distillation_then_rerunning_resumes_to_the_same_weights(builds, tmp_path):
    _, two, _ = builds
    root = _project(tmp_path)
    log = _build(root, [*TORCHRUN, "-m", "autocompress.cli"], rc=1, ACC_CRASH_AT="distill:3", ACC_CRASH_RANK="1")
    assert "exitcode  : 137" in log  # rank 1 died like a SIGKILL after step 3
    assert not (root / "out" / "tiny").exists()
    assert list(_stage(root, "distill-*.partial").glob("dcp-step-*/state.json"))
    log = _build(root, [sys.executable, "-m", "autocompress.cli"], "--nproc", "2")  # the launcher, this time
    assert "resuming from the last checkpoint" in log
    assert weights_hash(root / "out" / "tiny") == weights_hash(two / "out" / "tiny")


def test_a_torchrun_restart_after_a_killed_rank_finishes_the_build(builds, tmp_path):
    _, two, _ = builds
    root = _project(tmp_path)
    log = _build(root, [*TORCHRUN, "--max-restarts=1", "-m", "autocompress.cli"], ACC_CRASH_AT="distill:3",
                 ACC_CRASH_RANK="1")
    assert "resuming from the last checkpoint" in log
    assert weights_hash(root / "out" / "tiny") == weights_hash(two / "out" / "tiny")
