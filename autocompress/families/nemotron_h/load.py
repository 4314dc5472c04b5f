"""Reading a NemotronH / NemotronH-Puzzle checkpoint: its tensor names, the forward's globals, ``load``.

The parent loader the importance, teacher and parent-quality stages run. It is a module apart
from the family's (``families.nemotron_h.family``: export, ``FAMILY``) because those stages' cache keys hash
the code they run (``families.hybrid.hybrid_family``): an edit of the export or the search
must not re-run an hour of importance and teacher outputs.
"""

from __future__ import annotations

from autocompress.families import checkpoint as ck
from autocompress.ir import MLP, Architecture, Attention, Block, Mamba2, MoE
from autocompress.nn.hybrid import HybridConfig, pn
from autocompress.nn.moe import Router
from autocompress.parents.hf_config import architecture_from_config

KIND = {Mamba2: "mamba", Attention: "attention", MLP: "mlp", MoE: "moe"}
HF_KIND = {"mamba": "linear_attention", "attention": "full_attention", "mlp": "mlp", "moe": "moe"}


def kind(b: Block) -> str:
    return KIND[type(b.mixer if b.mixer is not None else b.ffn)]


def hybrid_config(native: dict, arch: Architecture) -> HybridConfig:
    for key, why in (("moe_latent_size", "latent MoE projections are not in the functional forward"),
                     ("mlp_bias", "MLP biases are not in the functional forward"),
                     ("use_bias", "Mamba2 projection biases are not in the functional forward"),
                     ("attention_bias", "attention biases are not in the functional forward")):
        if native.get(key):
            raise NotImplementedError(f"{key} {native[key]!r}: {why}")
    if int(native.get("n_group", 1)) > 1:
        raise NotImplementedError(f"n_group {native['n_group']}: grouped expert routing (removing experts would "
                                  "unbalance the groups)")
    moe = next((b.ffn for b in arch.blocks if isinstance(b.ffn, MoE)), None)
    router = None if moe is None else Router("sigmoid", moe.top_k, bool(native.get("norm_topk_prob", True)),
                                             float(native.get("routed_scaling_factor", 1.0)))
    return HybridConfig(arch, float(native.get("layer_norm_epsilon", native.get("norm_eps", 1e-5))), None,
                        router=router, dt_min=float(native.get("time_step_min", 0.001)),
                        conv_bias=bool(native.get("use_conv_bias", True)), native=native)


def names(cfg: HybridConfig, prefix: str = "backbone") -> tuple[dict[str, str], dict[str, str]]:
    """(plain, experts) name maps (``families.checkpoint``): transformers' saved layout (``backbone.*``, per
    expert), which vLLM loads; layers are numbered among the present ones (removed ones dropped)."""
    A = cfg.arch
    plain = {"embed": f"{prefix}.embeddings.weight", "norm_f": f"{prefix}.norm_f.weight"}
    if not A.tie_embeddings:
        plain["lm_head"] = "lm_head.weight"
    experts = {}
    kept = [l for l, b in enumerate(A.blocks) if b.mixer is not None or b.ffn is not None]
    for j, l in enumerate(kept):
        b = A.blocks[l]
        p = f"{prefix}.layers.{j}."
        plain[pn(l, "mixer_norm" if b.mixer is not None else "ffn_norm")] = p + "norm.weight"
        k, m = kind(b), p + "mixer."
        if k == "mamba":
            for n in ("in_proj", "out_proj", "norm"):
                plain[pn(l, "ssm_norm" if n == "norm" else n)] = f"{m}{n}.weight"
            plain[pn(l, "conv_w")] = m + "conv1d.weight"
            if cfg.conv_bias:
                plain[pn(l, "conv_b")] = m + "conv1d.bias"
            for n in ("A_log", "D", "dt_bias"):
                plain[pn(l, n)] = m + n
        elif k == "attention":
            for n in "qkvo":
                plain[pn(l, n)] = f"{m}{n}_proj.weight"
        elif k == "mlp":
            plain[pn(l, "up")], plain[pn(l, "down")] = m + "up_proj.weight", m + "down_proj.weight"
        else:
            plain[pn(l, "router")], plain[pn(l, "router_bias")] = m + "gate.weight", m + "gate.e_score_correction_bias"
            experts[pn(l, "e_up")] = m + "experts.{e}.up_proj.weight"
            experts[pn(l, "e_down")] = m + "experts.{e}.down_proj.weight"
            if b.ffn.shared_experts:
                plain[pn(l, "s_up")] = m + "shared_experts.up_proj.weight"
                plain[pn(l, "s_down")] = m + "shared_experts.down_proj.weight"
    return plain, experts


def load(folder):
    """(canonical fp32 params, HybridConfig) of a NemotronH or NemotronH-Puzzle folder (per-expert or
    fused experts, ``backbone.*`` or ``model.*`` names)."""
    native, tensors = ck.read_folder(folder)
    arch = architecture_from_config(native)
    cfg = hybrid_config(native, arch)
    if any(k.startswith("model.") for k in tensors):  # transformers' in-memory names
        tensors = {("backbone." + k[6:] if k.startswith("model.") else k): v for k, v in tensors.items()}
    tensors = {k: (v.squeeze(1) if k.endswith("conv1d.weight") else v) for k, v in tensors.items()}
    if arch.tie_embeddings:
        tensors.pop("lm_head.weight", None)
    plain, experts = names(cfg)
    counts = {k: cfg.arch.blocks[int(k[1:].split(".")[0])].ffn.experts for k in experts}
    stacked = {k: v.replace(".{e}.", ".").removesuffix(".weight") for k, v in experts.items()}  # experts.up_proj
    fused = {k: (n, 0, tensors[n].shape[1]) for k, n in stacked.items() if n in tensors}
    return ck.to_canonical(tensors, plain, experts, counts, fused), cfg
