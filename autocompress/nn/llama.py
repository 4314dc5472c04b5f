"""A functional Llama-family decoder over a dict of Hugging Face-named fp32 tensors.

One forward serves as the teacher (no masks), the importance probe (``tap``) and the weight-sharing
supernet (``Masks``). Weight names are transformers' ``LlamaForCausalLM`` names, which are also what
the DeciLM export and vLLM's loader use::

    model.embed_tokens.weight, model.norm.weight, lm_head.weight (absent when tied)
    model.layers.{i}.input_layernorm.weight, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight
    model.layers.{i}.post_attention_layernorm.weight, model.layers.{i}.mlp.{gate,up,down}_proj.weight

Covered: Llama / SmolLM2 (default RoPE), Mistral (optional sliding window) and DeciLM-shaped parents
(per-layer KV heads and FFN widths, removed halves). Not covered (``from_hf`` refuses them): RoPE
scaling, attention / MLP biases, MoE and Mamba mixers.

Masks (the supernet's semantics; ``autocompress.search.supernet`` builds them from choice probabilities):

* ``hidden`` (d,) multiplies the residual stream after the embedding and every sub-block output, and
  RMSNorm divides the sum of squares by ``hidden_count`` instead of d. With a 0/1 prefix mask of d'
  ones and count d' this is exactly a model of width d' (pruned channels stay zero, linears see zeros
  in the pruned inputs, norms average over the kept channels).
* ``ffn[l]`` (I,) multiplies the FFN intermediate act(gate) * up channel-wise before down_proj; the
  output is linear in it, so a probability-weighted sum of prefix indicators gives exactly the
  probability-weighted mixture of the narrower FFNs.
* ``attn[l]``: options (weight, pool) whose attention outputs (before o_proj, which is linear) are
  summed with their weights; ``pool`` (k, K) mean-pools the layer's K KV heads into k (Minitron).
  RoPE rotates every head alike, so pooling rotated keys equals rotating pooled projections.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from autocompress.ir import MLP, Architecture, Attention, Block
from autocompress.parents.hf_config import ffn_mult_to_intermediate_size

Tap = Callable[..., None]

_ACT = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu,
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


def param_name(layer: int | None, name: str) -> str:
    """``param_name(3, "mlp.up_proj")`` -> ``model.layers.3.mlp.up_proj.weight``; layer None: top level."""
    return f"model.{name}.weight" if layer is None else f"model.layers.{layer}.{name}.weight"


@dataclass(frozen=True)
class LlamaConfig:
    """What the functional forward needs; per-layer ``kv_heads`` / ``ffn_widths`` (None = removed)."""

    vocab_size: int
    hidden_size: int
    num_heads: int
    head_dim: int
    kv_heads: tuple[int | None, ...]
    ffn_widths: tuple[int | None, ...]
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = False
    hidden_act: str = "silu"
    sliding_window: int | None = None
    max_position: int = 2048
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    family: str = "llama"

    def __post_init__(self) -> None:
        if len(self.kv_heads) != len(self.ffn_widths):
            raise ValueError("kv_heads and ffn_widths need one entry per layer")
        for k in self.kv_heads:
            if k is not None and self.num_heads % k:
                raise ValueError(f"kv heads {k} must divide {self.num_heads} query heads")
        if self.hidden_act not in _ACT:
            raise NotImplementedError(f"activation {self.hidden_act!r}; supported: {sorted(_ACT)}")

    @property
    def num_layers(self) -> int:
        return len(self.kv_heads)

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> "LlamaConfig":
        """From a ``config.json`` dict: llama, mistral (SmolLM2 is llama) and nemotron-nas (DeciLM)."""
        c = dict(config)
        mt = c.get("model_type")
        if mt not in ("llama", "mistral", "nemotron-nas"):
            raise NotImplementedError(f"model_type {mt!r}: the functional forward covers llama, mistral, nemotron-nas")
        if c.get("attention_bias") or c.get("mlp_bias"):
            raise NotImplementedError("attention / MLP biases are not supported by the functional forward")
        rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
        rtype = rope.get("rope_type", rope.get("type", "default"))
        if rtype != "default":
            raise NotImplementedError(f"RoPE type {rtype!r} (only the default, unscaled RoPE)")
        theta = float(rope.get("rope_theta", c.get("rope_theta", 10000.0)))
        d, heads, layers = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
        if mt == "nemotron-nas":
            kv, widths = [], []
            for b in c["block_configs"]:
                a, f = b["attention"], b["ffn"]
                if a.get("replace_with_linear") or f.get("replace_with_linear"):
                    raise NotImplementedError("replace_with_linear blocks")
                kv.append(None if a.get("no_op") else heads // a["n_heads_in_group"])
                if f.get("no_op"):
                    widths.append(None)
                elif f.get("intermediate_size") is not None:
                    widths.append(int(f["intermediate_size"]))
                else:
                    widths.append(ffn_mult_to_intermediate_size(f["ffn_mult"], d))
        else:
            kv = [c.get("num_key_value_heads") or heads] * layers
            widths = [c["intermediate_size"]] * layers
        window = c.get("sliding_window") if mt == "mistral" else None
        return cls(
            vocab_size=c["vocab_size"], hidden_size=d, num_heads=heads,
            head_dim=c.get("head_dim") or d // heads, kv_heads=tuple(kv), ffn_widths=tuple(widths),
            rms_norm_eps=float(c.get("rms_norm_eps", 1e-5)), rope_theta=theta,
            tie_embeddings=bool(c.get("tie_word_embeddings", False)), hidden_act=c.get("hidden_act", "silu"),
            sliding_window=window, max_position=c.get("max_position_embeddings", 2048),
            bos_token_id=c.get("bos_token_id"), eos_token_id=c.get("eos_token_id"),
            pad_token_id=c.get("pad_token_id"), family=mt,
        )

    def architecture(self, name: str = "") -> Architecture:
        blocks = tuple(
            Block(None if k is None else Attention(self.num_heads, k, self.head_dim, self.sliding_window),
                  None if w is None else MLP(w, True, self.hidden_act))
            for k, w in zip(self.kv_heads, self.ffn_widths)
        )
        return Architecture(self.family, self.vocab_size, self.hidden_size, self.num_heads, self.head_dim,
                            self.tie_embeddings, blocks, self.max_position, name)

    def llama_globals(self) -> dict[str, Any]:
        """The keyword globals ``autocompress.export.decilm`` takes besides the Architecture."""
        return {"rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta, "hidden_act": self.hidden_act,
                "bos_token_id": self.bos_token_id, "eos_token_id": self.eos_token_id,
                "pad_token_id": self.pad_token_id, "max_position_embeddings": self.max_position}


def load_llama(folder: str | Path) -> tuple[dict[str, torch.Tensor], LlamaConfig]:
    """(fp32 params, config) of a safetensors HF folder (single or sharded)."""
    folder = Path(folder)
    cfg = LlamaConfig.from_hf(json.loads((folder / "config.json").read_text()))
    params: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        params.update({k: v.float() for k, v in load_file(str(f)).items()})
    if cfg.tie_embeddings:
        params.pop("lm_head.weight", None)
    return params, cfg


# ---- pieces -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttnOption:
    weight: torch.Tensor | float  # scalar mixing weight
    pool: torch.Tensor | None  # (k, K) pooling of the layer's KV heads; None = keep them


@dataclass(frozen=True)
class Masks:
    """Optional supernet masks (module docstring). A per-layer None leaves that sub-block as it is;
    an empty ``attn[l]`` tuple removes the attention output."""

    hidden: torch.Tensor | None = None  # (d,)
    hidden_count: torch.Tensor | float | None = None  # (expected) number of kept hidden channels
    ffn: tuple[torch.Tensor | None, ...] | None = None  # per layer (I_l,)
    attn: tuple[tuple[AttnOption, ...] | None, ...] | None = None  # per layer


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, count=None) -> torch.Tensor:
    """HF LlamaRMSNorm; ``count``: divide the sum of squares by it (masked hidden) instead of d."""
    ss = x.pow(2).mean(-1, keepdim=True) if count is None else x.pow(2).sum(-1, keepdim=True) / count
    return w * (x * torch.rsqrt(ss + eps))


def rope_tables(seq: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (seq, head_dim) of HF's default RoPE (inv_freq over even dims, halves concatenated)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    freqs = torch.arange(seq, dtype=torch.float32, device=device)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's rotary embedding of ``x`` (..., T, hd) with ``rope_tables``' cos and sin (halves rotated)."""
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def causal_attention(q, k, v, window: int | None) -> torch.Tensor:
    """Causal scaled dot-product attention (grouped KV heads), within a sliding ``window`` if given."""
    T = q.shape[-2]
    if window is None or window >= T:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    i = torch.arange(T, device=q.device)
    allowed = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)  # HF: q - kv < window
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)


