"""The scorer against plain references: acc / acc_norm / SE formulas, lm-eval's request encoding,
and the fast (shared-prefix) path against a full forward of every sequence."""

import math

import pytest
import torch
import torch.nn.functional as F

from _acckit import hetero_decilm, llama_folder
from autocompress.evaluate.benchmarks.scorer import Encoder, loglikelihoods, mean_stderr, score


class CharTok:
    """One token per character; no special tokens added."""
    bos_token_id, eos_token_id = None, 0

    def encode(self, s):
        return [ord(c) % 300 + 1 for c in s]


def test_acc_norm_divides_by_characters_and_ties_take_the_first():
    assert score([-4.0, -6.0], 1, ["ab", "abcdef"]) == (0.0, 1.0)  # -2 per char vs -1 per char
    assert score([-1.0, -1.0], 0, ["a", "a"]) == (1.0, 1.0)
    assert score([-1.0, -1.0], 1, ["a", "a"]) == (0.0, 0.0)


def test_mean_stderr_is_lm_evals_sample_formula():
    xs = [1.0] * 30 + [0.0] * 70
    p, n = 0.3, 100
    assert mean_stderr(xs) == pytest.approx(math.sqrt(p * (1 - p) / (n - 1)))
    assert math.isnan(mean_stderr([1.0]))


def test_encode_pair_moves_trailing_context_whitespace_into_the_continuation():
    enc = Encoder(CharTok())
    ctx, cont = enc.pair("Answer: ", "yes")
    assert ctx == CharTok().encode("Answer:") and cont == CharTok().encode(" yes")
    assert enc.pair("", "ab") == ([0], CharTok().encode("ab"))  # empty context: [eos] when there is no bos


def _reference(model, enc, pairs):
    """Every (context, continuation) on its own, full logits, no padding."""
    out = []
    for ctx, cont in pairs:
        c, k = enc.pair(ctx, cont)
        ids = torch.tensor([c + k])
        with torch.no_grad():
            logp = F.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        out.append(float(logp[len(c) - 1:].gather(1, torch.tensor(k)[:, None]).sum()))
    return out


PAIRS = [("The following are questions about algebra.\n\nWhat is 2 + 2?\nAnswer:", f" {x}") for x in "ABCD"]
UNEVEN = [("Question: why\nAnswer:", " because it is"), ("Question: why\nAnswer:", " no")]


@pytest.mark.integration
@pytest.mark.parametrize("which", ["llama", "decilm"])
def test_exact_and_fast_equal_a_plain_forward(tmp_path, which):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = llama_folder(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval() if which == "llama" else hetero_decilm(len(tok))
    enc = Encoder(tok)
    for pairs in (PAIRS, UNEVEN):
        ref = _reference(model, enc, pairs)
        for mode in ("exact", "fast", "auto"):
            got = [ll for ll, _ in loglikelihoods(model, enc, pairs, 256, mode)]
            assert got == pytest.approx(ref, abs=1e-4), (mode, got, ref)
