"""The families ``acc build`` compresses: a literal table, torch-free (``acc check`` reads it).

Each parent family (the IR's ``Architecture.family``: a config.json ``model_type`` or a GGUF
architecture) maps to one **build family**: the module that holds its torch side (functional
forward, importance, permutation, supernet, extraction, export; ``families.base.BuildFamily``)
and what its export format can express, which is what the search may vary (``limits``: every
axis with "per layer", "global" or "fixed" and the reason, printed in the check report and the
build log). ``NOT_BUILT`` lists the families ``acc check`` reads but ``acc build`` cannot
compress yet, with the reason: ``acc check`` warns at the spec's ``model`` line, and ``acc
build`` stops there with exit 2 before any work (``require_buildable``).

A new family adds one row here, its config reader's row in ``readers``, and one package under
``families/`` with that reader (``config``, torch-free) and a ``family`` module with a ``FAMILY``
object; ``tests/families/test_registry.py`` checks that the rows cover every family the parsers
accept, and that every module's ``FAMILY`` has the row's name. Generic code (the search space,
calibration) asks a row what it needs (``shared_writer``, ``attention_kept``), never a family's
name (``tests/families/test_family_names.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from autocompress.diagnostics import Diagnostic, SpecError
from autocompress.ir import MoE


@dataclass(frozen=True)
class KeptAttention:
    """Attention layers that the family's export, or the engine serving it, cannot do without."""

    layers: str  # "first": the first attention layer; "every": every attention layer
    why: str  # the derivation's reason
    engine: str | None = None  # the rule holds for this engine only (None: for every engine)


@dataclass(frozen=True)
class FamilyEntry:
    name: str  # the build family
    # the module (under ``autocompress.``) that defines ``FAMILY`` (a ``families.base.BuildFamily``);
    # written without the package prefix so that ``cache.code_digest`` of ``acc check``, which reads
    # this table but never runs a family's torch side, does not follow it
    module: str
    export: str  # the format ``acc build`` writes
    uniform: bool  # one size per axis for all layers, whole layers removed or kept: the uniform grid
    fixed_axes: tuple[str, ...]  # search axes (``lang.model.AXES``) this family cannot vary
    global_sizes: tuple[str, ...]  # one size for every layer, swept as variants: "mamba", "expert_width"
    limits: tuple[tuple[str, str, str], ...]  # (axis, "per layer" | "global" | "fixed", why): the build log
    # exported from the IR alone by the shared writer (``export.writer.export_architecture``: Llama when
    # homogeneous, DeciLM ``block_configs`` otherwise): vLLM's DeciLM loader needs layer 0's first
    # executed sub-block to be attention, and the search space's defaults are this format's (every axis
    # per layer), so its ``limits`` add nothing to the derivation
    shared_writer: bool = False
    kept_attention: tuple[KeptAttention, ...] = ()  # the first rule whose engine matches applies

    def attention_kept(self, engine: str) -> KeptAttention | None:
        """Which attention layers must stay when ``engine`` serves this family's export (None: none)."""
        return next((r for r in self.kept_attention if r.engine in (None, engine)), None)


LLAMA = FamilyEntry(
    "llama", "families.llama.family", "Llama (homogeneous) or DeciLM (nemotron-nas)", False, (), (), (
        ("hidden", "global", "one residual width in every format"),
        ("kv_heads, ffn, attention/FFN removal", "per layer", "DeciLM block_configs"),
    ), shared_writer=True)

_NATIVE_LIMITS = (
    ("hidden", "global", "one residual width in every format"),
    ("experts", "global (which experts: per layer)",
     "vLLM's mixtral.py / qwen2_moe.py / qwen3_moe.py build every layer from the global expert count"),
    ("expert width", "global", "one intermediate size for all experts of all layers in these configs"),
    ("kv_heads", "global", "num_key_value_heads is one value for all layers"),
    ("attention or FFN removal", "fixed", "the native formats have no per-layer no-op sub-block"),
    ("layer removal", "whole layers only", "fewer layers is the same format; half a layer is not"),
    ("shared expert width", "fixed", "not pruned in this version"),
)


def _native(export: str, fixed: dict[str, str]) -> FamilyEntry:
    """A native MoE format; ``fixed``: axis -> why this family cannot vary it (replaces its row)."""
    limits = tuple((a, "fixed", fixed[a]) if a in fixed else (a, scope, why) for a, scope, why in _NATIVE_LIMITS)
    return FamilyEntry("native-moe", "families.native_moe.family", f"the parent's own format ({export})", True,
                       tuple(fixed), ("expert_width",), limits)


MIXTRAL = _native("Mixtral", {})
QWEN2_MOE = _native("Qwen2-MoE", {"hidden": "vLLM's qwen2_moe.py takes head_dim = hidden_size / num_attention_heads, "
                                            "so a narrower hidden size would shrink every head"})
QWEN3_MOE = _native("Qwen3-MoE", {"kv_heads": "merging KV heads is not exact under Qwen3's per-head key norm"})

