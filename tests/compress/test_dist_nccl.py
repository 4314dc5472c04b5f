"""The NCCL path (GPUs), one rank: the same code as gloo, untested until a machine with a GPU runs this.

With CUDA present ``build.dist`` initialises ``cpu:gloo,cuda:nccl`` and the distillation runs on
``cuda:LOCAL_RANK`` (the shared stages stay on the CPU, over gloo). One rank, because NCCL needs one
GPU per rank; the 2-rank test stays on gloo (test_dist_gloo.py). On a GPU machine:

    python -m pytest tests/compress/test_dist_nccl.py -q
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import _distworker as worker  # noqa: E402

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL needs a GPU per rank; none here")]


def test_one_nccl_rank_follows_the_cpu_recipe(tmp_path):
    from autocompress.train.distill import distill
    from autocompress.data.teacher import cache_teacher

    env = {**os.environ, "PYTHONPATH": str(Path(worker.__file__).parent)}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                        worker.__file__, str(tmp_path), "fresh", str(tmp_path / "ckpt")], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    res = json.loads((tmp_path / "result-fresh-ws1.json").read_text())
    assert res["backend"] == "cpu:gloo,cuda:nccl" and res["device"] == "cuda:0"
    teacher, student, tokens, cfg = worker.setup()
    cache = cache_teacher(teacher, tokens, "tiny-0", k=16, batch=2, chunk_rows=5, cache_dir=tmp_path / "single")
    assert res["teacher"] == worker.folder_hash(cache.folder)  # the shared stages ran on the CPU
    ref = distill(student, cache, tokens, cfg).losses
    assert max(abs(a - b) / b for a, b in zip(res["full"]["losses"], ref)) < 1e-4  # GPU fp32 kernels vs CPU
