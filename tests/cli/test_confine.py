"""``acc check --confine DIR`` and ``acc diff --confine DIR``: every way a spec can name a path
that resolves outside DIR is refused at that path's line:col (exit 2), the output holds no byte of
the named file, and the answer is the same whether that file exists or not; aliases and paths
inside DIR still check.

The ways, for each kind of path a spec names (grammar/acspec.lark: ``model``, ``target { profile }``,
``distill { data }``, ``evaluate { data }``, ``output``; the model as a config.json, a .gguf or a
folder): a relative path with ``..``, an absolute path, a leading ``~``, a symlink inside DIR to a
file or folder outside, a symlinked parent folder; and beside them: a folder inside DIR whose
config.json is a symlink out, a wildcard followed by ``..``, the spec file itself outside, and the
old text of ``acc diff --base REV`` and ``acc diff OLD NEW``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import uuid
from pathlib import Path

import pytest
from _clikit import EXAMPLES, cache_dir  # noqa: F401 - fixture

from autocompress.cli.main import main
from autocompress.cost.profile import PROFILE_DIR
from autocompress.parents.aliases import ALIASES

HEAD = 'model "{model}"\n\ntarget {{\n  hardware  cpu\n  engine    vllm\n  precision fp32\n{profile}}}\n\n'
WORKLOAD = "workload ask {\n  concurrency 1\n  input 256 tokens\n  output 64 tokens\n  tpot <= 250 ms\n}\n"
KINDS = ("model-config", "model-gguf", "model-folder", "profile", "distill-data", "evaluate-data", "output")
FORMS = ("dotdot", "absolute", "home", "symlink", "symlinked-folder")
OUTSIDE_MSG = "is outside the --confine folder"


def spec_text(model: str = "smollm2-135m", profile: str | None = None, distill: str | None = None,
              evaluate: str | None = None, output: str | None = None) -> str:
    text = HEAD.format(model=model, profile=f'  profile   "{profile}"\n' if profile else "") + WORKLOAD
    if distill:
        text += f'\ndistill {{ data "{distill}" }}\n'
    if evaluate:
        text += f'\nevaluate {{ data "{evaluate}" }}\n'
    if output:
        text += f'\noutput "{output}"\n'
    return text


def where(text: str, value: str) -> tuple[int, int]:
    """1-based line and column of the string ``"value"`` in ``text`` (the column of its quote)."""
    at = text.index(f'"{value}"')
    line = text.count("\n", 0, at) + 1
    return line, at - (text.rfind("\n", 0, at) + 1) + 1


@pytest.fixture
def world(tmp_path, monkeypatch, cache_dir):  # noqa: F811
    """DIR (``repo``) beside a folder outside it whose files all carry a random marker; HOME is
    that outside folder, so ``~/...`` names existing files."""
    marker = "MARK" + uuid.uuid4().hex
    repo, out = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    monkeypatch.setenv("HOME", str(out))
    monkeypatch.chdir(repo)

    def fill() -> None:
        (out / "hf").mkdir(parents=True, exist_ok=True)
        config = {"model_type": marker, "hidden_size": marker, "_name_or_path": marker}
        for f in (out / "secret.json", out / "hf" / "config.json"):
            f.write_text(json.dumps(config))
        (out / "secret.gguf").write_bytes(marker.encode() * 4)
        (out / "prof.json").write_text(json.dumps({"name": marker, "engine": marker}))
        (out / "data.jsonl").write_text(json.dumps({"text": marker}) + "\n")
        (out / "evil.acspec").write_text(f'model "{marker}"\n{marker} {{\n')

    fill()
    return repo, out, marker, fill


TARGET = {"model-config": "secret.json", "model-gguf": "secret.gguf", "model-folder": "hf", "profile": "prof.json",
          "distill-data": "data.jsonl", "evaluate-data": "data.jsonl", "output": "hf"}


def written(kind: str, form: str, repo: Path, out: Path) -> str:
    """The path text of ``form`` naming the outside file of ``kind``; symlinks made in DIR."""
    name = TARGET[kind]
    if form == "dotdot":
        return f"../outside/{name}"
    if form == "absolute":
        return str(out / name)
    if form == "home":
        return f"~/{name}"
    if form == "symlink":  # a file (or folder) in DIR that is a symlink to the outside one
        link = repo / f"link-{kind}{Path(name).suffix}"
        link.symlink_to(out / name)
        return link.name
    assert form == "symlinked-folder"  # a folder of DIR that is a symlink to the outside folder
    (repo / "shared").symlink_to(out)
    return f"shared/{name}"


def spec_for(kind: str, value: str) -> str:
    if kind.startswith("model"):
        return spec_text(model=value)
    return spec_text(**{{"profile": "profile", "distill-data": "distill", "evaluate-data": "evaluate",
                         "output": "output"}[kind]: value})


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def assert_refused(rc: int, stdout: str, stderr: str, marker: str, loc: str) -> None:
    assert rc == 2, stderr
    assert f"{loc}: error:" in stderr and OUTSIDE_MSG in stderr, stderr
    assert marker not in stdout + stderr
    assert "Traceback" not in stderr and "internal error" not in stderr


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_outside_path_is_refused_at_its_place_and_says_nothing_of_the_file(world, capsys, kind, form):
    repo, out, marker, fill = world
    value = written(kind, form, repo, out)
    text = spec_for(kind, value)
    (repo / "spec.acspec").write_text(text)
    line, col = where(text, value)
    there = run(capsys, "check", "--confine", str(repo), "spec.acspec")
    assert_refused(*there, marker, f"spec.acspec:{line}:{col}")
    shutil.rmtree(out)  # the same spec, the file it names gone: the same answer, byte for byte
    assert run(capsys, "check", "--confine", str(repo), "spec.acspec") == there
    out.mkdir()  # an empty folder where the files were: the same again
    assert run(capsys, "check", "--confine", str(repo), "spec.acspec") == there
    fill()
    # the same spec checked through acc diff (old and new side) is refused there too
    rc, stdout, stderr = run(capsys, "diff", "--confine", str(repo), "spec.acspec", "spec.acspec")
    assert rc == 2 and marker not in stdout + stderr and f"spec.acspec:{line}:{col}: error:" in stderr


def test_a_folder_inside_whose_config_json_points_out(world, capsys):
    repo, out, marker, _ = world
    (repo / "hfin").mkdir()
    (repo / "hfin" / "config.json").symlink_to(out / "hf" / "config.json")
    (repo / "hfin" / "model.safetensors").write_bytes(b"")
    text = spec_text(model="hfin")
    (repo / "spec.acspec").write_text(text)
    there = run(capsys, "check", "--confine", str(repo), "spec.acspec")
    assert_refused(*there, marker, "spec.acspec:%d:%d" % where(text, "hfin"))
    (out / "hf" / "config.json").unlink()
    assert run(capsys, "check", "--confine", str(repo), "spec.acspec") == there


@pytest.mark.parametrize("value", ["corpus/*/../../outside/data.jsonl", "corpus/../../outside/*.jsonl",
                                   "./../outside/data.jsonl", "specs/../../outside/data.jsonl",
                                   "loop/x.jsonl", "a\\b/../../../outside/data.jsonl"])
def test_more_ways_out(world, capsys, value):
    repo, out, marker, _ = world
    (repo / "specs").mkdir()
    (repo / "loop").symlink_to("loop")  # a symlink loop inside DIR: refused like a way out
    text = spec_text(distill=value)
    (repo / "spec.acspec").write_text(text)
    assert_refused(*run(capsys, "check", "--confine", str(repo), "spec.acspec"), marker,
                   "spec.acspec:%d:%d" % where(text, value))


def test_every_outside_path_of_one_spec_is_reported(world, capsys):
    repo, _, marker, _ = world
    text = spec_text(model="../outside/secret.json", profile="/etc/passwd", distill="../outside/data.jsonl",
                     output="../out")
    (repo / "spec.acspec").write_text(text)
    rc, stdout, stderr = run(capsys, "check", "--confine", str(repo), "spec.acspec")
    assert rc == 2 and stderr.count(OUTSIDE_MSG) == 4 and "4 errors in spec.acspec" in stderr
    assert marker not in stdout + stderr


@pytest.mark.parametrize("how", ["outside", "symlink-in", "symlink-in-missing"])
def test_the_spec_file_itself_must_be_inside(world, capsys, how):
    repo, out, marker, _ = world
    spec = out / "evil.acspec"
    if how != "outside":
        (repo / "evil.acspec").symlink_to(spec if how == "symlink-in" else out / "gone.acspec")
        spec = repo / "evil.acspec"
    rc, stdout, stderr = run(capsys, "check", "--confine", str(repo), str(spec))
    assert rc == 2 and "the spec file is outside the --confine folder" in stderr
    assert marker not in stdout + stderr
    if how == "symlink-in":
        spec.unlink()
        spec.symlink_to(out / "gone.acspec")
        assert run(capsys, "check", "--confine", str(repo), str(spec)) == (rc, stdout, stderr)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_diff_base_text_is_confined_too(world, capsys):
    """The old spec comes from git (``--base REV``): the paths it names are held to DIR as well, and
    a refused new side is exit 2."""
    repo, out, marker, _ = world
    bad = spec_text(model="../outside/secret.json")
    (repo / "spec.acspec").write_text(bad)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    (repo / "spec.acspec").write_text(spec_text())
    rc, stdout, stderr = run(capsys, "diff", "--confine", str(repo), "--base", "HEAD", "spec.acspec")
    old_loc = "spec.acspec@HEAD:%d:%d: error:" % where(bad, "../outside/secret.json")
    assert rc == 0 and old_loc in stderr and OUTSIDE_MSG in stderr  # the new side is valid
    assert marker not in stdout + stderr
    # the other way round: the new text names the outside file
    _git(repo, "commit", "-qam", "fixed")
    (repo / "spec.acspec").write_text(bad)
    rc, stdout, stderr = run(capsys, "diff", "--confine", str(repo), "--base", "HEAD", "spec.acspec")
    assert rc == 2 and "spec.acspec:%d:%d: error:" % where(bad, "../outside/secret.json") in stderr
    assert marker not in stdout + stderr


def test_aliases_and_paths_inside_still_check(world, capsys):
    repo, _, marker, _ = world
    if ALIASES["smollm2-135m"].locate() is None:
        pytest.skip("the smollm2-135m alias's package is not installed")
    (repo / "specs" / "cfg").mkdir(parents=True)
    shutil.copyfile(EXAMPLES / "configs" / "gemma-3-270m.json", repo / "specs" / "cfg" / "gemma.json")
    shutil.copyfile(PROFILE_DIR / "cpu-vllm-default.json", repo / "prof.json")
    (repo / "specs" / "cfg-link.json").symlink_to("cfg/gemma.json")  # a symlink that stays inside
    (repo / "specs" / "here").symlink_to(repo)  # a symlinked folder that points back inside
    cases = {
        "alias": spec_text(),
        "paths": spec_text(model="cfg/gemma.json", profile="../prof.json", distill="../data/*.jsonl",
                           evaluate="here/data/held.jsonl", output="../out/model"),
        "symlinks": spec_text(model="cfg-link.json", profile=str(repo / "specs" / "here" / "prof.json")),
    }
    for name, text in cases.items():
        (repo / "specs" / f"{name}.acspec").write_text(text)
        rc, stdout, stderr = run(capsys, "check", "--confine", str(repo), "--format", "json",
                                 f"specs/{name}.acspec")
        assert rc in (0, 1, 4), (name, stderr)
        assert json.loads(stdout)["verdict"] in ("feasible", "infeasible", "not_found")
        assert OUTSIDE_MSG not in stderr
    rc, stdout, stderr = run(capsys, "diff", "--confine", str(repo), "specs/alias.acspec", "specs/paths.acspec")
    assert rc == 0 and OUTSIDE_MSG not in stderr, stderr


def test_confine_must_name_a_folder(world, capsys):
    repo, _, _, _ = world
    (repo / "spec.acspec").write_text(spec_text())
    with pytest.raises(SystemExit) as e:
        main(["check", "--confine", str(repo / "nope"), "spec.acspec"])
    assert e.value.code == 2 and "not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["config-values", "config-type", "gguf-magic", "gguf-arch", "profile-values"])
def test_no_message_quotes_a_value_of_the_named_file(world, capsys, case):
    """Without --confine too: errors about a file the spec names say which field and what was
    expected, never what the file holds."""
    repo, _, marker, _ = world
    if case == "config-values":
        body = {"model_type": "llama", "hidden_size": marker, "num_attention_heads": 4, "vocab_size": 10,
                "num_hidden_layers": 2, "intermediate_size": 8}
        (repo / "c.json").write_text(json.dumps(body))
        text = spec_text(model="c.json")
    elif case == "config-type":
        (repo / "c.json").write_text(json.dumps({"model_type": marker, "layer_types": [marker]}))
        text = spec_text(model="c.json")
    elif case == "gguf-magic":
        (repo / "m.gguf").write_bytes(marker.encode())
        text = spec_text(model="m.gguf")
    elif case == "gguf-arch":
        key, value = b"general.architecture", marker.encode()  # a GGUF v3 header with that one key
        (repo / "m.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
                                      + struct.pack("<IQ", 8, len(value)) + value)
        text = spec_text(model="m.gguf")
    else:
        prof = json.loads((PROFILE_DIR / "cpu-vllm-default.json").read_text())
        prof["efficiency"]["compute"] = marker
        prof["kernel"][marker] = 1.0
        prof["hardware"] = marker
        (repo / "prof.json").write_text(json.dumps(prof))
        text = spec_text(profile="prof.json")
    (repo / "spec.acspec").write_text(text)
    for confine in ([], ["--confine", str(repo)]):
        rc, stdout, stderr = run(capsys, "check", "--no-cache", *confine, "spec.acspec")
        assert rc == 2, stderr
        assert marker not in stdout + stderr, stderr
        assert "Traceback" not in stderr and "internal error" not in stderr
