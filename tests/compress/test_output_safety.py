"""No user file is ever lost: which folders ``acc build`` and the exporter may replace.

``build.output.plan_output`` runs before any work; the exporter (``export.writer``) refuses on
its own too, so a library caller cannot delete a user's folder either. Each refusal names the
``output`` line of the spec (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autocompress.build.output import plan_output
from autocompress.diagnostics import SpecError
from autocompress.export.manifest import MANIFEST, manifest_dict, replaceable
from autocompress.lang.api import load_spec

SPEC = """\
model "smollm2-135m"
target {{
  hardware  cpu
  engine    vllm
  precision fp32
}}
workload ask {{
  concurrency 1
  input  128 tokens
  output 32 tokens
  tpot <= 70 ms
}}
output "{out}"
"""


def project(root: Path, out: str, name: str = "spec.acspec") -> Path:
    """A user's project: the spec next to files of theirs."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "notes.txt").write_text("my notes\n")
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "corpus.jsonl").write_text('{"text": "mine"}\n')
    spec = root / name
    spec.write_text(SPEC.format(out=out))
    return spec


def plan(spec: Path, force: bool = False, out: str | None = None):
    s = load_spec(str(spec))
    folder = out if out is not None else os.path.join(spec.parent, s.output)
    return plan_output(s, str(spec), folder, force, spec.read_text())


def refused(spec: Path, match: str, **kw) -> SpecError:
    with pytest.raises(SpecError) as e:
        plan(spec, **kw)
    text = e.value.render()
    assert match in text, text
    assert f"{spec}:13:8: error:" in text  # the output line, at its string
    return e.value


@pytest.mark.parametrize("out, why", [
    (".", "the folder of the spec or above it"),
    ("..", "the folder of the spec or above it"),
    ("../..", "the folder of the spec or above it"),
])
def test_the_spec_folder_and_its_ancestors_are_refused(tmp_path, monkeypatch, out, why):
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    refused(project(tmp_path / "a" / "b" / "proj", out), why)


def test_an_existing_project_folder_is_refused(tmp_path):
    spec = project(tmp_path / "proj", "data")
    refused(spec, "holds files and no autocompress-manifest.json")
    other = tmp_path / "other-project"
    (other / "src").mkdir(parents=True)
    (other / "src" / "main.py").write_text("print('mine')\n")
    refused(project(tmp_path / "proj2", str(other)), "autocompress did not write it")


def test_home_and_the_filesystem_root_are_refused(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    spec = project(tmp_path / "work" / "proj", str(home))
    refused(spec, "is the home folder or above it")
    refused(project(tmp_path / "work" / "proj3", str(tmp_path)), "is the home folder or above it")  # above home
    refused(project(tmp_path / "work" / "proj2", "/"), "is a filesystem root")


def test_a_file_and_a_symlink_are_refused(tmp_path):
    spec = project(tmp_path / "proj", "out/model")
    (tmp_path / "proj" / "out").mkdir()
    (tmp_path / "proj" / "out" / "model").write_text("a file\n")
    refused(spec, "it is a file, not a folder")
    (tmp_path / "proj" / "out" / "model").unlink()
    (tmp_path / "proj" / "out" / "model").symlink_to(tmp_path / "proj" / "data")
    refused(spec, "it is a symbolic link")


def test_new_empty_and_own_previous_outputs_are_accepted(tmp_path):
    spec = project(tmp_path / "proj", "out/model")
    first = plan(spec)
    assert first.folder == (tmp_path / "proj" / "out" / "model").resolve() and not first.replaces
    first.folder.mkdir(parents=True)
    assert not plan(spec).replaces  # empty: nothing to lose
    _mark(first.folder, spec)
    assert plan(spec).replaces  # an earlier output of this very spec


def test_another_specs_output_needs_force(tmp_path):
    spec = project(tmp_path / "proj", "out/model")
    other = project(tmp_path / "proj", "out/model", name="other.acspec")
    folder = tmp_path / "proj" / "out" / "model"
    folder.mkdir(parents=True)
    _mark(folder, other)
    refused(spec, "holds an autocompress output of other.acspec, not of spec.acspec; pass --force")
    assert plan(spec, force=True).replaces


def test_the_uniform_sibling_follows_the_same_rules(tmp_path):
    spec = project(tmp_path / "proj", "out/model")
    sibling = tmp_path / "proj" / "out" / "model-uniform"
    sibling.mkdir(parents=True)
    (sibling / "mine.txt").write_text("mine\n")
    refused(spec, "autocompress did not write it", out=str(sibling))


def _mark(folder: Path, spec: Path) -> None:
    import json

    (folder / MANIFEST).write_text(json.dumps(manifest_dict(folder, spec, "autocompress")))
    (folder / "config.json").write_text("{}")


def test_the_manifest_holds_no_absolute_path(tmp_path):
    spec = project(tmp_path / "proj", "out/model")
    m = manifest_dict(tmp_path / "proj" / "out" / "model", spec, "uniform")
    assert m["spec"] == os.path.join("..", "spec.acspec") and not os.path.isabs(m["spec"])


def test_the_exporter_never_replaces_a_users_folder(tmp_path):
    """The reproduction of the report: the exporter called on a folder holding a notes file."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import _exportkit as kit

    from autocompress.export.writer import export_decilm

    tok = kit.build_tokenizer(tmp_path / "tok")
    arch = kit.hetero_arch(vocab=512)
    from autocompress.export.decilm import decilm_config_from_architecture

    cfg = decilm_config_from_architecture(arch, **kit.GLOBALS)
    sd = kit.random_decilm(cfg).state_dict()
    user = tmp_path / "project"
    user.mkdir()
    (user / "notes.txt").write_text("my notes\n")
    with pytest.raises(FileExistsError, match="autocompress did not write it"):
        export_decilm(user, cfg, sd, tok, overwrite=True)
    assert (user / "notes.txt").read_text() == "my notes\n" and sorted(p.name for p in user.iterdir()) == ["notes.txt"]
    out = export_decilm(tmp_path / "model", cfg, sd, tok)
    assert replaceable(out) == (True, "") and (out / MANIFEST).is_file()
    again = export_decilm(out, cfg, {k: v + 1 for k, v in sd.items()}, tok, overwrite=True)  # ours: replaced
    assert again == out and not list(tmp_path.glob(".model.*"))
    del torch


def test_acc_build_refuses_before_any_work_and_the_files_survive(tmp_path, monkeypatch, capsys):
    """``acc build`` on a spec whose output is its own folder: exit 2 at the output line; nothing
    is written (no stage folder, no cache), every user file is still there."""
    pytest.importorskip("torch")
    from autocompress.cli.main import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    spec = project(tmp_path / "proj", ".")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    code = main(["build", str(spec), "--no-verify"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{spec}:13:8: error: output " in err and "building there would replace the spec itself" in err
    assert "  13 | output \".\"" in err and "Traceback" not in err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "proj" / "notes.txt").read_text() == "my notes\n"
