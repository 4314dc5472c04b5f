"""The real Gemma 3 270M (the ``gemma3-270m`` alias, Q4_K_M de-quantized): converted with its BOS
token and terms, and the functional forward equals transformers' within 1e-4 beyond the 512-token
sliding window. Slow: about a minute of conversion and two 270M forwards on two cores."""

from __future__ import annotations

import inspect
import textwrap

import pytest

from autocompress.parents.aliases import ALIASES

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
if ALIASES["gemma3-270m"].locate() is None:
    pytest.skip(f"gemma3-270m is not installed ({ALIASES['gemma3-270m'].install})", allow_module_level=True)


def test_real_gemma3_converts_and_forward_equals_transformers():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from autocompress.export.gguf_convert import convert_alias
    from autocompress.families.base import family_of

    folder = convert_alias("gemma3-270m")
    assert "Gemma Terms of Use" in (folder / "NOTICE").read_text() and (folder / "GEMMA_TERMS.html").is_file()
    tok = AutoTokenizer.from_pretrained(str(folder))
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    assert ids[0, 0].item() == tok.bos_token_id == 2  # without BOS the model degenerates
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.generate(ids, max_new_tokens=4, do_sample=False)
    assert tok.decode(out[0, ids.shape[1]:]).startswith(" the capital")
    family = family_of("gemma3_text")
    params, cfg = family.load(folder)
    x = tok(inspect.getsource(textwrap), return_tensors="pt")["input_ids"][:, :600]
    assert x.shape[1] == 600  # past the 512-token window of the sliding layers
    with torch.no_grad():
        ref, got = hf(x).logits, family.forward(params, cfg, x)
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4), (got - ref).abs().max()
    ppl = torch.nn.functional.cross_entropy(got[0, :-1], x[0, 1:]).exp().item()
    assert 5 < ppl < 20, ppl  # 11.1 here: the Q4_K_M weights are sane
