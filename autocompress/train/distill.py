"""Knowledge distillation of an extracted student from cached teacher outputs: the recipe.

Reads top to bottom: ``distill`` resumes from the newest checkpoint if there is one, then for each step
draws its rows, accumulates the top-k KD loss (``teacher.topk_kl``, plus an optional hidden-state MSE)
over micro-batches, clips, steps AdamW at the scheduled learning rate, and checkpoints every
``ckpt_every`` steps. Everything a step depends on is a function of (seed, step) or lives in the
checkpoint, so a run killed at any point and resumed ends with the same weights, bit for bit, as one
that never stopped (on the same machine and thread count):

* data order: epoch e visits the rows in ``randperm(n, seed=hash(seed, e))``; step s, micro-batch m takes
  the next ``batch`` samples of that global sequence, so the position is the step number;
* learning rate: ``lr_at(step)``, linear warm-up then cosine to ``min_lr_ratio * lr`` (the schedule of
  nanochat / torchtune recipes); no scheduler object to save;
* checkpoint ``<ckpt_dir>/step-00000040/``: ``model.safetensors``, ``optimizer.safetensors`` (AdamW's
  per-parameter tensors), ``rng.safetensors`` (torch CPU generator), ``state.json`` (step, tokens, losses,
  elapsed seconds, optimizer hyper-parameters, config). The folder is written under a temporary name and
  renamed, so a crash mid-write leaves the previous checkpoint. No pickle anywhere.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from autocompress.cache import atomic_dir
from autocompress.data.teacher import TeacherCache, logits_of, topk_kl
from autocompress.progress import Progress

CKPT_VERSION = "distill-ckpt-1"


@dataclass(frozen=True)
class DistillConfig:
    steps: int
    batch: int = 4  # sequences per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    lr: float = 3e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int | None = None  # None: 5 % of the steps (at least 1)
    weight_decay: float = 0.0  # short recoveries from good weights: no pull towards zero
    betas: tuple[float, float] = (0.9, 0.95)
    clip: float = 1.0
    ckpt_every: int = 50
    keep_ckpts: int = 2
    seed: int = 0
    hidden_weight: float = 1.0  # weight of the hidden-state MSE, when pairs are given

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 20)


@dataclass(frozen=True)
class HiddenPairs:
    """Hidden-state matching: ``teacher`` runs live on the same inputs; the output of each student module
    is pulled towards its teacher module's (MSE). A wider teacher state is compared on its leading
    channels: after the importance permutation, a pruned student keeps a prefix of the parent's."""

    teacher: torch.nn.Module
    pairs: Sequence[tuple[torch.nn.Module, torch.nn.Module]]


@dataclass
class DistillResult:
    losses: list[float]
    steps: int
    tokens: int  # predicted tokens seen
    seconds: float  # training time, summed over resumed runs
    resumed_from: int | None = None
    lrs: list[float] = field(default_factory=list)


