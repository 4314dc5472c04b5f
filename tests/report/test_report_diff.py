"""acc diff: two example specs give the pinned Markdown and schema-valid JSON; --base reads the
old spec from git (added, invalid, unknown revisions); the CLI's exit codes."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys

import pytest
from _reportkit import EXAMPLES_DIR, GOLDEN, REPO, check_golden

from autocompress.diff import DiffError, read_revision, run_diff
from autocompress.report.diff import build_diff, render_diff_json, render_diff_markdown, side

SCHEMA = REPO / "specs" / "spec-diff.schema.json"
PAIRS = [("npc-5080", "npc-5070-infeasible"), ("npc-5080", "code-5070")]


@functools.lru_cache(maxsize=None)
def _validator():
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(d: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(d)]


@functools.lru_cache(maxsize=None)
def _pair(old: str, new: str) -> dict:
    cwd = os.getcwd()
    os.chdir(EXAMPLES_DIR.parent)  # labels as a reviewer types them: examples/<name>.acspec
    try:
        return run_diff(f"examples/{old}.acspec", f"examples/{new}.acspec").diff
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("old,new", PAIRS)
def test_diff_of_two_examples_golden(old, new):
    d = _pair(old, new)
    check_golden(GOLDEN / "diff" / f"{old}--{new}.md", render_diff_markdown(d))
    check_golden(GOLDEN / "diff" / f"{old}--{new}.json", render_diff_json(d))
    assert not _errors(json.loads(render_diff_json(d))), _errors(d)


def test_diff_says_what_changed():
    d = _pair("npc-5080", "npc-5070-infeasible")
    assert d["verdict"] == {"old": "feasible", "new": "infeasible", "changed": True}
    assert d["target"]["changed"] == ["hardware", "memory_limit_bytes"]
    assert {b["name"]: b["change"] for b in d["bounds"]} == {"npc.ttft": "tightened", "npc.tpot": "tightened",
                                                             "memory": "tightened"}
    assert d["binding"]["no_longer_binding"] == ["npc.tpot"] and d["start"]["new"] is None
    other = _pair("npc-5080", "code-5070")
    changes = {b["name"]: b["change"] for b in other["bounds"]}
    assert changes["npc.ttft"] == "removed" and any(c == "added" for c in changes.values())


def test_a_diff_with_itself_changes_nothing():
    spec = str(EXAMPLES_DIR / "cpu-vllm.acspec")
    d = run_diff(spec, spec).diff
    assert not d["verdict"]["changed"] and not d["target"]["changed"] and not d["parent"]["changed"]
    assert all(b["change"] == "same" for b in d["bounds"]) and not d["binding"]["became_binding"]
    assert "(unchanged)" in render_diff_markdown(d)


def test_schema_rejects_malformed_diffs():
    d = json.loads(render_diff_json(_pair("npc-5080", "npc-5070-infeasible")))
    for mutate in (lambda x: x.pop("verdict"), lambda x: x.__setitem__("surprise", 1),
                   lambda x: x["bounds"][0].__setitem__("change", "worse"),
                   lambda x: x["old"].__setitem__("status", "maybe")):
        bad = json.loads(json.dumps(d))
        mutate(bad)
        assert _errors(bad)


# ---- --base: the old spec from git ----------------------------------------------------------

def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    r = tmp_path / "repo"
    (r / "specs").mkdir(parents=True)
    shutil.copyfile(EXAMPLES_DIR / "npc-5080.acspec", r / "specs" / "npc.acspec")
    _git(r, "init", "-q")
    _git(r, "add", ".")
    _git(r, "commit", "-q", "-m", "base")
    return r


def test_base_revision_against_the_working_tree(repo):
    spec = repo / "specs" / "npc.acspec"
    spec.write_text(spec.read_text().replace("tpot <= 0.9 ms", "tpot <= 0.95 ms"))
    res = run_diff(None, str(spec), "HEAD")
    assert res.exit_code == 0
    assert res.diff["old"]["label"].endswith("npc.acspec@HEAD") and res.diff["old"]["status"] == "checked"
    assert {b["name"]: b["change"] for b in res.diff["bounds"]}["npc.tpot"] == "loosened"


def test_base_an_added_spec_and_an_invalid_one(repo):
    new = repo / "specs" / "new.acspec"
    shutil.copyfile(EXAMPLES_DIR / "cpu-vllm.acspec", new)
    res = run_diff(None, str(new), "HEAD")
    assert res.diff["old"]["status"] == "absent" and res.diff["verdict"]["old"] == "absent" and res.exit_code == 0
    assert "does not exist (the change adds it)" in render_diff_markdown(res.diff)
    new.write_text(new.read_text().replace("hardware  cpu", "hardware  cpux"))
    bad = run_diff(None, str(new), "HEAD")
    assert bad.exit_code == 2 and bad.diff["new"]["status"] == "invalid"
    assert any("new.acspec:" in e and "error" in e for e in bad.diff["new"]["errors"])
    assert not _errors(json.loads(render_diff_json(bad.diff)))


def test_base_rejects_what_is_not_a_revision(repo):
    spec = str(repo / "specs" / "npc.acspec")
    for rev in ("--output=/tmp/x", "no-such-rev", "HEAD main"):
        with pytest.raises(DiffError):
            read_revision(spec, rev)
    assert read_revision(spec, "HEAD").startswith("# Latency-bound")


def test_build_diff_of_two_absent_sides_is_refused(repo):
    with pytest.raises(DiffError):
        run_diff(None, str(repo / "specs" / "gone.acspec"), "HEAD")
    d = build_diff(side("a", "absent"), side("b", "invalid", errors=("b:1:1: error: x",)))
    assert d["verdict"] == {"old": "absent", "new": "invalid", "changed": True} and not _errors(d)


def test_cli_diff_exit_codes_and_formats(repo, tmp_path):
    acc = [sys.executable, "-m", "autocompress.cli"]
    spec = repo / "specs" / "npc.acspec"
    ok = subprocess.run(acc + ["diff", "--base", "HEAD", str(spec), "--format", "json"], capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"]["changed"] is False
    two = subprocess.run(acc + ["diff", str(spec)], capture_output=True, text=True, timeout=60)
    assert two.returncode == 2 and "OLD.acspec NEW.acspec" in two.stderr
    spec.write_text("model \"smollm2-135m\"\ntarget { hardware nope }\n")
    bad = subprocess.run(acc + ["diff", "--base", "HEAD", str(spec), "--out", str(tmp_path / "d.md")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "error" in bad.stderr and "INVALID" in (tmp_path / "d.md").read_text()
    assert f"wrote {tmp_path / 'd.md'}\n" in bad.stderr and bad.stdout == ""
