"""Tiny random Llama parents for the build-stage tests (importance, supernet, extraction).

Sizes follow the test budget: 2-4 layers, hidden 64, 4 query heads of head_dim 16, 2 KV heads, FFN 128,
vocab 320 (a byte-level BPE needs 256 bytes + specials). Weights are wider than transformers' init
(std 0.08, norms around 1) so outputs are far from uniform and comparisons mean something. The offline
tokenizer comes from the export tests' kit.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

VOCAB, HIDDEN, HEADS, KV, HEAD_DIM, FFN = 320, 64, 4, 2, 16, 128


def _exportkit():
    """tests/export/_exportkit.py (offline BPE tokenizer), importable whether or not pytest put it on the path."""
    if "_exportkit" in sys.modules:
        return sys.modules["_exportkit"]
    path = Path(__file__).resolve().parent.parent / "export" / "_exportkit.py"
    spec = importlib.util.spec_from_file_location("_exportkit", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_exportkit"] = mod
    spec.loader.exec_module(mod)
    return mod


def hf_config(layers: int = 3, tie: bool = False, kind: str = "llama", **over):
    from transformers import LlamaConfig, MistralConfig

    kw = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=layers, num_attention_heads=HEADS,
              num_key_value_heads=KV, head_dim=HEAD_DIM, intermediate_size=FFN, rms_norm_eps=1e-5,
              max_position_embeddings=256, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=1,
              pad_token_id=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    kw.update(over)
    return (MistralConfig if kind == "mistral" else LlamaConfig)(**kw)


def random_llama(layers: int = 3, tie: bool = False, seed: int = 0, std: float = 0.08, kind: str = "llama",
                 **over):
    """A seeded ``LlamaForCausalLM`` (or Mistral) in eval mode, eager attention-free of caches."""
    from transformers import LlamaForCausalLM, MistralForCausalLM

    torch.manual_seed(seed)
    cls = MistralForCausalLM if kind == "mistral" else LlamaForCausalLM
    model = cls(hf_config(layers, tie, kind, **over)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, std)
    return model


def params_of(model) -> dict[str, torch.Tensor]:
    """HF-named fp32 tensors of a transformers model (tied lm_head dropped)."""
    sd = {k: v.detach().clone().float() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    return sd


def config_of(model):
    """The canonical forward's ``HybridConfig`` of a transformers Llama / Mistral model."""
    from autocompress.families.llama.load import llama_config

    return llama_config(model.config.to_dict())


def canonical_of(model) -> dict[str, torch.Tensor]:
    """The canonical (``nn.hybrid``) fp32 weights of a transformers Llama / Mistral model."""
    from autocompress.families import checkpoint as ck
    from autocompress.families.llama.load import names

    return ck.to_canonical(params_of(model), names(config_of(model).arch), {}, {})


def save_parent(model, out_dir: Path, tokenizer: bool = False) -> Path:
    """Write ``model`` as an HF safetensors folder (optionally with the offline tokenizer)."""
    model.save_pretrained(out_dir)
    if tokenizer:
        _exportkit().build_tokenizer(out_dir, vocab_size=VOCAB)
    return out_dir


def batches(n: int = 3, batch: int = 2, seq: int = 24, seed: int = 1, vocab: int = VOCAB) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, seq), generator=g) for _ in range(n)]
