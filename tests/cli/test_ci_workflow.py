"""examples/ci/acspec-review.yml: its review script runs, as written in the file, on a git
repository with changed example specs; it fails on an invalid spec, not on an infeasible one
unless configured; it runs nothing from the pull request but `acc check` and `acc diff`, both
confined to the checkout, so a spec naming a file outside it is refused and the report holds no
byte of that file."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from _clikit import EXAMPLES, REPO

yaml = pytest.importorskip("yaml")
WORKFLOW = REPO / "examples" / "ci" / "acspec-review.yml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps() -> list[dict]:
    return _workflow()["jobs"]["review"]["steps"]


def _review_step() -> dict:
    return next(s for s in _steps() if s.get("id") == "review")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def pr_repo(tmp_path):
    """A repository whose base commit holds npc-5080.acspec; the pull request's commit is made by each test."""
    if shutil.which("git") is None or shutil.which("bash") is None:
        pytest.skip("needs git and bash")
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    shutil.copyfile(EXAMPLES / "npc-5080.acspec", repo / "specs" / "npc.acspec")
    (repo / "README.md").write_text("specs\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


def _run_review(repo: Path, base: str, tmp_path: Path, strict: bool = False) -> tuple[subprocess.CompletedProcess,
                                                                                      dict, str]:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "pull request")
    step = _review_step()
    outputs, summary = tmp_path / "github-output", tmp_path / "summary"
    env = {**os.environ, **_workflow()["env"], **{k: v for k, v in step.get("env", {}).items() if "${{" not in str(v)},
           "BASE_SHA": base, "GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": str(summary),
           "GITHUB_WORKSPACE": str(repo),  # what Actions sets: the checkout
           "ACSPEC_FAIL_ON_INFEASIBLE": "true" if strict else "false",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}  # the installed `acc`
    p = subprocess.run(["bash", "-c", step["run"]], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    got = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    report = (repo / got["report"]).read_text()
    assert summary.read_text() == report  # the job summary carries the same report (fork pull requests)
    return p, got, report


def test_review_of_a_changed_and_an_added_spec(pr_repo, tmp_path):
    repo, base = pr_repo
    spec = repo / "specs" / "npc.acspec"
    spec.write_text(spec.read_text().replace("tpot <= 0.9 ms", "tpot <= 0.95 ms"))
    shutil.copyfile(EXAMPLES / "cpu-vllm.acspec", repo / "specs" / "cpu.acspec")
    p, out, report = _run_review(repo, base, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert out["failed"] == "false"
    assert report.startswith("<!-- acspec-review -->\n## acspec review") and "2 changed spec(s)" in report
    assert "### `specs/cpu.acspec`" in report and "### `specs/npc.acspec`" in report
    assert report.count("**acc check**: feasible (exit 0)") == 2
    assert report.count("## autocompress check:") == 2  # each spec's feasibility report
    assert "## acc diff: `specs/npc.acspec@" in report and "| npc.tpot | <= 0.9 ms → <= 0.95 ms |" in report
    assert "looser" in report and "does not exist (the change adds it)" in report
    assert not list(repo.glob("*.md.tmp")) and not (repo / "check.md").exists()


def test_an_infeasible_spec_fails_only_when_configured(pr_repo, tmp_path):
    repo, base = pr_repo
    shutil.copyfile(EXAMPLES / "npc-5070-infeasible.acspec", repo / "specs" / "tight.acspec")
    p, out, report = _run_review(repo, base, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert out["failed"] == "false" and "**acc check**: infeasible (exit 1)" in report
    assert "What would make the new contract feasible" in report
    (tmp_path / "strict").mkdir()
    (repo / "specs" / "tight.acspec").write_text((repo / "specs" / "tight.acspec").read_text() + "\n")
    _, strict, _ = _run_review(repo, base, tmp_path / "strict", strict=True)
    assert strict["failed"] == "true"


def test_an_invalid_spec_fails_the_check_with_its_errors(pr_repo, tmp_path):
    repo, base = pr_repo
    spec = repo / "specs" / "npc.acspec"
    spec.write_text(spec.read_text().replace("hardware  rtx-5080", "hardware  rtx-5008"))
    p, out, report = _run_review(repo, base, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert out["failed"] == "true" and "**acc check**: INVALID (exit 2)" in report
    assert "specs/npc.acspec:7:" in report and "did you mean" in report  # file:line:col and the hint
    assert "INVALID" in report.split("## acc diff:")[1]  # the diff shows the new side as invalid


def test_a_spec_naming_files_outside_the_checkout_is_refused_without_a_byte_of_them(pr_repo, tmp_path):
    repo, base = pr_repo
    marker = "MARK" + uuid.uuid4().hex
    secret = tmp_path / "runner-secret"
    secret.mkdir()
    (secret / "config.json").write_text(json.dumps({"model_type": marker, "hidden_size": marker}))
    (repo / "specs" / "vendor").symlink_to(secret)  # a symlink the pull request adds, pointing out
    text = (repo / "specs" / "npc.acspec").read_text()
    (repo / "specs" / "abs.acspec").write_text(text.replace('model "smollm2-135m"', f'model "{secret}/config.json"'))
    (repo / "specs" / "link.acspec").write_text(text.replace('model "smollm2-135m"', 'model "vendor/config.json"'))
    p, out, report = _run_review(repo, base, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert out["failed"] == "true" and report.count("**acc check**: INVALID (exit 2)") == 2
    line = 1 + text[:text.index('model "')].count("\n")
    assert f"specs/abs.acspec:{line}:7: error: parent model '{secret}/config.json' is outside the --confine" in report
    assert f"specs/link.acspec:{line}:7: error: parent model 'vendor/config.json' is outside the --confine" in report
    assert marker not in report and marker not in p.stdout + p.stderr


def test_the_workflow_runs_nothing_from_the_pull_request():
    wf = _workflow()
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as true
    assert set(triggers) == {"pull_request"}  # never pull_request_target with the PR's code checked out
    assert wf["permissions"] == {"contents": "read", "pull-requests": "write"}
    steps = _steps()
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["persist-credentials"] is False
    runs = "\n".join(s.get("run", "") for s in steps)
    assert not re.search(r"pip install[^\n]*(\s\.(\s|$)|-e\s|\./)", runs)  # never installs the checkout
    assert re.search(r"pip install [^\n]*\"\$AUTOCOMPRESS_PIP\"", runs) and "==" in wf["env"]["AUTOCOMPRESS_PIP"]
    used = set(re.findall(r"(?m)^\s*acc (\w+)", runs))
    assert used == {"check", "diff"}, used
    calls = re.findall(r"(?m)^\s*acc \w+[^\n]*", runs)
    assert calls and all('--confine "$confine"' in c for c in calls), calls  # every spec read is confined
    assert 'confine="${GITHUB_WORKSPACE:-$PWD}"' in runs  # to the checkout
    assert "python -m autocompress" not in runs and wf["env"]["PYTHONSAFEPATH"] == "1"
    fail = steps[-1]
    assert fail["if"] == "steps.review.outputs.failed == 'true'" and "exit 1" in fail["run"]
