"""One rank of the 2-rank gloo tests (``torchrun --nproc-per-node N _distworker.py OUT MODE CKPT``).

Runs every data-parallel piece of ``acc build`` on tiny models under ``build.dist`` and writes
what the tests compare with one process: ``OUT/result.json`` and ``OUT/student*.safetensors``
(rank 0). MODE ``fresh``: collectives, importance, removal KL, teacher top-k cache, a full
distillation, and one stopped after 3 steps (checkpoints in CKPT); ``resume``: that distillation
resumed from CKPT (at whatever world size this launch has).

Its kit ``_distillkit`` sits beside it: run as a script (by torchrun), its folder is first on
``sys.path``; imported by the tests, from tests/compress, on the path by pyproject's pytest
``pythonpath``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

from autocompress.build import dist

STEPS, STOP = 6, 3


def setup():
    """The same tiny teacher, student, tokens and config in every process (the tests import this)."""
    import copy

    import _distillkit as kit

    from autocompress.train.distill import DistillConfig

    teacher = kit.tiny_llama(0)
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        for p in student.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    tokens = kit.random_tokens(10, 16, seed=3)
    cfg = DistillConfig(steps=STEPS, batch=4, lr=3e-3, seed=0, ckpt_every=1, keep_ckpts=2)
    return teacher, student, tokens, cfg


def hidden_setup():
    """A live teacher (its hidden states are matched, so it runs with the student), the student, the pairs."""
    import _distillkit as kit

    from autocompress.train.distill import HiddenPairs

    live = kit.tiny_llama(0)
    _, student, _, _ = setup()
    return live, student, HiddenPairs(live, [(student.model.layers[i], live.model.layers[i]) for i in range(2)])


def importance_inputs():
    import _tinykit as tk

    model = tk.random_llama(3)
    return tk.canonical_of(model), tk.config_of(model), tk.batches(5, batch=2, seq=16)


def stats_hash(stats) -> str:
    h = hashlib.sha256()
    for name in ("ffn_channels", "head_scores", "kv_groups"):
        for t in getattr(stats, name):
            h.update(b"-" if t is None else t.numpy().tobytes())
    for name in ("hidden_channels", "layer_influence", "attention_influence", "ffn_influence", "attention_removal",
                 "ffn_removal"):
        h.update(getattr(stats, name).numpy().tobytes())
    h.update(str(stats.tokens).encode())
    return h.hexdigest()


def folder_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.glob("chunk-*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()


def main(out: Path, mode: str, ckpt: Path) -> None:
    from safetensors.torch import save_file

    from autocompress.train.distill_dist import distill_sharded
    from autocompress.prune.importance import ablation_influence, collect_importance
    from autocompress.data.teacher import cache_teacher

    dist.init()
    res: dict = {"world": dist.world(), "backend": dist.backend(), "device": str(dist.device())}
    teacher, student, tokens, cfg = setup()
    cache = cache_teacher(teacher, tokens, "tiny-0", k=16, batch=2, chunk_rows=5, cache_dir=out / f"teacher-{mode}")
    res["teacher"] = folder_hash(cache.folder)
    if mode == "fresh":
        res["share"] = [list(dist.share(7, r)) for r in range(dist.world())]
        res["gathered"] = dist.gather_rows(torch.arange(7.0)[list(dist.share(7))].unsqueeze(1) * 10, 7).flatten().tolist()
        res["mapped"] = dist.map_shared(lambda x: x * x, [1.0, 2.0, 3.0])
        params, icfg, batches = importance_inputs()
        stats = collect_importance(params, icfg, batches)
        a, f = ablation_influence(params, icfg, batches[:2])
        res["importance"] = stats_hash(replace(stats, attention_removal=a, ffn_removal=f))
        r, full = distill_sharded(student, cache, tokens, cfg)
        res["full"] = {"losses": r.losses}
        if dist.is_main():
            save_file(full, str(out / "student-full.safetensors"))
        _, student2, _, _ = setup()
        distill_sharded(student2, cache, tokens, cfg, ckpt_dir=ckpt, stop_after=STOP)
        live, student3, hidden = hidden_setup()
        r, _ = distill_sharded(student3, cache, tokens, replace(cfg, steps=STOP), hidden=hidden)
        from torch.distributed.tensor import DTensor

        res["hidden"] = {"losses": r.losses, "teacher_sharded": all(isinstance(p, DTensor) for p in live.parameters())}
    else:
        r, full = distill_sharded(student, cache, tokens, cfg, ckpt_dir=ckpt)
        res["resumed"] = {"losses": r.losses, "resumed_from": r.resumed_from}
        if dist.is_main():
            save_file(full, str(out / f"student-resumed-ws{dist.world()}.safetensors"))
    if dist.is_main():
        (out / f"result-{mode}-ws{dist.world()}.json").write_text(json.dumps(res, indent=1))
    dist.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
    if os.environ.get("DISTWORKER_THREADS"):  # the native threads left after shutdown (a study of how a rank ends)
        names = sorted(Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task"))
        Path(f"{os.environ['DISTWORKER_THREADS']}-rank{os.environ['RANK']}.json").write_text(json.dumps(names))
    if os.environ.get("DISTWORKER_EXIT") != "finalize":  # that study's other arm: a plain return
        dist.leave(0)  # as acc build does under a launcher
