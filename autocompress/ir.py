"""Architecture IR: a typed, frozen description of a decoder-only language model.

Every later stage (cost model, feasibility, search, extraction, export) speaks this IR, so it
describes what a *serving engine* sees, not how a training framework lays out modules:

* a model is a stack of ``Block``s; each block has an optional token **mixer** (attention or a
  Mamba2 SSM) and an optional **ffn** (dense MLP or MoE). ``None`` means the sub-block is removed
  (DeciLM ``no_op``) or, for hybrid models such as NemotronH, that the layer only has the other
  half. A block with both ``None`` is an identity layer.
* query heads and head_dim are global (as in the DeciLM format that stock vLLM serves); KV heads,
  FFN width and MoE sizes are per block.

Nothing here loads weights; constructors from Hugging Face configs and GGUF metadata live in
``autocompress.parents``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Union


@dataclass(frozen=True)
class Attention:
    """Multi-head / grouped-query attention. ``kv_heads`` must divide ``q_heads``."""

    q_heads: int
    kv_heads: int
    head_dim: int
    sliding_window: int | None = None  # Gemma3 / Mistral local layers: KV kept for this many tokens

    def __post_init__(self) -> None:
        if self.q_heads <= 0 or self.kv_heads <= 0 or self.head_dim <= 0:
            raise ValueError(f"attention sizes must be positive: {self}")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"kv_heads {self.kv_heads} must divide q_heads {self.q_heads}")

    def params(self, hidden: int) -> int:
        q = hidden * self.q_heads * self.head_dim
        kv = 2 * hidden * self.kv_heads * self.head_dim
        o = self.q_heads * self.head_dim * hidden
        return q + kv + o


@dataclass(frozen=True)
class Mamba2:
    """Mamba2 mixer (NemotronH). d_inner = heads * head_dim."""

    heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int

    def __post_init__(self) -> None:
        if min(self.heads, self.head_dim, self.state_size, self.groups, self.conv_kernel) <= 0:
            raise ValueError(f"mamba sizes must be positive: {self}")

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim

    def params(self, hidden: int) -> int:
        # in_proj: d -> [z, x, B, C, dt] = 2*d_in + 2*G*N + H (Megatron / HF Mamba2 layout);
        # conv over x,B,C; out_proj d_in -> d; A, D, dt_bias per head; gated norm over d_in.
        in_proj = hidden * (2 * self.d_inner + 2 * self.groups * self.state_size + self.heads)
        conv_ch = self.d_inner + 2 * self.groups * self.state_size
        conv = conv_ch * self.conv_kernel + conv_ch
        out = self.d_inner * hidden
        return in_proj + conv + out + 3 * self.heads + self.d_inner


@dataclass(frozen=True)
class MLP:
    """Dense feed-forward. Gated (SwiGLU/GeGLU) has 3 matrices, non-gated (relu2) has 2."""

    width: int
    gated: bool = True
    activation: str = "silu"

    def __post_init__(self) -> None:
        if self.width <= 0:
            raise ValueError(f"MLP width must be positive: {self}")

    def params(self, hidden: int) -> int:
        return (3 if self.gated else 2) * hidden * self.width


@dataclass(frozen=True)
class MoE:
    """Routed mixture of experts with optional always-on shared experts."""

    experts: int
    top_k: int
    expert_width: int
    shared_experts: int = 0
    shared_width: int = 0
    gated: bool = True
    activation: str = "silu"

    def __post_init__(self) -> None:
        if self.experts <= 0 or self.expert_width <= 0 or not 0 < self.top_k <= self.experts:
            raise ValueError(f"invalid MoE sizes: {self}")
        if self.shared_experts < 0 or (self.shared_experts > 0) != (self.shared_width > 0):
            raise ValueError(f"shared experts need a width and vice versa: {self}")

    @property
    def mats(self) -> int:
        return 3 if self.gated else 2

    def expert_params(self, hidden: int) -> int:
        return self.mats * hidden * self.expert_width

    def shared_params(self, hidden: int) -> int:
        return self.shared_experts * self.mats * hidden * self.shared_width

    def params(self, hidden: int) -> int:
        router = hidden * self.experts
        return self.experts * self.expert_params(hidden) + self.shared_params(hidden) + router

    def active_params(self, hidden: int) -> int:
        return self.top_k * self.expert_params(hidden) + self.shared_params(hidden) + hidden * self.experts


Mixer = Union[Attention, Mamba2]
FFN = Union[MLP, MoE]


@dataclass(frozen=True)
class Block:
    mixer: Mixer | None
    ffn: FFN | None

    def params(self, hidden: int) -> int:
        n = 0
        if self.mixer is not None:
            n += self.mixer.params(hidden) + hidden  # + pre-norm weight
        if self.ffn is not None:
            n += self.ffn.params(hidden) + hidden
        return n

    @property
    def attention(self) -> Attention | None:
        return self.mixer if isinstance(self.mixer, Attention) else None

    @property
    def mamba(self) -> Mamba2 | None:
        return self.mixer if isinstance(self.mixer, Mamba2) else None


@dataclass(frozen=True)
class Architecture:
    """A whole decoder. ``family`` names the source format (``llama``, ``nemotron_h`` ...)."""

    family: str
    vocab_size: int
    hidden_size: int
    num_heads: int
    head_dim: int
    tie_embeddings: bool
    blocks: tuple[Block, ...]
    max_position: int = 8192
    name: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)
    # Gemma 3: a norm after each sub-block as well as before it ("sandwich"), and a norm of every
    # query and key head (head_dim weights each); shapes only, counted in params (a test pins the
    # published 268,098,176 of Gemma 3 270M)
    post_norms: bool = False
    qk_norm: bool = False

    def __post_init__(self) -> None:
        if self.vocab_size <= 0 or self.hidden_size <= 0 or not self.blocks:
            raise ValueError("architecture needs a vocabulary, a hidden size and at least one block")
        for i, b in enumerate(self.blocks):
            a = b.attention
            if a is not None and (a.q_heads != self.num_heads or a.head_dim != self.head_dim):
                raise ValueError(f"block {i}: query heads and head_dim are global in this IR")

    # ---- derived sizes (used by the cost model and the reports) -------------------------
    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    def embedding_params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        return emb if self.tie_embeddings else 2 * emb

    def extra_norm_params(self, b: Block) -> int:
        """Norm weights of ``b`` beyond its pre-norms: post-norms and q/k head norms (Gemma 3)."""
        n = self.hidden_size * ((b.mixer is not None) + (b.ffn is not None)) if self.post_norms else 0
        return n + (2 * b.attention.head_dim if self.qk_norm and b.attention is not None else 0)

    def params(self) -> int:
        """Total parameters: embeddings (+ untied head), blocks, final norm."""
        return (self.embedding_params() + sum(b.params(self.hidden_size) + self.extra_norm_params(b)
                                              for b in self.blocks) + self.hidden_size)

    def active_params(self) -> int:
        """Parameters touched per token (MoE counts top-k routed experts only)."""
        d = self.hidden_size
        n = self.embedding_params() + d
        for b in self.blocks:
            n += self.extra_norm_params(b)
            if b.mixer is not None:
                n += b.mixer.params(d) + d
            if isinstance(b.ffn, MoE):
                n += b.ffn.active_params(d) + d
            elif b.ffn is not None:
                n += b.ffn.params(d) + d
        return n

    def attention_layers(self) -> list[int]:
        return [i for i, b in enumerate(self.blocks) if b.attention is not None]

    def kv_elements_per_token(self) -> int:
        """K and V elements cached per token over all attention layers (before sliding windows)."""
        return sum(2 * b.attention.kv_heads * b.attention.head_dim for b in self.blocks if b.attention)

    def is_homogeneous(self) -> bool:
        return len(set(self.blocks)) == 1

    def with_blocks(self, blocks: tuple[Block, ...], **changes) -> "Architecture":
        return replace(self, blocks=tuple(blocks), **changes)

    def summary(self) -> str:
        kinds = {
            "attn": sum(1 for b in self.blocks if b.attention),
            "mamba": sum(1 for b in self.blocks if b.mamba),
            "mlp": sum(1 for b in self.blocks if isinstance(b.ffn, MLP)),
            "moe": sum(1 for b in self.blocks if isinstance(b.ffn, MoE)),
        }
        parts = ", ".join(f"{v} {k}" for k, v in kinds.items() if v)
        return (f"{self.name or self.family}: {self.num_layers} layers ({parts}), hidden {self.hidden_size}, "
                f"{self.num_heads} heads x {self.head_dim}, vocab {self.vocab_size}, "
                f"{self.params() / 1e6:,.1f}M params")


# ---- serialization (reports, stage outputs, cache keys) ----------------------------------------------

def arch_to_dict(arch: Architecture) -> dict:
    """The per-layer shape of ``arch`` as plain JSON: what reports print, stages store and the
    distillation key hashes. Sizes only; ``arch_from_dict`` restores the rest from the parent."""
    layers = []
    for b in arch.blocks:
        m, f = b.mixer, b.ffn
        mixer = ({"kind": "attention", "kv_heads": m.kv_heads} if isinstance(m, Attention) else
                 {"kind": "mamba2", "heads": m.heads} if isinstance(m, Mamba2) else None)
        ffn = ({"kind": "mlp", "width": f.width} if isinstance(f, MLP) else
               {"kind": "moe", "experts": f.experts, "expert_width": f.expert_width} if isinstance(f, MoE) else None)
        layers.append({"mixer": mixer, "ffn": ffn})
    return {"hidden": arch.hidden_size, "layers": layers, "params": arch.params(),
            "active_params": arch.active_params(), "homogeneous": arch.is_homogeneous()}


def arch_from_dict(d: dict, parent: Architecture) -> Architecture:
    """Inverse of ``arch_to_dict``: the parent's blocks with the stored sizes (a removed sub-block
    is ``None``). Raises ValueError when the dict does not fit the parent."""
    if len(d["layers"]) != parent.num_layers:
        raise ValueError(f"{len(d['layers'])} layers stored, the parent has {parent.num_layers}")
    blocks = []
    for i, (layer, p) in enumerate(zip(d["layers"], parent.blocks)):
        m, f = layer["mixer"], layer["ffn"]
        if m is None:
            mixer = None
        elif m["kind"] == "attention" and isinstance(p.mixer, Attention):
            mixer = replace(p.mixer, kv_heads=m["kv_heads"])
        elif m["kind"] == "mamba2" and isinstance(p.mixer, Mamba2):
            mixer = replace(p.mixer, heads=m["heads"])
        else:
            raise ValueError(f"layer {i}: a {m['kind']} mixer stored, the parent has {type(p.mixer).__name__}")
        if f is None:
            ffn = None
        elif f["kind"] == "mlp" and isinstance(p.ffn, MLP):
            ffn = replace(p.ffn, width=f["width"])
        elif f["kind"] == "moe" and isinstance(p.ffn, MoE):
            ffn = replace(p.ffn, experts=f["experts"], expert_width=f["expert_width"])
        else:
            raise ValueError(f"layer {i}: a {f['kind']} FFN stored, the parent has {type(p.ffn).__name__}")
        blocks.append(Block(mixer, ffn))
    return parent.with_blocks(tuple(blocks), hidden_size=d["hidden"])
