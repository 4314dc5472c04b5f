"""Tiny assets for the data / teacher / distill / quality tests: an offline tokenizer, tiny Llamas."""

from __future__ import annotations

from pathlib import Path

VOCAB = 320  # byte-level alphabet (256) + 2 specials + a few merges
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128


def build_tokenizer(out_dir: Path, vocab_size: int = VOCAB, bos: bool = False) -> Path:
    """Byte-level BPE trained offline on a few pydoc topics; ``len(tokenizer) == vocab_size``.
    ``bos``: every encoded text starts with ``<|bos|>``, as Gemma's tokenizer does."""
    import pydoc_data.topics as t
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
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
    tok.train_from_iterator(list(t.topics.values())[:20], trainer=trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>")
    assert len(fast) == vocab_size, len(fast)
    fast.save_pretrained(out_dir)
    return out_dir


def tiny_llama(seed: int = 0, vocab: int = VOCAB, std: float = 0.1):
    """A random 2-layer LlamaForCausalLM (hidden 64), fp32, eval mode, deterministic from ``seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, std)
    return model


def random_tokens(n: int, seq_len: int, vocab: int = VOCAB, seed: int = 0):
    import torch

    return torch.randint(0, vocab, (n, seq_len + 1), generator=torch.Generator().manual_seed(seed))


def state_hash(model) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def tiny_decilm(seed: int = 0, vocab: int = VOCAB):
    """A heterogeneous 2-layer DeciLMForCausalLM (KV heads 2 / 1, FFN widths 96 / removed)."""
    import torch

    from autocompress.export.decilm import decilm_config_from_architecture
    from autocompress.ir import MLP, Architecture, Attention, Block
    from autocompress.modeling.configuration_decilm import DeciLMConfig
    from autocompress.modeling.modeling_decilm import DeciLMForCausalLM

    head_dim = HIDDEN // HEADS
    blocks = (Block(Attention(HEADS, 2, head_dim), MLP(96)), Block(Attention(HEADS, 1, head_dim), None))
    arch = Architecture("llama", vocab, HIDDEN, HEADS, head_dim, False, blocks, max_position=256, name="tiny-decilm")
    cfg = decilm_config_from_architecture(arch, rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=0, eos_token_id=1)
    torch.manual_seed(seed)
    model = DeciLMForCausalLM(DeciLMConfig(**cfg)).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("layernorm.weight") and name != "model.norm.weight":
                p.normal_(0.0, 0.1)
    return model
