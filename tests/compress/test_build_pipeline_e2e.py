"""acc build end to end on a tiny random Llama: stages, export, loading with and without autocompress."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _buildkit import make_project, weights_hash  # noqa: E402

pytestmark = pytest.mark.integration

_STOCK = textwrap.dedent(
    """
    import json, sys
    class _NoAutocompress:
        def find_spec(self, name, path=None, target=None):
            if name == "autocompress" or name.startswith("autocompress."):
                raise ImportError("autocompress must not be imported here: " + name)
    sys.meta_path.insert(0, _NoAutocompress())
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32).eval()
    ids = torch.tensor(json.loads(sys.argv[2]))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert not any(m.startswith("autocompress") for m in sys.modules)
    print(json.dumps(out[:, ids.shape[1]:].tolist()))
    """
)
PROMPTS = [[0, 17, 33, 60, 101, 7], [0, 250, 3, 99, 12, 44]]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("build")
    with pytest.MonkeyPatch.context() as mp:  # this module's own cache, restored after it
        mp.setenv("ACC_CACHE_DIR", str(root / "cache"))
        spec = make_project(root)
        from autocompress.compress.pipeline import run_build

        logs: list[str] = []
        result = run_build(str(spec), progress=logs.append)
        yield root, spec, result, logs


def test_output_folder_is_complete(built):
    root, spec, result, logs = built
    out = result.output
    for name in ("config.json", "model.safetensors", "modeling_decilm.py", "configuration_decilm.py",
                 "tokenizer.json", "autocompress-report.md", "autocompress-report.json", "architecture.png"):
        assert (out / name).exists(), name
    assert not list(out.parent.glob(".tmp*")) and not list(out.parent.glob("*.partial"))
    report = json.loads((out / "autocompress-report.json").read_text())
    assert all(c["ok"] for c in report["predicted"]["checks"])  # meets the contract by prediction
    assert report["architecture"]["params"] < report["parent_architecture"]["params"]
    assert report["quality"]["student"]  # held-out quality measured
    acc = report["quality"]["accuracy"]  # the eight benchmarks on the fixture documents (3 per split)
    assert acc["student"]["summary"]["docs"] == acc["parent"]["summary"]["docs"] == 27
    assert acc["retained"]["mean"] > 0 and "Benchmark accuracy" in (out / "autocompress-report.md").read_text()
    assert (out / "architecture.png").read_bytes().startswith(b"\x89PNG")
    assert any("[distill]" in m for m in logs) and any("strategy" in m for m in logs)  # derived settings logged


def test_export_loads_after_import_and_matches_in_memory_student(built):
    root, spec, result, _ = built
    from transformers import AutoModelForCausalLM

    from autocompress.compress.extract import student_model
    from autocompress.ir import arch_from_dict
    from autocompress.modeling.register import register
    from safetensors.torch import load_file

    register()
    loaded = AutoModelForCausalLM.from_pretrained(str(result.output), dtype=torch.float32).eval()
    report = json.loads((result.output / "autocompress-report.json").read_text())
    from autocompress.parents.resolve import resolve_parent
    from autocompress.lang.api import load_spec

    s = load_spec(str(spec))
    parent = resolve_parent(s.parent, str(root)).architecture
    arch = arch_from_dict(report["architecture"], parent)
    sd = load_file(str(result.output / "model.safetensors"))
    from autocompress.nn.llama import load_llama

    _, cfg = load_llama(root / "parent")
    mem = student_model(arch, sd, cfg.llama_globals()).eval()
    ids = torch.tensor(PROMPTS)
    with torch.no_grad():
        a = loaded.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
        b = mem.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(a, b)
    stock = subprocess.run([sys.executable, "-c", _STOCK, str(result.output), json.dumps(PROMPTS)],
                           capture_output=True, text=True, cwd=str(root), timeout=300)
    assert stock.returncode == 0, stock.stderr[-2000:]
    assert json.loads(stock.stdout.strip().splitlines()[-1]) == a[:, ids.shape[1]:].tolist()


def test_rerun_is_cached_and_identical(built):
    root, spec, result, _ = built
    from autocompress.compress.pipeline import run_build

    before = weights_hash(result.output)
    logs: list[str] = []
    again = run_build(str(spec), progress=logs.append)
    assert weights_hash(again.output) == before
    assert any("[importance] cached" in m for m in logs) and any("[distill] cached" in m for m in logs)


def test_import_has_no_side_effects_and_registration_is_explicit(built):
    """``import autocompress`` installs no import hook and registers nothing; ``register()`` makes a
    heterogeneous export load without remote code (README, "Loading an exported model")."""
    root, spec, result, _ = built
    code = ("import sys\n"
            "hooks = list(sys.meta_path)\n"
            "import autocompress\n"
            "assert sys.meta_path == hooks and 'transformers' not in sys.modules\n"
            "import torch\n"
            "from transformers import AutoModelForCausalLM\n"
            "try:\n"
            "    AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=False)\n"
            "    print('loaded before register')\n"
            "except ValueError as e:\n"
            "    print('refused before register:', 'trust_remote_code' in str(e))\n"
            "from autocompress.modeling.register import register\n"
            "register()\n"
            "m = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=False, dtype=torch.float32)\n"
            "print(type(m).__name__)\n")
    p = subprocess.run([sys.executable, "-c", code, str(result.output)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    fmt = json.loads((result.output / "config.json").read_text())["architectures"][0]
    assert lines[-1] == fmt
    assert lines[-2] == ("refused before register: True" if fmt == "DeciLMForCausalLM" else "loaded before register")


def test_the_chosen_architecture_is_the_measured_best_candidate(built):
    root, spec, result, logs = built
    report = json.loads((result.output / "autocompress-report.json").read_text())
    cands = report["refine"]["candidates"]
    names = [c["name"] for c in cands]
    assert "router" in names and "cvxpy start" in names and any(n.startswith("greedy") for n in names)
    best = min(cands, key=lambda c: c["kl"])
    assert report["how"].startswith(f"measured choice: {best['name']}")  # no repair needed on this contract
    assert report["architecture"]["hidden"] == best["hidden"]
    assert "### Candidates" in (result.output / "autocompress-report.md").read_text()
