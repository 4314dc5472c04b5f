"""``acc check`` and ``acc fmt``: exit codes, formats, --out, the cache (in-process via cli.main)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _clikit import EXAMPLES, FEASIBLE, INFEASIBLE, REPO, cache_dir, copy_example  # noqa: F401 - cache_dir is a fixture

from autocompress.cli import main as cli
from autocompress.check import run_check

BROKEN = """model "smollm2-135m"
target {
  hardware  rtx-5080
  engine    vllm
  precision bf16
}
workload npc {
  concurrency 1
  input 512 tokens
  output 64 tokens
  ttft <= 15 ms

search { steps 10 }
"""


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- exit codes --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def _module_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("acc-cache-shared")


@pytest.fixture
def shared_cache(_module_cache, monkeypatch):
    """One cache for the tests that only read outputs: each example is checked once per module."""
    monkeypatch.setenv("ACC_CACHE_DIR", str(_module_cache))
    monkeypatch.delenv("ACC_DEBUG", raising=False)
    return _module_cache


def test_exit_0_for_feasible_json(capsys, cache_dir):
    code, out, err = _run(capsys, "check", str(FEASIBLE), "--no-cache", "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert report["verdict"] == "feasible" and report["spec"]["path"] == FEASIBLE.name
    assert "Traceback" not in err


def test_exit_4_when_no_architecture_is_found_but_nothing_is_proved(capsys, shared_cache):
    code, out, err = _run(capsys, "check", str(EXAMPLES / "batch-h100-not-found.acspec"), "--format", "md")
    assert code == 4
    assert "**NOT FOUND (not proved)**" in out and "nothing is proved" in out
    assert "### What would make it feasible" not in out and "Traceback" not in err
    code, _, _ = _run(capsys, "check", str(EXAMPLES / "npc-5070-full-card.acspec"))
    assert code == 1  # an engine limit no architecture changes: proved


def test_a_solver_failure_is_not_found_with_the_reason(capsys, cache_dir, monkeypatch):
    """A crashing LP solver never makes a contract "infeasible": without a found architecture the
    verdict is not_found and says which solver failed (here on the example that is otherwise proved
    infeasible; a found architecture still makes a contract feasible, the LP only steers)."""
    import autocompress.feasibility.lp as lp

    class Broken:
        def solve(self, *a, **k):
            raise RuntimeError("simulated solver crash")

    real = lp.problem
    monkeypatch.setattr(lp, "problem", lambda relax: (Broken(),) + real(relax)[1:])
    code, out, err = _run(capsys, "check", str(INFEASIBLE), "--no-cache", "--format", "json")
    report = json.loads(out)
    assert code == 4 and report["verdict"] == "not_found"
    assert "the LP solver gave no answer" in report["reason"] and "solver_error (CLARABEL: RuntimeError)" in report["reason"]


def test_exit_1_for_infeasible_markdown(capsys, shared_cache):
    code, out, err = _run(capsys, "check", str(INFEASIBLE), "--format", "md")
    assert code == 1
    assert out.startswith(f"## autocompress check: `{INFEASIBLE.name}`: **INFEASIBLE (proved)**")
    assert "### What would make it feasible" in out
    assert "Traceback" not in err


def test_exit_2_for_broken_spec_with_location(capsys, cache_dir, tmp_path):
    spec = tmp_path / "broken.acspec"
    spec.write_text(BROKEN)
    code, out, err = _run(capsys, "check", str(spec))
    assert code == 2 and out == ""
    assert f"{spec}:7:14: error: missing '}}'" in err
    assert "1 error in" in err
    assert "Traceback" not in err and "internal error" not in err


def test_exit_2_for_missing_file(capsys, cache_dir, tmp_path):
    missing = tmp_path / "nope.acspec"
    code, out, err = _run(capsys, "check", str(missing))
    assert code == 2
    assert str(missing) in err and "no such file" in err and "Traceback" not in err


def test_exit_2_for_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["check", str(FEASIBLE), "--format", "yaml"])
    assert exc.value.code == 2
    assert cli.main([]) == 2


def test_exit_3_for_internal_error(capsys, cache_dir, monkeypatch):
    import autocompress.check

    def boom(*a, **k):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(autocompress.check, "run_check", boom)
    code, out, err = _run(capsys, "check", str(FEASIBLE), "--no-cache")
    assert code == 3
    assert "internal error: ZeroDivisionError: simulated bug" in err
    assert "please report it" in err and "ACC_DEBUG=1" in err
    assert "Traceback" not in err


def test_a_measurement_that_fails_is_exit_6_with_its_reason_not_an_internal_error(capsys, cache_dir, monkeypatch):
    """An engine worker that times out (or crashes) on a busy host is not a bug in autocompress."""
    pytest.importorskip("torch")
    import autocompress.build.pipeline
    from autocompress.measure.runner import MeasureError

    def timeout(*a, **k):
        raise MeasureError("parent: the vllm worker ran past 900 s")

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # set already: the build leaves the environment alone
    monkeypatch.setattr(autocompress.build.pipeline, "run_build", timeout)
    code, _, err = _run(capsys, "build", str(FEASIBLE))
    assert code == 6, err
    assert "measurement failed: parent: the vllm worker ran past 900 s" in err and "rerun the same command" in err
    assert "internal error" not in err and "please report it" not in err and "Traceback" not in err


def test_no_architecture_found_in_a_build_is_exit_4(capsys, cache_dir, monkeypatch):
    """The search finding nothing (infeasibility not proved) is the documented exit 4 with its
    reason, not an internal error (the uniform arm on the Gemma host build said so as exit 3)."""
    pytest.importorskip("torch")
    import autocompress.build.pipeline
    from autocompress.search.final import NoArchitecture

    def none_found(*a, **k):
        raise NoArchitecture("no uniform (identical-layer) architecture of the grid passes the exact cost model")

    monkeypatch.setattr(autocompress.build.pipeline, "run_build", none_found)
    code, _, err = _run(capsys, "build", str(FEASIBLE))
    assert code == 4, err
    assert "no uniform (identical-layer) architecture of the grid passes" in err
    assert "internal error" not in err and "Traceback" not in err


def test_exit_3_deep_in_the_pipeline(capsys, cache_dir, monkeypatch):
    """A bug inside a stage (not only at the top) is caught the same way."""
    import autocompress.feasibility.assess

    def boom(*a, **k):
        raise KeyError("lost")

    monkeypatch.setattr(autocompress.feasibility.assess, "assess", boom)
    code, _, err = _run(capsys, "check", str(FEASIBLE), "--no-cache", "--format", "json")
    assert code == 3 and "internal error: KeyError" in err and "Traceback" not in err


def test_acc_debug_reraises(cache_dir, monkeypatch):
    import autocompress.check

    monkeypatch.setattr(autocompress.check, "run_check", lambda *a, **k: 1 / 0)
    monkeypatch.setenv("ACC_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["check", str(FEASIBLE)])


def test_real_process_broken_spec(tmp_path):
    """One real subprocess: the console script's exit code and clean stderr."""
    spec = tmp_path / "broken.acspec"
    spec.write_text(BROKEN)
    env = {**os.environ, "ACC_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("ACC_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "autocompress.cli", "check", str(spec)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{spec}:7:14:" in proc.stderr and "Traceback" not in proc.stderr


# ---- formats and --out -------------------------------------------------------------------------

def test_text_format_is_the_default(capsys, shared_cache):
    code, out, err = _run(capsys, "check", str(INFEASIBLE))
    assert code == 1 and "infeasible" in out.lower() and "Traceback" not in err


def test_out_file_json(capsys, shared_cache, tmp_path):
    target = tmp_path / "reports" / "check.json"  # the folder does not exist yet
    code, out, err = _run(capsys, "check", str(INFEASIBLE), "--format", "json", "--out", str(target))
    assert code == 1 and out == ""
    assert f"wrote {target} (infeasible)" in err
    assert json.loads(target.read_text())["verdict"] == "infeasible"
    assert sorted(p.name for p in target.parent.iterdir()) == ["check.json"]  # no temporary left


def test_out_file_text_means_markdown(capsys, shared_cache, tmp_path):
    target = tmp_path / "check.md"
    code, _, _ = _run(capsys, "check", str(INFEASIBLE), "--out", str(target))
    assert code == 1 and target.read_text().startswith("## autocompress check:")


def test_out_file_is_written_atomically(capsys, shared_cache, tmp_path, monkeypatch):
    """A write that fails at the rename leaves the previous file whole and no temporary behind."""
    import autocompress.cache

    target = tmp_path / "check.json"
    target.write_text("previous\n")
    _run(capsys, "check", str(INFEASIBLE), "--format", "json")  # warm the cache: the failure is in the write

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(autocompress.cache.os, "replace", failing_replace)
    code, _, err = _run(capsys, "check", str(INFEASIBLE), "--format", "json", "--out", str(target))
    assert code != 0 and "Traceback" not in err
    assert target.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["check.json"]


# ---- the cache ---------------------------------------------------------------------------------

def test_second_run_is_cached_and_identical(cache_dir, tmp_path):
    spec = copy_example(INFEASIBLE, tmp_path)
    first = run_check(str(spec))
    second = run_check(str(spec))
    assert not first.cached and second.cached
    assert second.report == first.report and second.exit_code == first.exit_code == 1
    assert any(cache_dir.rglob("*")), "nothing was written under ACC_CACHE_DIR"
    assert not run_check(str(spec), use_cache=False).cached  # --no-cache recomputes


def test_modified_spec_is_recomputed(cache_dir, tmp_path):
    spec = copy_example(INFEASIBLE, tmp_path)
    first = run_check(str(spec))
    assert first.report["verdict"] == "infeasible"
    text = spec.read_text().replace("tpot <= 0.5 ms", "tpot <= 5 ms").replace("ttft <= 4 ms", "ttft <= 40 ms") \
        .replace("memory    <= 600 MiB", "memory    <= 2 GiB")
    spec.write_text(text)
    second = run_check(str(spec))
    assert not second.cached
    assert second.report["verdict"] == "feasible" and second.exit_code == 0
    assert second.report["spec"]["sha256"] != first.report["spec"]["sha256"]
    assert run_check(str(spec)).cached


def test_cached_answer_renders_like_a_fresh_one(capsys, cache_dir, tmp_path):
    spec = copy_example(INFEASIBLE, tmp_path)
    code1, fresh, _ = _run(capsys, "check", str(spec), "--format", "md")
    code2, cached, _ = _run(capsys, "check", str(spec), "--format", "md")
    assert code1 == code2 == 1 and fresh == cached
    assert run_check(str(spec)).cached


# ---- acc fmt -----------------------------------------------------------------------------------

def test_fmt_prints_canonical_and_check_accepts_it(capsys, tmp_path):
    code, canonical, err = _run(capsys, "fmt", str(FEASIBLE))
    assert code == 0 and '\nmodel "smollm2-135m"\n' in canonical
    spec = tmp_path / "canon.acspec"
    spec.write_text(canonical)
    assert _run(capsys, "fmt", str(spec), "--check")[0] == 0
    assert _run(capsys, "fmt", str(spec))[1] == canonical  # idempotent


def test_fmt_check_rejects_non_canonical_and_write_fixes(capsys, tmp_path):
    spec = copy_example(FEASIBLE, tmp_path)
    original = spec.read_text()
    code, out, err = _run(capsys, "fmt", str(spec), "--check")
    assert code == 1 and "not in canonical form" in err and out == ""
    assert spec.read_text() == original  # --check never writes
    assert _run(capsys, "fmt", str(spec), "--write")[0] == 0
    assert _run(capsys, "fmt", str(spec), "--check")[0] == 0
    assert _run(capsys, "check", str(spec), "--no-cache", "--format", "json")[0] == 0  # same meaning


def test_fmt_broken_spec_exit_2(capsys, tmp_path):
    spec = tmp_path / "broken.acspec"
    spec.write_text(BROKEN)
    code, out, err = _run(capsys, "fmt", str(spec), "--check")
    assert code == 2 and ":7:14:" in err and "Traceback" not in err


# ---- regressions, end to end: bugs found by these tests and fixed ----------------------------

TINY_CONFIG = """{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
 "intermediate_size": 1024, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 64, "vocab_size": 4096, "tie_word_embeddings": true, "max_position_embeddings": 2048,
 "hidden_act": "silu", "torch_dtype": "bfloat16"}
"""
TINY_SPEC = """model "config.json"
target {{
  hardware  {hw}
  engine    vllm
  precision bf16
}}
workload chat {{
  concurrency 1
  input  512 tokens
  output 64 tokens
  tpot <= {tpot} ms
}}
"""


def _tiny(tmp_path, hw, tpot):
    (tmp_path / "config.json").write_text(TINY_CONFIG)
    spec = tmp_path / "tiny.acspec"
    spec.write_text(TINY_SPEC.format(hw=hw, tpot=tpot))
    return spec


def test_tiny_parent_solver_failure_is_not_internal_error(capsys, cache_dir, tmp_path):
    code, _, err = _run(capsys, "check", str(_tiny(tmp_path, "rtx-5070", "0.5817")), "--no-cache", "--format", "json")
    assert code in (0, 1) and "internal error" not in err, err


def test_tiny_parent_looser_bound_stays_feasible(capsys, cache_dir, tmp_path):
    tighter = _run(capsys, "check", str(_tiny(tmp_path, "h100-sxm", "0.545")), "--no-cache", "--format", "json")
    assert tighter[0] == 0
    looser = _run(capsys, "check", str(_tiny(tmp_path, "h100-sxm", "0.55")), "--no-cache", "--format", "json")
    assert looser[0] == 0
