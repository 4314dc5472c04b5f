"""The distillation recipe of ``distill.py`` over several processes: data parallel, FSDP2, sharded checkpoints.

Same learning-rate schedule (``lr_at``), data order (``batch_rows``), loss and clipping as the
single-process recipe, which stays as it is (torchtune keeps its single-device and distributed recipes
apart the same way). What differs:

* **sharding**: ``fully_shard`` on every decoder layer, then on the root (embeddings, final norm, LM
  head; tied weights stay together): each rank holds 1/world of the parameters, gradients and AdamW
  state, and gathers one layer's parameters at a time;
* **the batch**: micro-batch m of step s is the same ``batch`` rows as in one process; rank r takes its
  ``dist.share`` of them. Each rank sums the per-position KL of its rows and divides by the micro-batch's
  *global* position count, and FSDP sums the gradients instead of averaging them
  (``set_gradient_divide_factor(1.0)`` with ``set_force_sum_reduction_for_comms(True)``: gloo has no
  PREMUL_SUM), so the gradient is the single-process one with its sum taken in another order. The
  logged loss is the fp64 sum over the ranks (not rank 0's own);
* **checkpoints** (torch.distributed.checkpoint): every rank writes its shards as safetensors with their
  offsets (``HuggingFaceStorageWriter``; the default writer pickles its metadata), rank 0 adds
  ``state.json`` and renames the folder into place; a load reshards, so a run resumes at any world size.
  Nothing in the loop draws random numbers (dropout is 0), so there is no RNG state to carry;
* **a live teacher** (``HiddenPairs``, when its outputs are not precomputed) is sharded the same way.

On GPUs (NCCL) the student and the batches live on ``cuda:LOCAL_RANK``; the code path is the same and
is marked untested until it has run there (docs/scale-out.md).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch

from autocompress.build import dist
from autocompress.cache import atomic_write_json
from autocompress.data.teacher import TeacherCache, TopK, logits_of, topk_kl
from autocompress.progress import Progress
from autocompress.train.distill import (DistillConfig, DistillResult, HiddenPairs, batch_rows, check_resumable,
                                        hidden_hooks, hidden_mse, lr_at, record_step)

CKPT_VERSION = "distill-dcp-1"


def shard(model: torch.nn.Module, train: bool = True) -> torch.nn.Module:
    """FSDP2 over all ranks: each decoder layer that has parameters, then the root; gradients summed.
    ``train=False`` (a forward-only teacher): the root is resharded after its forward too, since no
    backward comes to do it."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    mesh = init_device_mesh(dist.device().type, (dist.world(),))
    for layer in getattr(getattr(model, "model", None), "layers", None) or []:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh, reshard_after_forward=not train)  # training: the backward needs it at once
    for m in model.modules():  # per FSDP module, not recursive
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)
    return model