NEMOTRON_H = FamilyEntry(
    "nemotron_h", "families.nemotron_h.family", "NemotronH, or NemotronH-Puzzle (block_configs, remote code)",
    False, (), ("mamba", "expert_width"), (
        ("hidden", "global", "one residual width in every format"),
        ("mamba heads", "global (group-aware)", "vLLM's NemotronH shapes every Mamba2 layer and its state cache "
                                                "from the global config"),
        ("expert width", "global", "one width for all MoE layers in this version (Puzzle could express it per "
                                   "layer; the relaxation has one size variable per sub-block, the expert count)"),
        ("experts, kv_heads, mlp width, layer removal", "per layer",
         "Puzzle block_configs overrides, read by vLLM through get_nemotron_h_config_for_layer"),
        ("mamba layers, state / head_dim / groups, shared experts", "fixed", "not pruned in this version"),
    ), kept_attention=(
        KeptAttention("first", "an export without attention layers has no KV cache, which transformers' NemotronH "
                               "cache (and generate) cannot do without"),))

GEMMA3 = FamilyEntry(
    "gemma3", "families.gemma3.family", "Gemma 3 (homogeneous) or Gemma 3 with per_layer_config (remote code)", False,
    ("kv_heads",), (), (
        ("hidden", "global", "one residual width; the export rescales the tied embedding for sqrt(hidden_size)"),
        ("kv_heads", "fixed", "Gemma 3 270M and 1B have 1 KV head: there is nothing to merge"),
        ("mlp width, MLP removal", "per layer", "transformers' per_layer_config (intermediate_size, skip), served "
                                                "by vLLM's Transformers backend with our modeling code"),
        ("attention removal, layer removal", "per layer (transformers); fixed (vllm)",
         "vLLM's Transformers backend needs an attention module in every layer ('does not dispatch through the "
         "Transformers attention interface'), and its native gemma3.py has no per-layer fields"),
        ("layer 0 attention", "kept", "transformers' cache takes the sequence length from layer 0"),
    ), kept_attention=(
        KeptAttention("every", "engine vllm serves a heterogeneous Gemma 3 only through its Transformers backend, "
                               "which needs an attention module in every layer (so no attention or whole-layer "
                               "removal)", engine="vllm"),
        KeptAttention("first", "transformers' Gemma 3 cache takes the sequence length from layer 0")))

BUILD_FAMILIES: dict[str, FamilyEntry] = {
    "llama": LLAMA,
    "mistral": LLAMA,
    "nemotron-nas": LLAMA,
    "mixtral": MIXTRAL,
    "qwen2_moe": QWEN2_MOE,
    "qwen3_moe": QWEN3_MOE,
    "nemotron_h": NEMOTRON_H,  # also nemotron_h_puzzle configs: the IR family of both
    "gemma3_text": GEMMA3,
    "gemma3": GEMMA3,  # the GGUF architecture name (families/gemma3/config.py gives its IR the family gemma3_text)
}

# Parsed by ``acc check`` (``readers``), not compressed by ``acc build``.
NOT_BUILT: dict[str, str] = {
    "qwen2": "its q/k/v biases are not in the functional forward yet",
    "qwen3": "its q/k norms are not in the Llama forward yet",
}


# What a serving engine cannot run on a device class, by family and sub-block kind: seen on this
# host (tests/families/test_families_vllm.py pins it), never assumed. ``acc verify`` and ``acc
# profile`` say so instead of starting an engine that will crash.
ENGINE_GAPS: dict[tuple[str, str, str, str], str] = {
    ("nemotron_h", "moe", "vllm", "cpu"): "vLLM 0.32's CPU backend has no kernel for NemotronH's non-gated MoE experts "
                                          "(is_act_and_mul=False is supported only for CUDA, XPU and ROCm)",
}


def engine_gap(arch, engine: str, device_kind: str) -> str | None:
    """Why ``engine`` on a ``device_kind`` device cannot run ``arch`` (None when it can, as far as seen)."""
    kinds = {"moe" for b in arch.blocks if isinstance(b.ffn, MoE)}
    return next((why for (fam, kind, eng, dev), why in ENGINE_GAPS.items()
                 if fam == arch.family and kind in kinds and eng == engine and dev == device_kind), None)


def buildable_names() -> str:
    return ", ".join(sorted(BUILD_FAMILIES))


def entry(family: str) -> FamilyEntry | None:
    return BUILD_FAMILIES.get(family)


def uses_shared_writer(family: str) -> bool:
    """Whether ``acc build`` writes ``family``'s models with the shared writer (``FamilyEntry.shared_writer``)."""
    e = BUILD_FAMILIES.get(family)
    return e is not None and e.shared_writer


def not_buildable(family: str) -> str | None:
    """Why ``acc build`` cannot compress ``family`` (None when it can)."""
    if family in BUILD_FAMILIES:
        return None
    why = NOT_BUILT.get(family, "no build family is registered for it")
    return f"acc build cannot compress {family} parents yet ({why}); it compresses {buildable_names()}"


def family_warning(spec, family: str) -> Diagnostic | None:
    """``acc check``'s warning at the ``model`` line for a family it reads but cannot build."""
    why = not_buildable(family)
    if why is None:
        return None
    return Diagnostic(spec.parent.span, why, "acc check answers for this parent; acc build stops here",
                      "warning", "family-not-built")


def require_buildable(spec, family: str, spec_path: str, source: str | None) -> None:
    """``acc build``, before any work: ``SpecError`` (exit 2) at the ``model`` line unless it builds."""
    why = not_buildable(family)
    if why is not None:
        raise SpecError([Diagnostic(spec.parent.span, why, "acc check still answers feasibility for it",
                                    "error", "family-not-built")], spec_path, source)
