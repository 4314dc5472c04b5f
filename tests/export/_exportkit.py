"""Tiny assets for the export tests: an offline tokenizer, tiny architectures, seeded weights."""

from __future__ import annotations

from pathlib import Path

from autocompress.ir import MLP, Architecture, Attention, Block

# head_dim 32, not hidden/heads = 16: vLLM's CPU attention takes head sizes 32, 64, 80, ... only, and an
# explicit head_dim (as after hidden-size pruning) is a path worth covering anyway.
HIDDEN, HEADS, HEAD_DIM = 64, 4, 32
GLOBALS = {"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 0, "eos_token_id": 1}
PROMPTS = ["def parse(text):\n    return", "The for statement is used to iterate over"]


def _corpus() -> list[str]:
    import pydoc_data.topics as t  # English reference prose shipped with every Python

    return list(t.topics.values())[:60]


def build_tokenizer(out_dir: Path, vocab_size: int = 512) -> Path:
    """Byte-level BPE trained offline on pydoc topics; ``len(tokenizer) == vocab_size`` exactly."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|bos|>", "<|eos|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>")
    assert len(fast) == vocab_size, len(fast)
    assert fast.bos_token_id == GLOBALS["bos_token_id"] and fast.eos_token_id == GLOBALS["eos_token_id"]
    fast.save_pretrained(out_dir)
    return out_dir


def attn(kv: int) -> Attention:
    return Attention(q_heads=HEADS, kv_heads=kv, head_dim=HEAD_DIM)


def hetero_arch(vocab: int) -> Architecture:
    """6 layers: KV heads 2/-/1/4/-/2, FFN widths 96/128/-/64/-/160, layer 4 an identity."""
    blocks = (
        Block(attn(2), MLP(96)),
        Block(None, MLP(128)),
        Block(attn(1), None),
        Block(attn(4), MLP(64)),
        Block(None, None),
        Block(attn(2), MLP(160)),
    )
    return Architecture("llama", vocab, HIDDEN, HEADS, HEAD_DIM, False, blocks, max_position=256, name="tiny-hetero")


def full_arch(vocab: int, layers: int = 4, kv: int = 2, width: int = 128, tie: bool = False) -> Architecture:
    blocks = tuple(Block(attn(kv), MLP(width)) for _ in range(layers))
    return Architecture("llama", vocab, HIDDEN, HEADS, HEAD_DIM, tie, blocks, max_position=256, name="tiny-full")


def random_decilm(cfg: dict, seed: int = 0, std: float = 0.08):
    """A DeciLMForCausalLM with seeded weights, wide enough that greedy argmax is not a near-tie."""
    import torch

    from autocompress.modeling.configuration_decilm import DeciLMConfig
    from autocompress.modeling.modeling_decilm import DeciLMForCausalLM

    torch.manual_seed(seed)
    model = DeciLMForCausalLM(DeciLMConfig(**cfg)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, std)
    return model


def greedy_hf(model, tokenizer, prompts=PROMPTS, new_tokens: int = 12) -> list[list[int]]:
    """Greedy continuations with transformers, EOS ignored (to match vLLM's ignore_eos)."""
    import torch

    model.generation_config.eos_token_id = None
    out = []
    for p in prompts:
        ids = torch.tensor([tokenizer(p)["input_ids"]])
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
        out.append(gen[0, ids.shape[1]:].tolist())
    return out


def vllm_cpu_env(root: Path, kv_gib: int = 1) -> dict[str, str]:
    """Environment for a vLLM CPU process (facts.md, "vLLM on these CPUs"); set before vllm is imported.

    * VLLM_TARGET_DEVICE=cpu: platform detection otherwise relies on the ``vllm-cpu`` distribution name
      (``version("vllm-cpu") + "+cpu"``); a stray ``vllm`` distribution would make it pick CUDA paths.
    * VLLM_CPU_KVCACHE_SPACE (GiB, integer): the default, 0.92 x NUMA-node memory, fails here.
    * VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core runs in-process; start 25 s instead of 60 s,
      no spawn (which needs an ``if __name__ == "__main__"`` guard) and no forced kills at shutdown.
    * VLLM_CACHE_ROOT / HF_HOME inside ``root``; HF_HUB_OFFLINE: nothing is downloaded.
    """
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_"))}
    env.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE=str(kv_gib),
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_CACHE_ROOT=str(root / "vllm-cache"),
        HF_HOME=str(root / "hf"),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env
