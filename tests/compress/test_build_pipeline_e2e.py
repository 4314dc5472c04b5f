"""acc build end to end on a tiny random Llama: stages, export, loading with and without autocompress."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from _buildkit import count_parses, make_project, shortlist_choice, weights_hash  # noqa: E402
from _stockkit import NO_AUTOCOMPRESS, STOCK  # noqa: E402

pytestmark = pytest.mark.integration

_STOCK = STOCK + textwrap.dedent(
    """
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32).eval()
    ids = torch.tensor(json.loads(sys.argv[2]))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert not any(m.startswith("autocompress") for m in sys.modules)
    print(json.dumps(out[:, ids.shape[1]:].tolist()))
    """
)
PROMPTS = [[0, 17, 33, 60, 101, 7], [0, 250, 3, 99, 12, 44]]


class Recorder:
    """A progress sink that keeps log lines and, per task, its totals and whether an ETA was known."""

    def __init__(self, logs: list):
        self.logs, self.tasks = logs, {}

    def start(self, t):
        self.tasks[t.name] = {"total": t.total, "eta": False, "done": 0, "updates": 0}

    def update(self, t):
        rec = self.tasks[t.name]
        rec.update(total=t.total, done=t.done, updates=rec["updates"] + 1,
                   eta=rec["eta"] or (t.eta_s is not None and t.done < (t.total or 0)))

    def finish(self, t):
        self.tasks[t.name].update(total=t.total, done=t.done)

    def log(self, m):
        self.logs.append(m)


TASKS: dict = {}  # the build's progress tasks (the fixture fills it)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("build")
    with pytest.MonkeyPatch.context() as mp:  # this module's own cache, restored after it
        mp.setenv("ACC_CACHE_DIR", str(root / "cache"))
        spec = make_project(root)
        from autocompress.build.pipeline import run_build
        from autocompress.progress import Progress

        logs: list[str] = []
        rec = Recorder(logs)
        result = run_build(str(spec), progress=Progress(rec))
        TASKS.update(rec.tasks)
        yield root, spec, result, logs


def test_output_folder_is_complete(built):
    root, spec, result, logs = built
    out = result.output
    for name in ("config.json", "model.safetensors", "modeling_decilm.py", "configuration_decilm.py",
                 "tokenizer.json", "autocompress-report.md", "autocompress-report.json", "README.md", "LICENSE"):
        assert (out / name).exists(), name
    assert not list(out.parent.glob(".tmp*")) and not list(out.parent.glob("*.partial"))
    report = json.loads((out / "autocompress-report.json").read_text())
    assert all(c["ok"] for c in report["predicted"]["checks"])  # meets the contract by prediction
    assert report["architecture"]["params"] < report["parent_architecture"]["params"]
    assert report["quality"]["student"]  # held-out quality measured
    md = (out / "autocompress-report.md").read_text()
    for e in report["plots"]:  # labelled charts, embedded (or skipped, and said so, without matplotlib)
        if e["file"]:
            assert (out / e["file"]).read_bytes().startswith(b"\x89PNG") and f"]({e['file']})" in md
        else:
            assert f"plot `{e['name']}` skipped" in md
    assert {e["name"] for e in report["plots"]} == {"architecture", "costs", "quality-cost"}
    acc = report["quality"]["accuracy"]  # the eight benchmarks on the fixture documents (3 per split)
    assert acc["student"]["summary"]["docs"] == acc["parent"]["summary"]["docs"] == 27
    assert acc["retained"]["mean"] > 0 and "Benchmark accuracy" in (out / "autocompress-report.md").read_text()
    assert any("[distill]" in m for m in logs) and any("strategy" in m for m in logs)  # derived settings logged


def test_every_long_stage_reports_progress_with_an_eta(built):
    """Each loop that runs long on a real model opens a task with a total, and had an ETA while it ran."""
    tasks = TASKS
    expected = ["importance", "removal KL", "teacher", "search", "refine hidden", "refine: measure candidates",
                "shortlist", "distill", "evaluate parent: held-out", "evaluate (autocompress): held-out"]
    for prefix in expected:
        hits = [n for n in tasks if n.startswith(prefix)]
        assert hits, (prefix, sorted(tasks))
        for n in hits:
            assert tasks[n]["total"] and tasks[n]["done"] == tasks[n]["total"], (n, tasks[n])
    multi = [n for n in tasks if tasks[n]["updates"] > 1]  # not done in one step: an ETA was shown
    assert all(tasks[n]["eta"] for n in multi), {n: tasks[n] for n in multi if not tasks[n]["eta"]}


def test_the_export_states_parent_contract_costs_quality_and_license(built):
    root, spec, result, _ = built
    out = result.output
    block = json.loads((out / "config.json").read_text())["autocompress"]
    report = json.loads((out / "autocompress-report.json").read_text())
    assert block["license"] == {"id": "apache-2.0", "source": "the parent's README.md front matter"}
    assert block["parent"]["params"] == report["parent_architecture"]["params"]
    assert block["contract"]["spec"] == "spec.acspec" and block["contract"]["target"]["engine"] == "vllm"
    assert set(block["predicted"]["values"]) == {c["name"] for c in report["predicted"]["checks"]}
    assert block["measured"] is None and set(block["quality"]) == set(report["quality"]["student"])
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlicense: apache-2.0\n") and "## Contract" in card and "not measured" in card
    assert "## Quality retained" in card and "**apache-2.0**" in card
    assert str(root) not in card and str(root) not in json.dumps(block)  # no machine paths


def test_export_loads_after_import_and_matches_in_memory_student(built):
    root, spec, result, _ = built
    from transformers import AutoModelForCausalLM

    from autocompress.families.llama.student import student_model
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
    from autocompress.families.llama.family import config
    from autocompress.families.llama.load import names
    from autocompress.families.checkpoint import to_canonical

    mem = student_model(arch, to_canonical(sd, names(arch), {}, {}), {"cfg": config(root / "parent")}).eval()
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
    from autocompress.build.pipeline import run_build

    before = weights_hash(result.output)
    logs: list[str] = []
    again = run_build(str(spec), progress=logs.append)
    assert weights_hash(again.output) == before
    assert any("[importance] cached" in m for m in logs) and any("[distill] cached" in m for m in logs)
    # the student's evaluation is a stage keyed by the exported weights: read back, not measured again
    assert any(m.startswith("[evaluate-autocompress] cached") for m in logs), logs
    assert again.report["quality"] == result.report["quality"]


def test_a_build_parses_its_spec_once_and_resolves_its_parent_once(built, tmp_path, monkeypatch, capsys):
    """``acc build`` from its command line (the check cold: a fresh cache; the stages cached), then its
    verification step: one parse of the spec, one resolution of its parent, read by every stage."""
    from argparse import Namespace

    from autocompress.cli import build_cmd

    root, spec, result, _ = built
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "cache"))  # the check misses: computed from the contract
    parses, resolves = count_parses(monkeypatch)
    args = Namespace(spec=str(spec), work=None, quiet=True, baseline=None, force=False, no_calibrate=False,
                     no_verify=False, nproc=None)
    assert build_cmd.build(args) == 0
    assert "not verified by measurement" in capsys.readouterr().out  # the verification step ran
    assert (len(parses), len(resolves)) == (1, 1), (parses, resolves)


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
    assert "router v2" in names and "cvxpy start" in names and any(n.startswith("greedy") for n in names)
    best = min(cands, key=lambda c: c["kl"])
    # the search's own pick (least KL before distillation) heads its finalists
    assert report["how_search"].startswith(f"measured choice: {best['name']}")  # no repair needed on this contract
    sl = report["shortlist"]
    rows = sl["finalists"]
    assert len(rows) >= 2 and rows[0]["name"] == best["name"] and rows[0]["kl_search"] == best["kl"]
    assert [r["kl_search"] for r in rows] == sorted(r["kl_search"] for r in rows)
    # the finalist of least KL after the short distillation is what was built
    assert sl["chosen"] == shortlist_choice(sl)  # with a runoff when a runner-up is within 2%
    assert report["architecture"]["params"] == rows[sl["chosen"]]["params"]
    assert report["how"].startswith(f"short-distillation choice among {len(rows)} finalists")
    md = (result.output / "autocompress-report.md").read_text()
    assert "### Candidates" in md and "### Finalists" in md and "**chosen**" in md
    # the uniform frontier, measured as the uniform arm measures it, ranked with the rest, once each
    front = report["refine"]["uniform_frontier"]
    assert front["forwards"] >= 1 and front["listed"] == sum(n.startswith("uniform: hidden") for n in names)
    assert len(names) == len(set(names)) and "the uniform grid's frontier, measured as the uniform arm" in md


_TOKENIZER = NO_AUTOCOMPRESS + textwrap.dedent(
    """
    from transformers import AutoTokenizer
    out, parent, text = sys.argv[1], sys.argv[2], sys.argv[3]
    tok = AutoTokenizer.from_pretrained(out, trust_remote_code=False)
    ref = AutoTokenizer.from_pretrained(parent)
    print(json.dumps({"cls": type(tok).__name__, "ids": tok(text)["input_ids"], "ref": ref(text)["input_ids"]}))
    """
)


def test_the_tokenizer_loads_without_running_or_asking_about_code(built):
    """In a process that never imports autocompress, the exported tokenizer loads with no prompt
    (stdin closed: a prompt would print "Do you wish to run the custom code?") and encodes like the
    parent's. transformers reads the model config first; trust_remote_code=False tells it not to
    consider the model's code (the tokenizer is a stock class); a plain Llama export needs no flag."""
    root, spec, result, _ = built
    text = "def parse(text):\n    return text.split()  # The for statement"
    p = subprocess.run([sys.executable, "-c", _TOKENIZER, str(result.output), str(root / "parent"), text],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=str(root))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Do you wish" not in p.stdout + p.stderr and "custom code" not in p.stdout
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["ids"] == got["ref"] and got["cls"] in ("TokenizersBackend", "PreTrainedTokenizerFast")


