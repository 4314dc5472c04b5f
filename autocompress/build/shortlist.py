"""The final choice by a short distillation of the finalists (Minitron's practice).

    finalists   the search's ``finalists``: its N candidates of least KL to the parent before
                distillation that meet the contract, as they would ship (every strategy lists
                them the same way, so both arms of an A/B get the same selection procedure)
    distil      each from the parent's permuted weights with the build's recipe (batch, lr
                schedule, seed) for ``finalist_steps`` steps, on the training rows less the
                validation rows
    measure     KL to the parent (the cached top-k teacher outputs) on the validation rows, the
                last ``validation_rows(n)`` training rows at the full sequence length, which the
                short distillations never read; before and after
    choose      the least KL after; of equal ones the search's order (least KL before) wins

Why: KL before distillation is a weak predictor of the model after it. Over 8 candidates per
contract distilled 20 steps, KL before picked the model of best code perplexity after on none of
the four example contracts (code-5070: perplexity 148 where another candidate reached 75): what
recovers with training is not what is closest before it.

Resumable: each finalist's result is written (atomically) to the stage's partial folder as it completes, its
distillation checkpoints beside it, so a killed build measures only the rest. Orchestration: the
tensor math is ``distill.distill`` and ``teacher.topk_kl``.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from autocompress.cache import atomic_write_json
from autocompress.train.distill import DistillConfig, distill
from autocompress.build.stages import crash_point
from autocompress.data.teacher import TeacherCache, logits_of, topk_kl
from autocompress.ir import Architecture

EVAL_BATCH = 4  # validation rows per forward: bounds the logits' memory (rows x seq x vocab floats)


def validation_rows(n: int) -> int:
    """How many of the ``n`` training rows are held apart for the validation: 16 (4K tokens at the
    default 256 per row; candidates' KLs differ by tenths of a nat, a 4K-token mean resolves
    hundredths), at most an eighth of them so the short distillations keep most rows."""
    return max(1, min(16, n // 8))


@dataclass(frozen=True)
class Entrant:
    """A finalist the short distillation measures (``search.context.Finalist``, as the search listed it)."""

    name: str
    kl: float | None  # KL to the parent before distillation on the search's selection rows, as listed
    arch: Architecture


@dataclass(frozen=True)
class _FirstRows:
    """The teacher outputs of the first ``rows`` training rows: what the short distillations may read."""
    teacher: TeacherCache
    rows: int

    def get(self, rows):
        return self.teacher.get(rows)


def validation_kl(model: torch.nn.Module, train_rows: torch.Tensor, teacher, first: int) -> float:
    """Mean top-k KL(parent || model) per position over training rows ``first..n`` (full length)."""
    model.eval()
    total, positions = 0.0, 0
    with torch.no_grad():
        for lo in range(first, train_rows.shape[0], EVAL_BATCH):
            rows = list(range(lo, min(lo + EVAL_BATCH, train_rows.shape[0])))
            ids = train_rows[rows, :-1]
            total += float(topk_kl(logits_of(model, ids), teacher.get(rows), reduction="sum"))
            positions += ids.numel()
    return total / positions


def _measured(done: Path, log) -> dict | None:
    """The row a finalist's earlier measurement left at ``done``, or None: none there, or one that
    cannot be read (truncated by a copy, a bad sector), which is said and measured again rather
    than loaded."""
    try:
        row = json.loads(done.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log(f"warning: the shortlist's record {done} is unreadable ({type(e).__name__}); measuring that finalist again")
        return None
    if not (isinstance(row, dict) and isinstance(row.get("kl_after"), (int, float))):
        log(f"warning: the shortlist's record {done} is not a finalist's row; measuring that finalist again")
        return None
    return row


def short_distill_choice(finalists: list[Entrant], make_student, teacher: TeacherCache, train_rows: torch.Tensor,
                         settings, partial: Path, progress) -> dict:
    """The shortlist's result: every finalist's KL on the validation rows before and after its short
    distillation, and the index of the chosen one.

    ``finalists``: the search's, in its order; ``make_student(arch)``: a fresh student module with
    the parent's weights sliced to ``arch``; ``partial``: the stage's folder that survives a crash.
    The result is the stage's ``shortlist.json`` (JSON: the runoff and the report read it)."""
    n = train_rows.shape[0]
    held = validation_rows(n)
    first = n - held
    head = _FirstRows(teacher, first)
    cfg = DistillConfig(steps=settings.finalist_steps, batch=settings.batch, lr=settings.lr, seed=settings.seed,
                        ckpt_every=max(1, settings.finalist_steps // 2))
    log = progress.log
    log(f"[shortlist] {len(finalists)} finalists, {cfg.steps} distillation steps x {cfg.batch} x "
        f"{train_rows.shape[1] - 1} tokens each; KL to the parent on {held} held-apart training rows "
        f"({held * (train_rows.shape[1] - 1)} tokens) before and after")
    rows = []
    with progress.task("shortlist", total=len(finalists), unit="finalist") as bar:
        for i, f in enumerate(finalists):
            done = partial / f"finalist-{i}.json"
            row = _measured(done, log)
            if row is not None:  # measured before a crash: the same finalist, key and code
                rows.append(row)
                bar.advance(cached=True)
                continue
            t0 = time.perf_counter()
            model = make_student(f.arch)
            before = validation_kl(model, train_rows, teacher, first)
            model.train()
            res = distill(model, head, train_rows[:first], cfg, ckpt_dir=partial / f"finalist-{i}", progress=progress)
            after = validation_kl(model, train_rows, teacher, first)
            row = {"name": f.name, "kl_search": f.kl, "params": f.arch.params(),
                   "kl_before": round(before, 4), "kl_after": round(after, 4),
                   "last_loss": round(res.losses[-1], 4) if res.losses else None,
                   "seconds": round(time.perf_counter() - t0, 1)}
            atomic_write_json(done, row)  # whole or absent: a full disk or Ctrl-C leaves no half
            # its checkpoints served only a resume of this finalist: kept, four SmolLM2 finalists
            # held 11 GB until the stage ended (a full disk stopped an ablation run)
            shutil.rmtree(partial / f"finalist-{i}", ignore_errors=True)
            crash_point(f"shortlist:{i + 1}")  # fault injection: killed after N finalists (the resume test)
            rows.append(row)
            log(f"[shortlist] {i + 1}/{len(finalists)} {f.name}: KL {before:.3f} -> {after:.3f} after "
                f"{cfg.steps} steps")
            bar.advance(KL=f"{after:.3f}")
            del model
    chosen = min(range(len(rows)), key=lambda j: (rows[j]["kl_after"], j))
    return {"finalists": rows, "chosen": chosen, "steps": cfg.steps, "batch": cfg.batch,
            "seq_len": train_rows.shape[1] - 1, "validation_rows": held,
            "validation_tokens": held * (train_rows.shape[1] - 1),
            "seconds": round(sum(r["seconds"] for r in rows), 1)}


def describe(result: dict) -> str:
    """The build's ``how`` for a shortlist's choice."""
    rows, c = result["finalists"], result["chosen"]
    r = rows[c]
    first = "" if c == 0 else f"; the least KL before distillation was {rows[0]['name']} ({rows[0]['kl_after']:.3f} after)"
    return (f"short-distillation choice among {len(rows)} finalists ({result['steps']} steps each, KL on "
            f"{result['validation_tokens']} held-apart tokens): {r['name']}, KL {r['kl_before']:.3f} -> "
            f"{r['kl_after']:.3f}{first}")


__all__ = ["Entrant", "describe", "short_distill_choice", "validation_kl", "validation_rows"]
