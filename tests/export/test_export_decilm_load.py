"""Exported checkpoints load in transformers and reproduce the model that wrote them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _exportkit import GLOBALS, PROMPTS, full_arch, greedy_hf, random_decilm
from _stockkit import STOCK

from autocompress.export.decilm import decilm_config_from_architecture
from autocompress.export.writer import export_architecture, export_llama
from autocompress.modeling.register import register

pytestmark = pytest.mark.integration

# Runs in a process where importing autocompress fails: proves the checkpoint carries its own code.
_STOCK_LOADER = STOCK + textwrap.dedent(
    """
    ckpt, prompts, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    # trust_remote_code for the tokenizer too: AutoTokenizer reads config.json (auto_map) and would
    # otherwise ask on stdin before falling back.
    tok = AutoTokenizer.from_pretrained(ckpt, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(ckpt, trust_remote_code=True, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    out = []
    for p in prompts:
        ids = torch.tensor([tok(p)["input_ids"]])
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=n, do_sample=False)
        out.append(gen[0, ids.shape[1]:].tolist())
    assert not any(m.startswith("autocompress") for m in sys.modules)
    print(json.dumps({"class": type(model).__name__, "tokens": out}))
    """
)


def test_heterogeneous_model_loads_with_register(hetero_checkpoint):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    ckpt, ref = hetero_checkpoint
    register()
    assert type(AutoConfig.from_pretrained(ckpt)).__name__ == "DeciLMConfig"
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(ckpt)
    for k, v in ref.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    assert greedy_hf(model, tok) == greedy_hf(ref, tok)


def test_heterogeneous_model_loads_with_stock_transformers_only(hetero_checkpoint, tmp_path):
    from transformers import AutoTokenizer

    ckpt, ref = hetero_checkpoint
    expected = greedy_hf(ref, AutoTokenizer.from_pretrained(ckpt))
    run = subprocess.run(
        [sys.executable, "-I", "-c", _STOCK_LOADER, str(ckpt), json.dumps(PROMPTS), "12"],
        cwd=tmp_path, capture_output=True, stdin=subprocess.DEVNULL, text=True, timeout=300,
        env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got == {"class": "DeciLMForCausalLM", "tokens": expected}


def test_all_full_decilm_equals_llama_with_the_same_weights(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = full_arch(vocab=300, layers=4, kv=2, width=128)
    cfg = decilm_config_from_architecture(arch, **GLOBALS)
    deci = random_decilm(cfg, seed=1)
    ckpt = export_llama(tmp_path / "llama", arch, deci.state_dict(), **GLOBALS)
    llama = LlamaForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    assert isinstance(llama.config, LlamaConfig) and llama.config.num_key_value_heads == 2
    ids = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = deci(ids).logits, llama(ids).logits
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # Cached decoding agrees too (cache slots = attention layers).
    with torch.no_grad():
        ga = deci.generate(ids[:1], max_new_tokens=8, do_sample=False, eos_token_id=None)
        gb = llama.generate(ids[:1], max_new_tokens=8, do_sample=False, eos_token_id=None)
    assert torch.equal(ga, gb)


def test_homogeneous_architecture_exports_as_plain_llama(tmp_path):
    arch = full_arch(vocab=300, layers=2, tie=True)
    model = random_decilm(decilm_config_from_architecture(arch, **GLOBALS))
    ckpt = export_architecture(tmp_path / "m", arch, model.state_dict(), **GLOBALS)
    config = json.loads((ckpt / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "auto_map" not in config
    assert not (ckpt / "modeling_decilm.py").exists()

    from safetensors import safe_open

    with safe_open(ckpt / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in f.keys()  # tied


def test_cache_positions_are_right_when_layer_zero_has_no_attention(tmp_path):
    """Layer 0 an identity: the first cache slot belongs to layer 1, and cached == uncached decoding."""
    arch = full_arch(vocab=300, layers=3)
    from autocompress.ir import Block

    arch = arch.with_blocks((Block(None, None), *arch.blocks[1:]))
    model = random_decilm(decilm_config_from_architecture(arch, **GLOBALS), seed=2)
    ids = torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cached = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None)[0, 9:].tolist()
        seq = ids
        for _ in range(8):
            nxt = model(seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    assert cached == seq[0, 9:].tolist()


def test_a_tokenizer_without_a_class_gets_one_and_loads_without_the_model_code(tmp_path, hetero_checkpoint,
                                                                             tokenizer_dir):
    """A parent tokenizer_config.json that names no class would make transformers take the class
    from the model config (remote code for DeciLM); the export names the stock class."""
    import shutil

    from autocompress.export.writer import _copy_tokenizer

    src = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, src)
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg.pop("tokenizer_class", None)
    (src / "tokenizer_config.json").write_text(json.dumps(cfg))
    out = tmp_path / "out"
    shutil.copytree(hetero_checkpoint[0], out)
    _copy_tokenizer(src, out)
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    code = ("import sys\nfrom transformers import AutoTokenizer\n"
            "t = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=False)\n"
            "print(t('def f(x):')['input_ids'])\n")
    p = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Do you wish" not in p.stdout
    from transformers import AutoTokenizer

    assert json.loads(p.stdout.strip().splitlines()[-1]) == AutoTokenizer.from_pretrained(str(tokenizer_dir))(
        "def f(x):")["input_ids"]


def test_the_engine_trusts_an_export_s_code_only_as_written(hetero_checkpoint, tmp_path):
    # the measurement engine passes trust_remote_code=own_code(folder): our exports, untouched
    import shutil

    from autocompress.modeling.register import own_code

    folder, _ = hetero_checkpoint
    assert own_code(folder)
    edited = shutil.copytree(folder, tmp_path / "edited")
    with open(edited / "modeling_decilm.py", "a") as f:
        f.write("\n# changed after export\n")
    assert not own_code(edited)
