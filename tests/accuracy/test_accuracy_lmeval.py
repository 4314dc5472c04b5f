"""The scorer agrees with lm-evaluation-harness 0.4.13 on a real model: SmolLM2-135M (the alias,
fp32), the first 10 documents of each of the eight tasks. lm-eval's log-likelihoods were recorded
by the issue-13 research run (``tests/fixtures/lmeval_smollm2_first10.json``, how: its
generator's docstring); lm-eval itself needs ``datasets`` and 28 more packages, so it is not
installed here."""

import json
import os
from pathlib import Path

import pytest

from autocompress.evaluate.benchmarks.scorer import Encoder, loglikelihoods, max_length, score

REF = Path(__file__).resolve().parent.parent / "fixtures" / "lmeval_smollm2_first10.json"


@pytest.mark.slow
def test_log_likelihoods_and_scores_equal_lm_evals(monkeypatch):
    real = os.environ.get("ACC_TEST_REAL_EVAL_DATA")
    if not real:
        pytest.skip("benchmark data not installed (python -m autocompress.evaluate.benchmarks.data install)")
    monkeypatch.setenv("ACC_EVAL_DATA", real)
    from transformers import AutoTokenizer

    from autocompress.evaluate.benchmarks import data
    from autocompress.evaluate.benchmarks.tasks import TASKS
    from autocompress.evaluate.heldout import load_exported
    from autocompress.export.gguf_convert import convert_alias

    folder = convert_alias("smollm2-135m")
    model, tok = load_exported(folder), AutoTokenizer.from_pretrained(str(folder))
    enc, max_len = Encoder(tok), max_length(model, tok)
    ref = json.loads(REF.read_text())["lls"]
    worst, docs = 0.0, 0
    for name, task in TASKS.items():
        for doc, want in zip(task.docs(), ref[name]):
            pairs, gold, choices = task.requests(doc)
            got = [ll for ll, _ in loglikelihoods(model, enc, pairs, max_len)]
            worst = max(worst, max(abs(a - b) for a, b in zip(got, want)))
            assert score(got, gold, choices) == score(want, gold, choices), (name, got, want)
            docs += 1
    assert docs == 80 and worst < 5e-4, worst  # fp32 batch-shape noise; the research run saw 7.6e-5