def test_a_near_tie_goes_to_a_runoff_whose_winner_is_built(built, tmp_path, monkeypatch):
    """With a runoff margin wide enough for any runner-up, the build distils its two leading finalists
    again for twice the steps, builds the runoff's winner, shows the runoff in its report, and a rerun
    finds the runoff cached."""
    import dataclasses
    import shutil

    from autocompress.build import prepare

    from autocompress.build import settings
    from autocompress.build.pipeline import run_build

    root = built[0]
    shutil.copytree(root, tmp_path / "copy", symlinks=True)
    monkeypatch.setenv("ACC_CACHE_DIR", str(tmp_path / "copy" / "cache"))
    wide = lambda spec: dataclasses.replace(settings.derive_build(spec), runoff_margin=10.0)  # noqa: E731
    monkeypatch.setattr(prepare, "derive_build", wide)
    logs: list[str] = []
    result = run_build(str(tmp_path / "copy" / "spec.acspec"), progress=logs.append)
    report = json.loads((result.output / "autocompress-report.json").read_text())
    sl = report["shortlist"]
    ro, rows = sl["runoff"], sl["finalists"]
    assert ro["steps"] == 2 * sl["steps"] and len(ro["kl_after"]) == 2
    assert sl["chosen"] == shortlist_choice(sl) and report["architecture"]["params"] == rows[sl["chosen"]]["params"]
    assert f"runoff at {ro['steps']} steps ({rows[ro['entrants'][0]]['name']} and" in report["how"]
    assert any(m.startswith("[runoff]") and "distilled again" in m for m in logs)
    assert len(list((tmp_path / "copy" / "out" / ".tiny.acc").glob("runoff-*[!l]"))) == 1  # one stage, completed
    md = (result.output / "autocompress-report.md").read_text()
    assert f"after {ro['steps']} (runoff)" in md and "Runoff: the two finalists" in md
    again: list[str] = []
    run_build(str(tmp_path / "copy" / "spec.acspec"), progress=again.append)
    assert any(m.startswith("[runoff] cached") for m in again) and any(m.startswith("[shortlist-autocompress] cached") for m in again)