def distill_sharded(student: torch.nn.Module, teacher: TeacherCache, train_tokens: torch.Tensor, cfg: DistillConfig,
                    ckpt_dir: str | os.PathLike | None = None, progress: Progress | None = None,
                    hidden: HiddenPairs | None = None, stop_after: int | None = None
                    ) -> tuple[DistillResult, dict[str, torch.Tensor]]:
    """``distill.distill`` on every rank of the launch. Returns (the result, the student's full state
    dict on rank 0; ``{}`` on the others)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    assert train_tokens.shape[0] == teacher.rows, (train_tokens.shape, teacher.rows)
    if cfg.batch < dist.world():
        raise ValueError(f"distill batch {cfg.batch} is smaller than the {dist.world()} processes: every rank needs "
                         "at least one row of each micro-batch")
    dev = dist.device()
    shard(student.to(dev))
    if hidden is not None:
        shard(hidden.teacher.to(dev).eval().requires_grad_(False), train=False)
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, foreach=False)
    result = DistillResult(losses=[], steps=0, tokens=0, seconds=0.0)
    torch.manual_seed(cfg.seed)
    step = dist.from_main(_latest(Path(ckpt_dir)) if ckpt_dir else 0)  # rank 0 decides where to resume
    if step:
        _load(Path(ckpt_dir) / f"dcp-step-{step:08d}", student, opt, result, cfg)
        result.resumed_from = result.steps

    captured: dict[int, torch.Tensor] = {}
    handles = hidden_hooks(hidden, captured)
    n, seq_len = train_tokens.shape[0], train_tokens.shape[1] - 1
    bar = (progress or Progress()).task("distill", total=cfg.steps, unit="step")
    if result.steps:
        bar.advance(result.steps, cached=True)
    student.train()
    try:
        while result.steps < cfg.steps and (stop_after is None or result.steps < stop_after):
            t0 = time.perf_counter()
            step = result.steps
            lr = lr_at(step, cfg)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            step_loss = torch.zeros((), dtype=torch.float64, device=dev)
            for micro in range(cfg.grad_accum):
                rows = batch_rows(step, micro, cfg, n)
                part = dist.share(len(rows))
                mine = rows[part.start:part.stop]
                ids = train_tokens[mine, :-1].to(dev)
                t = teacher.get(mine)
                target = TopK(t.values.to(dev), t.indices.to(dev), t.lse.to(dev))
                loss = topk_kl(logits_of(student, ids), target, reduction="sum") / (len(rows) * seq_len)
                if hidden is not None:  # a mean over this rank's rows, weighted by its share of the batch
                    with torch.no_grad():
                        logits_of(hidden.teacher, ids)
                    loss = loss + cfg.hidden_weight * hidden_mse(hidden, captured) * (len(mine) / len(rows))
                (loss / cfg.grad_accum).backward()
                step_loss += loss.detach().double() / cfg.grad_accum
            if cfg.clip:
                torch.nn.utils.clip_grad_norm_(params, cfg.clip)  # DTensor grads: the global norm
            opt.step()
            record_step(result, bar, cfg, seq_len, float(dist.all_sum(step_loss)), lr, t0)
            if ckpt_dir and (result.steps % cfg.ckpt_every == 0 or result.steps == cfg.steps):
                _save(Path(ckpt_dir), student, opt, result, cfg)
    finally:
        bar.close()
        for h in handles:
            h.remove()
    student.eval()
    full = get_model_state_dict(student, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return result, (full if dist.is_main() else {})


# ------------------------------------------------------------------------------------- checkpoints


def _latest(ckpt_dir: Path) -> int:
    done = sorted(p for p in ckpt_dir.glob("dcp-step-*") if (p / "state.json").is_file())
    return int(done[-1].name.rsplit("-", 1)[1]) if done else 0


def _flat(msd: dict, osd: dict) -> dict[str, torch.Tensor]:
    """One flat dict of tensors (what a safetensors writer takes); the same objects, loaded in place.
    A tied weight (embeddings = LM head) is one tensor under two names: stored under the first."""
    out, seen = {}, set()
    for k, v in msd.items():
        local = v.to_local() if hasattr(v, "to_local") else v
        where = (local.untyped_storage().data_ptr(), local.storage_offset(), tuple(local.shape))
        if where not in seen:
            seen.add(where)
            out[f"model.{k}"] = v
    for fqn, st in osd["state"].items():
        out.update({f"optim.{fqn}.{name}": v for name, v in st.items()})
    return out


def _save(ckpt_dir: Path, model, opt, result: DistillResult, cfg: DistillConfig) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    from torch.distributed.checkpoint.state_dict import get_state_dict

    final = ckpt_dir / f"dcp-step-{result.steps:08d}"
    tmp = ckpt_dir / f".{final.name}.tmp"
    if dist.is_main():
        shutil.rmtree(tmp, ignore_errors=True)  # left by a run killed while saving
        tmp.mkdir(parents=True)
    dist.barrier()
    msd, osd = get_state_dict(model, opt)
    dcp.save(_flat(msd, osd), storage_writer=HuggingFaceStorageWriter(str(tmp), save_distributed=True))
    dist.barrier()  # every shard is written
    if dist.is_main():
        atomic_write_json(tmp / "state.json", {
            "version": CKPT_VERSION, "step": result.steps, "tokens": result.tokens, "seconds": result.seconds,
            "losses": result.losses, "lrs": result.lrs, "world": dist.world(), "config": asdict(cfg)})
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in sorted(p for p in ckpt_dir.glob("dcp-step-*") if p.is_dir())[: -cfg.keep_ckpts]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def _load(ckpt: Path, model, opt, result: DistillResult, cfg: DistillConfig) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    state = json.loads((ckpt / "state.json").read_text())
    if state.get("version") != CKPT_VERSION:
        raise ValueError(f"{ckpt}: checkpoint version, allowed {CKPT_VERSION}, got {state.get('version')}")
    check_resumable(ckpt, state["config"], cfg)
    # on a fresh optimizer get_state_dict creates AdamW's state with an lr-0 step (step = 1); the
    # load below overwrites all of it, step included. Never call it on a fresh optimizer otherwise.
    msd, osd = get_state_dict(model, opt)
    dcp.load(_flat(msd, osd), storage_reader=HuggingFaceStorageReader(str(ckpt)))
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    result.steps, result.tokens, result.seconds = state["step"], state["tokens"], state["seconds"]
    result.losses, result.lrs = list(state["losses"]), list(state["lrs"])


__all__ = ["distill_sharded", "shard"]
