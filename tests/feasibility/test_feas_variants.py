"""Global sizes as variants (Mamba2 heads, expert width) and the per-family search spaces."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from autocompress.feasibility.objective import prior_importance
from autocompress.feasibility.variants import Variant, apply, assess_variants, parent_variant
from autocompress.ir import Attention, Mamba2, MoE
from autocompress.lang.api import parse_spec
from autocompress.parents.hf_config import architecture_from_config
from autocompress.plan.derive import derive
from autocompress.plan.options import layer_options
from autocompress.plan.space import derive_space

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
NANO = architecture_from_config(json.loads((CONFIGS / "nemotron-3-nano-30b-a3b.json").read_text()))
MIXTRAL = architecture_from_config(json.loads((CONFIGS / "mixtral-8x7b-v0.1.json").read_text()))
QWEN3 = architecture_from_config(json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text()))
LLAMA = architecture_from_config(json.loads((CONFIGS / "llama-3.1-70b.json").read_text()))
SPEC = """model "llama-3.1-70b.json"
target {{
  hardware  {hw}
  engine    vllm
  precision bf16
}}
workload agent {{
  concurrency {c}
  input       16K tokens
  output      1K tokens
  tpot <= {tpot} ms
}}
"""


def _assess(parent, hw="l40s", c=8, tpot=25):
    spec = parse_spec(SPEC.format(hw=hw, c=c, tpot=tpot), base_dir=str(CONFIGS))
    d = derive(spec, parent)
    return assess_variants(spec, parent, d.profile, d.device, d.space, prior_importance(parent), d.limits), d


def test_family_spaces_follow_their_export_formats():
    nano = derive_space(NANO, "vllm", "gpu")
    assert nano.mamba_heads == (64, 48, 32) and nano.expert_widths == (1856, 1408, 896) and not nano.uniform
    assert nano.kept_attention == (5,) and not nano.first_attention_fixed and "mamba" in nano.axes
    opts = layer_options(NANO, nano)
    assert opts.ffn[1][0] == 0 and opts.ffn[1][-1] == 128 and 8 in opts.ffn[1]  # per-layer expert counts
    assert opts.attn[0] == () and not opts.attn_removable[5] and opts.attn_removable[12]
    mix = derive_space(MIXTRAL, "vllm", "gpu")
    assert mix.uniform and mix.mamba_heads == () and mix.expert_widths[0] == 14336
    q3 = derive_space(QWEN3, "vllm", "gpu")
    assert "kv_heads" not in q3.axes and q3.kv_choices == (4,)
    assert any(r[0] == "native-moe: kv_heads" and r[1] == "fixed" for r in q3.derivation)
    llama = derive_space(LLAMA, "vllm", "gpu")  # unchanged: no family rows, layer 0's attention fixed
    assert llama.first_attention_fixed and not llama.uniform and not any(":" in r[0] for r in llama.derivation)


def test_for_variant_scores_against_the_parent():
    imp = prior_importance(NANO)
    v = apply(NANO, Variant(48, 896))
    assert isinstance(v.blocks[0].mixer, Mamba2) and v.blocks[0].mixer.heads == 48
    assert v.blocks[1].ffn.expert_width == 896 and parent_variant(v) == Variant(48, 896)
    arch = v.with_blocks(tuple(b if not isinstance(b.ffn, MoE) else type(b)(None, replace(b.ffn, experts=64))
                               for b in v.blocks))
    scaled = imp.for_variant(NANO, v)
    assert scaled.score(arch, v) == pytest.approx(imp.score(arch, NANO), rel=1e-12)
    assert imp.score(v, NANO) < imp.score(NANO, NANO) == pytest.approx(1.0)


def test_the_sweep_picks_the_most_important_feasible_variant():
    swept, _ = _assess(NANO)
    rows = swept.rows
    assert rows[0]["mamba_heads"] == 64 and rows[0]["expert_width"] == 1856  # the parent's sizes first
    feasible = [r for r in rows if r["verdict"] == "feasible"]
    chosen = [r for r in rows if r["chosen"]]
    assert len(chosen) == 1 and chosen[0]["importance_kept"] == max(r["importance_kept"] for r in feasible)
    start = swept.feasibility.start.evaluation.arch
    assert {b.mixer.heads for b in start.blocks if isinstance(b.mixer, Mamba2)} == {swept.variant.mamba_heads}
    assert swept.feasibility.parent.arch == NANO  # the report's parent column is the real parent


def test_infeasible_only_when_the_smallest_variant_is_proved_so():
    swept, _ = _assess(NANO, tpot=0.5)
    assert swept.feasibility.verdict == "infeasible"
    assert swept.variant == Variant(32, 896) and "smallest global sizes" in swept.feasibility.reason


def test_a_parent_without_global_sizes_is_assessed_as_before():
    from autocompress.feasibility.assess import assess

    spec = parse_spec(SPEC.format(hw="h100-sxm", c=1, tpot=20), base_dir=str(CONFIGS))
    d = derive(spec, LLAMA)
    swept = assess_variants(spec, LLAMA, d.profile, d.device, d.space, prior_importance(LLAMA), d.limits)
    plain = assess(spec, LLAMA, d.profile, d.device, d.space, prior_importance(LLAMA), d.limits)
    assert swept.rows == () and swept.parent == LLAMA
    assert swept.feasibility.start.evaluation.arch == plain.start.evaluation.arch
    assert all(isinstance(b.mixer, Attention) for b in LLAMA.blocks)
