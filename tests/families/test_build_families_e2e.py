"""``acc build`` end to end on tiny random Mixtral, Qwen2-MoE, Qwen3-MoE, NemotronH (Mamba2 +
attention + MLP + MoE) and Gemma 3 parents: every stage runs through the family seam, the export meets the
contract by prediction, loads in stock transformers in a fresh process, and greedy-generates
what the functional forward of the same folder generates."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _familykit import make_project  # noqa: E402
from _stockkit import STOCK  # noqa: E402

pytestmark = pytest.mark.integration

_STOCK = STOCK + textwrap.dedent("""
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32).eval()
    ids = torch.tensor(json.loads(sys.argv[2]))
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                             eos_token_id=None, pad_token_id=0)  # token 0 is no padding here
    print(json.dumps([type(model).__name__, out[:, ids.shape[1]:].tolist()]))
""")
PROMPTS = [[0, 17, 33, 60, 101, 7], [0, 250, 3, 99, 12, 44]]
# (family, TPOT bound as a share of the parent's, pattern): tiny models' step time is mostly
# per-layer overhead, so the bounds are set where the search must remove layers or shrink them
CASES = {"mixtral": ("mixtral", 0.95, {}), "qwen2_moe": ("qwen2_moe", 0.95, {}), "qwen3_moe": ("qwen3_moe", 0.95, {}),
         "nemotron_h": ("nemotron_h", 0.98, {"pattern": "M*-E-*"}), "gemma3": ("gemma3", 0.98, {})}
FORMAT = {"mixtral": {"MixtralForCausalLM"}, "qwen2_moe": {"Qwen2MoeForCausalLM"}, "qwen3_moe": {"Qwen3MoeForCausalLM"},
          "nemotron_h": {"NemotronHPuzzleForCausalLM"},
          "gemma3": {"Gemma3ForCausalLM", "AutocompressGemma3ForCausalLM"}}  # uniform or per_layer_config


def _greedy(family, folder, prompts, n=8):
    params, cfg = family.load(folder)
    out = []
    for p in prompts:
        ids = torch.tensor([p])
        with torch.no_grad():
            for _ in range(n):
                ids = torch.cat([ids, family.forward(params, cfg, ids)[:, -1:].argmax(-1)], dim=1)
        out.append(ids[0, len(p):].tolist())
    return out


@pytest.fixture(scope="module", params=list(CASES))
def built(request, tmp_path_factory):
    name = request.param
    family, factor, over = CASES[name]
    root = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACC_CACHE_DIR", str(root / "cache"))
        # HumanEval log-likelihood takes ~30 s per model here and is covered by the Llama build test
        mp.setattr("autocompress.data.corpus.humaneval_path", lambda: None)
        spec = make_project(root, family, factor, **over)
        from autocompress.build.pipeline import run_build

        logs: list[str] = []
        yield name, root, run_build(str(spec), progress=logs.append), logs


def test_build_meets_the_contract_and_loads_in_stock_transformers(built):
    name, root, result, logs = built
    out = result.output
    report = json.loads((out / "autocompress-report.json").read_text())
    assert all(c["ok"] for c in report["predicted"]["checks"])
    assert report["architecture"]["params"] < report["parent_architecture"]["params"]
    assert report["quality"]["student"]["code"]["kl"] is not None
    assert any("[export]" in m for m in logs) and any(
        "native-moe: experts" in m or "nemotron_h: mamba heads" in m or "gemma3: kv_heads" in m
        for m in logs)  # the format's limits, with reasons
    from autocompress.families.base import family_of
    from autocompress.parents.hf_config import architecture_from_config

    parent = architecture_from_config(json.loads((root / "parent" / "config.json").read_text()))
    expected = _greedy(family_of(parent.family), out, PROMPTS)
    run = subprocess.run([sys.executable, "-c", _STOCK, str(out), json.dumps(PROMPTS)], capture_output=True, text=True,
                         cwd=str(root), timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    cls, tokens = json.loads(run.stdout.strip().splitlines()[-1])
    assert cls in FORMAT[name] and tokens == expected


def test_uniform_formats_choose_by_measurement(built):
    name, root, result, logs = built
    report = json.loads((result.output / "autocompress-report.json").read_text())
    layers = [x for x in report["architecture"]["layers"] if x["mixer"] or x["ffn"]]
    # the search's own measured choice names the finalists; the shortlist then picks among them
    assert report["how"].startswith("short-distillation choice among") and report["shortlist"]
    if name in ("nemotron_h", "gemma3"):  # per-layer formats
        assert report["how_search"].startswith("measured choice:")
        return
    assert report["how_search"].startswith("measured choice among the uniform points")
    assert len({json.dumps(x, sort_keys=True) for x in layers if x["ffn"]["kind"] == "moe"}) == 1  # one size
    assert all(x["mixer"] and x["ffn"] for x in layers)  # whole layers only
