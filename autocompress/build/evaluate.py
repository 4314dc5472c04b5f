"""Quality retained: the exported student against the parent on held-out code and prose.

The student is loaded back from the exported folder (so what is measured is what ships), the
parent runs through the functional forward; the parent's held-out top-k outputs are cached, so
KL is the top-k + tail approximation (a lower bound) and top-1 agreement is exact.
"""

from __future__ import annotations

from pathlib import Path


def load_exported(folder: Path):
    """The exported checkpoint through transformers (our DeciLM classes registered in-process)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from autocompress.modeling import register

    register()
    hf_logging.disable_progress_bar()
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype="float32").eval()


def evaluate_build(params, cfg, out: Path, heldout: dict, held_teacher: dict, tokenizer_dir, settings) -> dict:
    import torch

    from autocompress.nn.llama import forward
    from autocompress.quality import quality_by_kind

    student = load_exported(out)
    with torch.no_grad():
        parent_q = quality_by_kind(lambda ids: forward(params, cfg, ids), heldout, batch=settings.batch)
        student_q = quality_by_kind(student, heldout, batch=settings.batch, parent_topk=held_teacher)
    as_dict = lambda q: {k: {"tokens": v.tokens, "ppl": v.ppl, "nll": v.nll, "kl": v.kl, "top1": v.top1}  # noqa: E731
                         for k, v in q.items()}
    return {"parent": as_dict(parent_q), "student": as_dict(student_q)}