def lr_at(step: int, cfg: DistillConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warm-up, then cosine decay."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    span = max(1, cfg.steps - cfg.warmup)
    progress = min(1.0, (step - cfg.warmup) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def batch_rows(step: int, micro: int, cfg: DistillConfig, n: int) -> torch.Tensor:
    """Dataset rows of micro-batch ``micro`` of step ``step``: a pure function of (seed, step, micro)."""
    first = (step * cfg.grad_accum + micro) * cfg.batch
    return torch.stack([_epoch_order(cfg.seed, g // n, n)[g % n] for g in range(first, first + cfg.batch)])


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, n: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def distill(
    student: torch.nn.Module,
    teacher: TeacherCache,
    train_tokens: torch.Tensor,
    cfg: DistillConfig,
    ckpt_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    hidden: HiddenPairs | None = None,
    stop_after: int | None = None,
) -> DistillResult:
    """Distil ``student`` towards the cached teacher on ``train_tokens`` ``[n, seq_len + 1]``.

    ``progress``: where steps are reported (``autocompress.progress``; silent by default).
    ``stop_after``: return after that many steps (as if killed; for tests and time-boxed builds).
    """
    assert train_tokens.shape[0] == teacher.rows, (train_tokens.shape, teacher.rows)
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, foreach=False)
    result = DistillResult(losses=[], steps=0, tokens=0, seconds=0.0)
    ckpt = _latest(Path(ckpt_dir)) if ckpt_dir else None
    if ckpt is not None:
        _load(ckpt, student, opt, result, cfg)
        result.resumed_from = result.steps
    else:  # the checkpoint carries the generator's state; a fresh run starts it from the seed
        torch.manual_seed(cfg.seed)

    captured: dict[int, torch.Tensor] = {}
    handles = hidden_hooks(hidden, captured)
    seq_len = train_tokens.shape[1] - 1
    bar = (progress or Progress()).task("distill", total=cfg.steps, unit="step")
    if result.steps:  # resumed steps: not part of this run's rate
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
            step_loss = 0.0
            for micro in range(cfg.grad_accum):
                rows = batch_rows(step, micro, cfg, train_tokens.shape[0])
                ids = train_tokens[rows, :-1]
                loss = topk_kl(logits_of(student, ids), teacher.get(rows))
                if hidden is not None:
                    with torch.no_grad():
                        logits_of(hidden.teacher, ids)
                    loss = loss + cfg.hidden_weight * hidden_mse(hidden, captured)
                (loss / cfg.grad_accum).backward()
                step_loss += loss.item() / cfg.grad_accum
            if cfg.clip:
                torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            opt.step()
            record_step(result, bar, cfg, seq_len, step_loss, lr, t0)
            if ckpt_dir and (result.steps % cfg.ckpt_every == 0 or result.steps == cfg.steps):
                _save(Path(ckpt_dir), student, opt, result, cfg)
    finally:
        bar.close()
        for h in handles:
            h.remove()
    student.eval()
    return result


def record_step(result, bar, cfg, seq_len: int, loss: float, lr: float, t0: float) -> None:
    """One optimizer step into ``result`` and the progress bar (shared with ``distill_dist``)."""
    result.steps += 1
    result.tokens += cfg.grad_accum * cfg.batch * seq_len
    result.losses.append(loss)
    result.lrs.append(lr)
    result.seconds += time.perf_counter() - t0
    tps = cfg.grad_accum * cfg.batch * seq_len / max(1e-9, time.perf_counter() - t0)
    bar.advance(loss=f"{loss:.4f}", tokens=f"{tps:,.0f} tok/s")


# ------------------------------------------------------------------------------------- hidden states


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def hidden_hooks(hidden: HiddenPairs | None, captured: dict[int, torch.Tensor]) -> list:
    """Forward hooks that put each pair's student and teacher outputs in ``captured`` (2i, 2i + 1);
    the handles, to remove them."""
    if hidden is None:
        return []
    handles = []
    for i, (s_mod, t_mod) in enumerate(hidden.pairs):
        handles.append(s_mod.register_forward_hook(lambda m, a, out, i=i: captured.__setitem__(2 * i, _first(out))))
        handles.append(t_mod.register_forward_hook(lambda m, a, out, i=i: captured.__setitem__(2 * i + 1, _first(out))))
    return handles


def hidden_mse(hidden: HiddenPairs, captured: dict[int, torch.Tensor]) -> torch.Tensor:
    """The mean over pairs of the MSE between the captured student and teacher outputs (the
    teacher's cut to the student's width)."""
    total = 0.0
    for i in range(len(hidden.pairs)):
        s, t = captured[2 * i], captured[2 * i + 1].detach()
        total = total + torch.nn.functional.mse_loss(s.float(), t[..., : s.shape[-1]].float())
    return total / max(1, len(hidden.pairs))


# ------------------------------------------------------------------------------------- checkpoints


def _latest(ckpt_dir: Path) -> Path | None:
    done = sorted(p for p in ckpt_dir.glob("step-*") if (p / "state.json").is_file())
    return done[-1] if done else None


def _save(ckpt_dir: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, result: DistillResult, cfg: DistillConfig) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"step-{result.steps:08d}"
    with atomic_dir(final, replace=True) as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        sd = opt.state_dict()
        tensors = {f"state.{i}.{name}": v.contiguous() for i, st in sd["state"].items() for name, v in st.items()}
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        save_file({"torch_cpu": torch.get_rng_state()}, str(tmp / "rng.safetensors"))
        groups = [{k: v for k, v in g.items()} for g in sd["param_groups"]]
        state = {
            "version": CKPT_VERSION,
            "step": result.steps,
            "tokens": result.tokens,
            "seconds": result.seconds,
            "losses": result.losses,
            "lrs": result.lrs,
            "data_position": result.steps * cfg.grad_accum * cfg.batch,  # samples drawn (see batch_rows)
            "param_groups": groups,
            "config": asdict(cfg),
        }
        (tmp / "state.json").write_text(json.dumps(state, indent=1) + "\n")
    for old in sorted(p for p in ckpt_dir.glob("step-*") if p.is_dir())[: -cfg.keep_ckpts]:
        shutil.rmtree(old, ignore_errors=True)
    return final


# Settings that may change between a run and its resumption: they do not alter the trajectory.
_RESUMABLE_CHANGES = frozenset({"ckpt_every", "keep_ckpts"})


def check_resumable(ckpt: Path, saved: dict, cfg: DistillConfig) -> None:
    """Refuse a checkpoint written under another configuration (other than ``_RESUMABLE_CHANGES``)."""
    now = json.loads(json.dumps(asdict(cfg)))
    changed = sorted(k for k in now if k not in _RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:  # resuming would silently follow another schedule / data order
        diff = ", ".join(f"{k}: checkpoint {saved.get(k)!r}, now {now[k]!r}" for k in changed)
        raise ValueError(f"{ckpt}: cannot resume with a different configuration ({diff}); use a new ckpt_dir")


def _load(ckpt: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, result: DistillResult, cfg: DistillConfig) -> None:
    state = json.loads((ckpt / "state.json").read_text())
    if state.get("version") != CKPT_VERSION:
        raise ValueError(f"{ckpt}: checkpoint version, allowed {CKPT_VERSION}, got {state.get('version')}")
    check_resumable(ckpt, state["config"], cfg)
    load_model(model, str(ckpt / "model.safetensors"))
    tensors = load_file(ckpt / "optimizer.safetensors")
    per_param: dict[int, dict[str, torch.Tensor]] = {}
    for name, v in tensors.items():
        _, i, field_ = name.split(".", 2)
        per_param.setdefault(int(i), {})[field_] = v
    groups = [dict(g, betas=tuple(g["betas"])) if "betas" in g else g for g in state["param_groups"]]
    opt.load_state_dict({"state": per_param, "param_groups": groups})
    torch.set_rng_state(load_file(ckpt / "rng.safetensors")["torch_cpu"])
    result.steps, result.tokens, result.seconds = state["step"], state["tokens"], state["seconds"]
    result.losses, result.lrs = list(state["losses"]), list(state["lrs"])


__all__ = ["DistillConfig", "DistillResult", "HiddenPairs", "batch_rows", "distill", "lr_at"]