def pool_kv(x: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """(B, K, T, hd) -> (B, k, T, hd) with ``pool`` (k, K)."""
    return torch.einsum("jk,bktd->bjtd", pool, x)


def attention_heads(params, cfg: LlamaConfig, i: int, h: torch.Tensor, cos, sin,
                    options: tuple[AttnOption, ...] | None = None) -> torch.Tensor | None:
    """Per-head attention outputs (B, T, H, hd) before o_proj; None when no option contributes."""
    B, T, _ = h.shape
    H, K, hd = cfg.num_heads, cfg.kv_heads[i], cfg.head_dim
    q = (h @ params[param_name(i, "self_attn.q_proj")].T).view(B, T, H, hd).transpose(1, 2)
    k = (h @ params[param_name(i, "self_attn.k_proj")].T).view(B, T, K, hd).transpose(1, 2)
    v = (h @ params[param_name(i, "self_attn.v_proj")].T).view(B, T, K, hd).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    if options is None:
        out = causal_attention(q, k, v, cfg.sliding_window)
    else:
        out = None
        for opt in options:
            ko, vo = (k, v) if opt.pool is None else (pool_kv(k, opt.pool), pool_kv(v, opt.pool))
            o = opt.weight * causal_attention(q, ko, vo, cfg.sliding_window)
            out = o if out is None else out + o
        if out is None:
            return None
    return out.transpose(1, 2)


# ---- the forward ---------------------------------------------------------------------------------------
def _hard_prefix(mask: torch.Tensor | None) -> int | None:
    """k when ``mask`` is k ones then zeros and carries no gradient (a discrete choice), else None."""
    if mask is None or mask.requires_grad:
        return None
    k = int((mask != 0).sum())
    return k if bool((mask[:k] == 1).all()) else None


def forward(params: Mapping[str, torch.Tensor], cfg: LlamaConfig, input_ids: torch.Tensor,
            masks: Masks | None = None, tap: Tap | None = None, return_hidden: bool = False,
            start: tuple[int, torch.Tensor] | None = None) -> torch.Tensor:
    """Logits (B, T, V) for ``input_ids`` (B, T), or the final normed hidden states with ``return_hidden``.

    ``start=(l, x)``: resume at layer l from the residual stream x entering it (as a ``"block"``
    tap saw it), skipping the layers before: the measured search scores many variants that differ
    from one model only from some layer on. A hard FFN mask (no gradient, a prefix of ones) runs
    the sliced FFN, and an all-zero one skips it: same result, the pruned model's cost.

    ``tap(event, layer, *tensors)`` observes activations (importance): ``"norm", l, y`` for every
    RMSNorm output (l = -1: final norm); ``"heads", l, (B,T,H,hd)``; ``"ffn_act", l, (B,T,I)``;
    ``"attn"`` / ``"ffn"`` / ``"block", l, before, after`` for residual branches and whole layers.
    """
    m = masks or Masks()
    hm, count = m.hidden, m.hidden_count
    eps = cfg.rms_norm_eps
    first, x = start if start is not None else (0, params["model.embed_tokens.weight"][input_ids])
    if hm is not None and start is None:
        x = x * hm
    cos, sin = rope_tables(input_ids.shape[1], cfg.head_dim, cfg.rope_theta, x.device)
    act = _ACT[cfg.hidden_act]
    for i in range(first, cfg.num_layers):
        x_in = x
        if cfg.kv_heads[i] is not None:
            h = rms_norm(x, params[param_name(i, "input_layernorm")], eps, count)
            if tap:
                tap("norm", i, h)
            heads = attention_heads(params, cfg, i, h, cos, sin, None if m.attn is None else m.attn[i])
            if heads is not None:
                if tap:
                    tap("heads", i, heads)
                a = heads.flatten(2) @ params[param_name(i, "self_attn.o_proj")].T
                if hm is not None:
                    a = a * hm
                x_new = x + a
                if tap:
                    tap("attn", i, x, x_new)
                x = x_new
        cw = None if m.ffn is None else m.ffn[i]
        k = _hard_prefix(cw)
        if cfg.ffn_widths[i] is not None and k != 0:
            h = rms_norm(x, params[param_name(i, "post_attention_layernorm")], eps, count)
            if tap:
                tap("norm", i, h)
            gate, up, down = (params[param_name(i, f"mlp.{n}")] for n in ("gate_proj", "up_proj", "down_proj"))
            if k is not None:
                gate, up, down, cw = gate[:k], up[:k], down[:, :k], None
            z = act(h @ gate.T) * (h @ up.T)
            if tap:
                tap("ffn_act", i, z)
            if cw is not None:
                z = z * cw
            f = z @ down.T
            if hm is not None:
                f = f * hm
            x_new = x + f
            if tap:
                tap("ffn", i, x, x_new)
            x = x_new
        if tap:
            tap("block", i, x_in, x)
    h = rms_norm(x, params["model.norm.weight"], eps, count)
    if tap:
        tap("norm", -1, h)
    if return_hidden:
        return h
    head = params["model.embed_tokens.weight"] if cfg.tie_embeddings else params["lm_head.weight"]
    return h @ head.T


__all__ = ["AttnOption", "LlamaConfig", "Masks", "attention_heads", "forward", "load_llama", "param_name",
           "pool_kv", "rms_norm", "rope_tables"]
