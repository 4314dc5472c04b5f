"""The accuracy stage: one model on the eight benchmarks, cached and resumable.

The stage folder (``build.stages.run_stage``) is keyed by the model's content (config and
weight files), the data's digest, the code of this package and the scorer settings (tasks,
sizes, seed). While it runs, every scored document is appended to ``<partial>/<task>.jsonl``; a
rerun after a kill re-reads those lines and scores only what is missing, so an interrupted
1200-document run loses at most one document. The committed folder holds ``accuracy.json``
(per task: n, acc, acc_norm, standard errors, seconds) and ``per_doc.jsonl`` (log-likelihoods
per document: paired comparisons between models on the same documents need them).

Subsamples are nested and identical across models: the task's document ids shuffled by
``random.Random(seed)``, the first n taken, sorted.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from autocompress import cache
from autocompress.build.stages import run_stage, stage_key
from autocompress.evaluate.benchmarks import data
from autocompress.evaluate.benchmarks.scorer import Encoder, loglikelihoods, max_length, mean_stderr, score
from autocompress.evaluate.benchmarks.tasks import SUBSAMPLE_SEED, TASKS, sizes
from autocompress.progress import as_progress

CODE = ("autocompress.evaluate.benchmarks.stage", "autocompress.evaluate.benchmarks.scorer", "autocompress.evaluate.benchmarks.tasks",
        "autocompress.evaluate.benchmarks.data")


def sample(total: int, n: int | None, seed: int = SUBSAMPLE_SEED) -> list[int]:
    if n is None or n >= total:
        return list(range(total))
    perm = list(range(total))
    random.Random(seed).shuffle(perm)  # nested: the n-document sample is a prefix of every larger one
    return sorted(perm[:n])


def model_digest(folder: Path) -> str:
    """Content of a model folder: config and weights (tokenizer files too: they shape requests)."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and (
        p.suffix in (".json", ".safetensors", ".model") and not p.name.startswith("autocompress-")))
    return cache.key(*(f"{n}:{cache.sha256_file(folder / n)}" for n in names))


def _read_partial(path: Path) -> dict[int, dict]:
    done: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:  # a line cut by the kill
                continue
            done[r["doc"]] = r
    return done


def score_tasks(model, tokenizer, ns: dict[str, int | None], partial: Path, seed: int = SUBSAMPLE_SEED,
                progress=None) -> tuple[dict, list[dict]]:
    """Score ``ns`` (task -> documents, None = all); per-document lines go to ``partial``."""
    progress = as_progress(progress)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spinning OpenMP threads: ~10x wall on shared cores
    model.eval()
    enc, max_len = Encoder(tokenizer), max_length(model, tokenizer)
    results, rows = {}, []
    for name, n in ns.items():
        task = TASKS[name]
        docs = task.docs()
        idx = sample(len(docs), n, seed)
        path = partial / f"{name}.jsonl"
        done = _read_partial(path)
        t0 = time.perf_counter()
        with progress.task(f"accuracy {name}", total=len(idx), unit="doc") as bar, path.open("a", encoding="utf-8") as f:
            bar.advance(sum(1 for j in idx if j in done), cached=True)
            for j in idx:
                if j in done:
                    continue
                pairs, gold, choices = task.requests(docs[j])
                with torch.no_grad():
                    out = loglikelihoods(model, enc, pairs, max_len)
                lls = [o[0] for o in out]
                acc, acc_norm = score(lls, gold, choices)
                done[j] = {"task": name, "doc": j, "gold": gold, "lls": lls, "acc": acc, "acc_norm": acc_norm}
                f.write(json.dumps(done[j]) + "\n")
                f.flush()
                bar.advance()
        accs, norms = [done[j]["acc"] for j in idx], [done[j]["acc_norm"] for j in idx]
        r = {"n": len(idx), "total": len(docs), "acc": sum(accs) / len(idx), "acc_stderr": mean_stderr(accs),
             "seconds": round(time.perf_counter() - t0, 1)}
        if task.reports_acc_norm:
            r.update(acc_norm=sum(norms) / len(idx), acc_norm_stderr=mean_stderr(norms))
        r["metric"] = task.metric
        r["score"], r["stderr"] = r[task.metric], r[f"{task.metric}_stderr"]
        results[name] = r
        rows += [done[j] for j in idx]
        progress.log(f"[accuracy] {task.title}: {task.metric} {r['score']:.4f} +- {r['stderr']:.4f} (n={len(idx)})")
    return results, rows


def summary(results: dict) -> dict:
    """The eight-task mean of the primary metrics and its standard error (independent tasks)."""
    scores = [r["score"] for r in results.values()]
    se = sum(r["stderr"] ** 2 for r in results.values()) ** 0.5 / len(scores)
    return {"mean": sum(scores) / len(scores), "stderr": se, "tasks": len(scores),
            "docs": sum(r["n"] for r in results.values())}


def retained(parent: dict, student: dict) -> dict:
    """The paper's "share of the mean score kept": student mean / parent mean, per task too."""
    pm = parent["summary"]["mean"]
    return {"mean": student["summary"]["mean"] / pm if pm else None,
            "tasks": {t: student["tasks"][t]["score"] / r["score"] if r["score"] else None
                      for t, r in parent["tasks"].items() if t in student["tasks"]}}


def run_accuracy(model_folder: Path, work: Path, load, tasks: list[str] | None = None, full: bool = False,
                 seed: int = SUBSAMPLE_SEED, progress=None) -> dict:
    """The stage: ``load(folder) -> model``; the tokenizer from the folder. Result: {"tasks": ...,
    "summary": ..., "settings": ...}. Raises ``data.EvalDataMissing`` before loading anything."""
    progress = as_progress(progress)
    ns = sizes(tasks, full)
    settings = {"sizes": ns, "seed": seed, "full": full, "shots": 0, "dtype": "float32"}
    key = stage_key("accuracy", CODE, model_digest(Path(model_folder)), data.digest(), json.dumps(settings, sort_keys=True))

    def stage(tmp: Path, partial: Path) -> dict:
        model = load(Path(model_folder))
        tok = AutoTokenizer.from_pretrained(str(model_folder))
        results, rows = score_tasks(model, tok, ns, partial, seed, progress)
        out = {"tasks": results, "summary": summary(results), "settings": settings}
        (tmp / "accuracy.json").write_text(json.dumps(out, indent=1))
        (tmp / "per_doc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return {"mean": out["summary"]["mean"]}

    st = run_stage(Path(work), "accuracy", key, stage, progress.log)
    return json.loads((st.path / "accuracy.json").read_text())
