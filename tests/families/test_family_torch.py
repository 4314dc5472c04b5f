"""The torch side of the MoE and hybrid families on tiny random parents saved by transformers:

* the functional forward equals transformers' model (logits), for per-expert and fused checkpoints
  (Gemma 3: sliding and global layers, q/k and post norms, embedding and query scales, soft cap);
* the permutation keeps the function;
* the extracted student equals the masked supernet at the same architecture (global sizes,
  hidden, KV heads, experts, widths, removed sub-blocks);
* the export loads in stock transformers in a fresh process (autocompress not importable) and
  computes the student's logits.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _familykit import IDS, save_parent  # noqa: E402
from _stockkit import STOCK  # noqa: E402

from autocompress.families.base import family_of  # noqa: E402
from autocompress.feasibility.variants import Variant, apply  # noqa: E402
from autocompress.parents.hf_config import architecture_from_config  # noqa: E402
from autocompress.plan.space import derive_space  # noqa: E402
from autocompress.progress import Progress  # noqa: E402

pytestmark = pytest.mark.integration

CASES = {"mixtral": {}, "qwen2_moe": {}, "qwen3_moe": {}, "nemotron_h": {}, "nemotron_h_dense": {"pattern": "M*-M*-"},
         "gemma3": {}}
LONG = torch.tensor([[(7 * i + 3 * j) % 500 for i in range(40)] for j in range(2)])  # > the Mamba2 chunk

_STOCK = STOCK + textwrap.dedent("""
    from safetensors.torch import save_file
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor(json.loads(sys.argv[2]))).logits
    save_file({"logits": logits.contiguous()}, sys.argv[3])
    print(type(model).__name__)
""")


@pytest.fixture(scope="module")
def parents(tmp_path_factory):
    root = tmp_path_factory.mktemp("parents")
    out = {}
    for name, over in CASES.items():
        fam = "nemotron_h" if name.startswith("nemotron_h") else name
        folder = save_parent(fam, root / name, **over)
        arch = architecture_from_config(json.loads((folder / "config.json").read_text()))
        family = family_of(arch.family)
        params, cfg = family.load(folder)
        out[name] = (folder, arch, family, params, cfg)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_forward_equals_transformers(parents, name):
    from transformers import AutoModelForCausalLM

    folder, _, family, params, cfg = parents[name]
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(LONG).logits
        got = family.forward(params, cfg, LONG)
    assert ref.abs().max() > 0.1
    assert torch.allclose(got, ref, atol=2e-5, rtol=1e-4), (got - ref).abs().max()


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe", "nemotron_h"])
def test_fused_checkpoints_load_the_same_weights(parents, name, tmp_path):
    from transformers import AutoModelForCausalLM

    folder, _, family, params, _ = parents[name]
    AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).save_pretrained(
        tmp_path / "fused", save_original_format=False)  # transformers' in-memory layout
    fused, _ = family.load(tmp_path / "fused")
    assert set(fused) == set(params) and all(torch.equal(fused[k], params[k]) for k in params)


def _random_arch(net, rng, uniform):
    o = net.options
    h = len(net.hidden_grid) - 1
    if uniform:  # one size per axis, as the native formats require
        ca = tuple(1 if a else 0 for a in o.attn)
        cf = tuple(max(1, len(f) - 2) if f else 0 for f in o.ffn)
        return h, ca, cf
    ca = tuple(rng.randrange(0 if o.attn_removable[l] else 1, len(a)) if a else 0 for l, a in enumerate(o.attn))
    cf = tuple(rng.randrange(0 if o.ffn_removable[l] else 1, len(f)) if f else 0 for l, f in enumerate(o.ffn))
    return h, ca, cf


@pytest.mark.parametrize("name", list(CASES))
def test_prefix_chain_permute_supernet_extract_export(parents, name, tmp_path):
    folder, arch, family, params, cfg = parents[name]
    rows = torch.randint(0, 500, (8, 33), generator=torch.Generator().manual_seed(0))
    stats = family.importance(params, cfg, rows, 4, 4, Progress())
    stats.to_json(tmp_path / "importance.json")
    permuted, _ = family.permute(params, cfg, stats)
    ids = torch.tensor(IDS)
    with torch.no_grad():
        assert torch.allclose(family.forward(permuted, cfg, ids), family.forward(params, cfg, ids), atol=1e-5)
    space = derive_space(arch, "vllm", "gpu")
    small = Variant(space.mamba_heads[-1] if space.mamba_heads else None,
                    space.expert_widths[-1] if space.expert_widths else None)
    net = family.supernet(permuted, cfg, space, apply(arch, small))
    state = _random_arch(net, random.Random(name), space.uniform)
    student_arch = net.architecture(*state)
    assert student_arch.hidden_size < arch.hidden_size or "hidden" not in space.axes
    with torch.no_grad():
        masked = net.forward(ids, net.one_hot(state))
        sd, extras = family.extract(permuted, cfg, student_arch)
        student = family.student(student_arch, sd, extras)
        assert torch.allclose(student(ids), masked, atol=2e-5), (student(ids) - masked).abs().max()
        expected = student(LONG)
    fmt = family.export(tmp_path / "out", student_arch, student.state_dict(), folder, extras)
    run = subprocess.run([sys.executable, "-c", _STOCK, str(tmp_path / "out"), json.dumps(LONG.tolist()),
                          str(tmp_path / "logits.safetensors")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    from safetensors.torch import load_file

    got = load_file(str(tmp_path / "logits.safetensors"))["logits"]
    assert torch.allclose(got, expected, atol=2e-5, rtol=1e-4), (got - expected).abs().max()
    cls = run.stdout.strip().splitlines()[-1]
    assert cls == {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                   "nemotron_h": "NemotronHForCausalLM", "nemotron_h_puzzle": "NemotronHPuzzleForCausalLM",
                   "gemma3_text": "Gemma3ForCausalLM", "gemma3_hetero": "AutocompressGemma3ForCausalLM"}[fmt]
    exported = architecture_from_config(json.loads((tmp_path / "out" / "config.json").read_text()))
    kept = tuple(b for b in student_arch.blocks if b.mixer is not None or b.ffn is not None)  # removed layers dropped
    assert exported.blocks == kept and exported.hidden_size == student_arch.hidden_size
