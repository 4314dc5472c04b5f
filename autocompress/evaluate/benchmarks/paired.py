"""Paired accuracy differences between two models scored on the same documents.

Two models' eight-task means each carry a standard error of ~1.4 points at the subsample sizes,
but the subsamples are identical across models, so their difference is much better resolved than
the two SEs suggest: most documents are right (or wrong) for both. Per task the difference is the
mean of the per-document differences of the task's primary metric, with the standard error of
that mean (sample SD / sqrt(n), as lm-eval's ``mean_stderr``); the eight-task difference is the
mean of the task differences, its SE from the task SEs (independent tasks), as ``stage.summary``.

Reads what the accuracy stage wrote (its ``per_doc.jsonl``, found by ``per_doc_path``) after the
stage ran; it scores nothing itself.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from autocompress.evaluate.benchmarks.tasks import TASKS


def per_doc_path(accuracy: dict, work: Path) -> Path | None:
    """The ``per_doc.jsonl`` of the accuracy stage in ``work`` whose result is ``accuracy`` (as a
    report holds it: ``quality.accuracy.student``), or None. Found by content, not by recomputing
    the stage key: a report read later (another checkout, other code) still finds its documents."""
    for folder in sorted(Path(work).glob("accuracy-*")):
        res = folder / "accuracy.json"
        if (folder / "DONE").exists() and res.is_file() and json.loads(res.read_text()) == accuracy:
            return folder / "per_doc.jsonl"
    return None


def read_rows(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


def _mean_se(d: list[float]) -> dict:
    """The mean of per-document differences and its SE (sample SD / sqrt(n), lm-eval's ``mean_stderr``)."""
    return {"diff": statistics.fmean(d), "stderr": statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else 0.0,
            "n": len(d)}


def _over_tasks(tasks: dict[str, dict]) -> dict:
    """The eight-task difference: the mean of the task differences, its SE from the task SEs (independent tasks)."""
    se = sum(t["stderr"] ** 2 for t in tasks.values()) ** 0.5 / len(tasks)
    return {"diff": statistics.fmean(t["diff"] for t in tasks.values()), "stderr": se, "tasks": tasks}


def paired_difference(a: list[dict], b: list[dict]) -> dict:
    """``a`` minus ``b`` (per_doc rows): per task {diff, stderr, n, a, b} on the documents both
    hold, and the mean over tasks with its SE. Raises ValueError when a task has no shared document."""
    metric = {name: t.metric for name, t in TASKS.items()}
    by_b = {(r["task"], r["doc"]): r for r in b}
    tasks: dict[str, dict] = {}
    for task in dict.fromkeys(r["task"] for r in a):
        pairs = [(r[metric[task]], by_b[(task, r["doc"])][metric[task]]) for r in a
                 if r["task"] == task and (task, r["doc"]) in by_b]
        if not pairs:
            raise ValueError(f"{task}: no document scored for both models")
        tasks[task] = {**_mean_se([x - y for x, y in pairs]), "a": statistics.fmean(x for x, _ in pairs),
                       "b": statistics.fmean(y for _, y in pairs)}
    return _over_tasks(tasks)


def pooled_difference(pairs: list[tuple[list[dict], list[dict]]]) -> dict:
    """``a`` minus ``b`` pooled over repeats (seeds) of the same comparison: ``pairs`` holds each
    repeat's (a rows, b rows). Per task and document, the repeats' differences are averaged first,
    then the mean and SE are taken over documents, as ``paired_difference``. Why: the seeds score
    the same subsample, so the document draw is shared between them and the per-seed SEs are not
    independent (sqrt(se1² + se2²) / 2 would claim an error that halves with every seed; the
    document-level spread stays). {diff, stderr, repeats, tasks}."""
    if not pairs:
        raise ValueError("no pair to pool")
    metric = {name: t.metric for name, t in TASKS.items()}
    per_doc: dict[tuple, list[float]] = {}
    for a, b in pairs:
        by_b = {(r["task"], r["doc"]): r for r in b}
        for r in a:
            k = (r["task"], r["doc"])
            if k in by_b:
                m = metric[r["task"]]
                per_doc.setdefault(k, []).append(r[m] - by_b[k][m])
    tasks = {task: _mean_se([statistics.fmean(v) for (t, _), v in per_doc.items() if t == task])
             for task in dict.fromkeys(t for t, _ in per_doc)}
    if not tasks:
        raise ValueError("no document scored for both models")
    return {**_over_tasks(tasks), "repeats": len(pairs)}
