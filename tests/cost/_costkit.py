"""Test helpers: tiny shapes for hand-checked cost formulas: hidden 64, 4 query heads of 16, vocab 1000."""

from autocompress.ir import MLP, Architecture, Attention, Mamba2, MoE
from autocompress.lang.model import Target, Workload

D, H, HD, V = 64, 4, 16, 1000


def tiny(blocks, vocab=V, tied=True, **kw) -> Architecture:
    return Architecture("llama", vocab, D, H, HD, tied, tuple(blocks), **kw)


def attn(kv=1, window=None) -> Attention:
    return Attention(H, kv, HD, window)


def mlp(width=128, gated=True) -> MLP:
    return MLP(width, gated)


def mamba() -> Mamba2:
    return Mamba2(heads=4, head_dim=16, state_size=8, groups=1, conv_kernel=4)


def moe() -> MoE:
    return MoE(experts=8, top_k=2, expert_width=32)


def target(hw="h100-sxm", engine="vllm", w="bf16", kv="bf16", tp=1, mem=None) -> Target:
    return Target(hw, engine, w, kv, tp, mem)


def workload(c=1, mode="batch", i=100, o=10, h=0.0, name="w") -> Workload:
    return Workload(name, c, mode, i, o, h)
