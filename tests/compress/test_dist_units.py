"""build.dist and the --nproc launcher without a process group: work split, Slurm mapping,
exit codes, and the single-process identities the stages rely on."""

from __future__ import annotations

import argparse

import pytest

from autocompress.cli.launch import exit_code, worker_argv
from autocompress.build import dist


@pytest.mark.parametrize("n,ws", [(0, 2), (1, 2), (7, 2), (8, 3), (5, 8), (16, 1)])
def test_share_covers_every_position_once_in_order(n, ws):
    parts = [dist.share(n, r, ws) for r in range(ws)]
    assert [i for p in parts for i in p] == list(range(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert all(len(a) >= len(b) for a, b in zip(parts, parts[1:]))  # the first ranks take the extra ones


def test_without_a_launcher_everything_is_the_single_process_path():
    import torch

    assert not dist.active() and dist.rank() == 0 and dist.world() == 1 and dist.is_main()
    t = torch.arange(6.0).view(3, 2)
    assert dist.gather_rows(t, 3) is t and dist.all_sum(t) is t
    assert dist.map_shared(lambda x: x + 1, [1, 2]) == [2, 3]
    assert dist.from_main(True) is True and dist.from_main(40) == 40
    assert dist.main_first(lambda: 7) == 7 and dist.main_only(lambda: 8) == 8
    assert list(dist.share(5)) == [0, 1, 2, 3, 4]


SRUN = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "123456",
        "SLURM_NNODES": "2", "MASTER_ADDR": "node-a"}


def test_slurm_tasks_map_to_torch_variables():
    assert dist.slurm_env(SRUN) == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_PORT": "23456"}
    assert dist.launched(SRUN)
    single_node = {k: v for k, v in SRUN.items() if k != "MASTER_ADDR"} | {"SLURM_NNODES": "1"}
    assert dist.slurm_env(single_node)["MASTER_ADDR"] == "127.0.0.1"
    with pytest.raises(RuntimeError, match="export MASTER_ADDR"):
        dist.slurm_env({k: v for k, v in SRUN.items() if k != "MASTER_ADDR"})


@pytest.mark.parametrize("env", [{}, {k: v for k, v in SRUN.items() if k != "SLURM_STEP_ID"},  # the batch script
                                 SRUN | {"SLURM_STEP_ID": "4294967294"}, SRUN | {"SLURM_NTASKS": "1"},
                                 SRUN | {"WORLD_SIZE": "4"}])
def test_no_mapping_outside_a_multi_task_srun_step_or_under_torchrun(env):
    assert dist.slurm_env(env) == {}
    assert dist.launched(env) == ("WORLD_SIZE" in env)


def test_launcher_exit_code_is_the_documented_one_or_the_first_failure():
    assert exit_code({0: 2, 1: 2}, 0) == 2  # an invalid input every rank saw
    assert exit_code({0: 5, 1: 137}, 1) == 137  # rank 1 was killed; rank 0 reported the lost peer
    assert exit_code({0: -15, 1: 137}, 1) == 137
    assert exit_code({0: -9}, 0) == 137  # a signal, as a shell reports it
    assert exit_code({1: 4, 0: -15}, 0) == 4


def test_workers_run_the_same_build_without_verification():
    args = argparse.Namespace(spec="s.acspec", work="w", baseline="uniform", quiet=True, force=False)
    assert worker_argv(args) == ["build", "s.acspec", "--no-verify", "--work", "w", "--baseline", "uniform", "--quiet"]


def test_nproc_is_checked_and_refused_under_a_launcher(tmp_path, monkeypatch, capsys):
    from autocompress.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["build", "x.acspec", "--nproc", "0"])
    assert e.value.code == 2 and "allowed: a whole number >= 1, got 0" in capsys.readouterr().err
    pytest.importorskip("torch")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["build", str(tmp_path / "x.acspec"), "--nproc", "2"]) == 2
    assert "under torchrun or srun leave it out" in capsys.readouterr().err
