"""Every command given a bad argument answers with one line naming the path and what was expected,
exit 2, never a traceback: a missing path, a folder that is not a model (no config.json, no
weights), a file where a folder is expected or the reverse, an unreadable file (invalid UTF-8 or
JSON: the tests run as root, so a chmod 000 file would still be read), and a model of another
spec. A spec's own errors keep their located form (``path:line:col: error: ...``, then the source
line, caret and hint): one error line, the rest its context.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _clikit import cache_dir  # noqa: F401  (fixture)

import autocompress.evaluate.benchmarks.data as eval_data
from autocompress.cli.main import main

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 128,
         "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 32, "max_position_embeddings": 512, "tie_word_embeddings": True, "rms_norm_eps": 1e-5}

# a GPU target this machine does not have: ``acc verify`` predicts, it never starts an engine here
SPEC = """model "{parent}"
target {{
  hardware  rtx-5070
  engine    vllm
  precision bf16
}}
workload chat {{
  concurrency 1
  input  128 tokens
  output 32 tokens
  tpot <= 1 ms
}}
"""


def _model(folder: Path, weights: bool = True, **over) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**LLAMA, **over}))
    if weights:  # resolution reads config.json only; the weights' presence is what it checks
        (folder / "model.safetensors").write_bytes(b"\0" * 8)
    return folder


@pytest.fixture
def tree(tmp_path, cache_dir):  # noqa: F811
    t = tmp_path
    (t / "empty").mkdir()
    (t / "notjson").mkdir()
    (t / "notjson" / "config.json").write_text('{"vocab_size": ')
    (t / "cfgdir" / "config.json").mkdir(parents=True)
    _model(t / "weightless", weights=False)
    _model(t / "model")
    _model(t / "model3", num_hidden_layers=3)  # same vocabulary, another parent
    _model(t / "bigvocab", vocab_size=1024)
    (t / "file.json").write_text("{}")
    (t / "badutf.acspec").write_bytes(b'model "model"\n\xff\xfe\n')
    (t / "tiny.acspec").write_text(SPEC.format(parent="model"))
    (t / "other.acspec").write_text(SPEC.format(parent="model3"))
    (t / "smol.acspec").write_text(SPEC.format(parent="smollm2-135m"))
    # an acc build output of other.acspec (parent model3): its manifest names that spec
    _model(t / "built-other", num_hidden_layers=1)
    (t / "built-other" / "autocompress-manifest.json").write_text(json.dumps(
        {"schema": "autocompress/output/v1", "written_by": "autocompress", "spec": "other.acspec", "strategy": None}))
    _model(t / "badmanifest")
    (t / "badmanifest" / "autocompress-manifest.json").write_text("{not json")
    _model(t / "gone")
    (t / "gone" / "autocompress-manifest.json").write_text(json.dumps(
        {"schema": "autocompress/output/v1", "written_by": "autocompress", "spec": "deleted.acspec"}))
    return t


def _context(line: str) -> bool:
    """A located spec error's context lines: the source line, its caret, the hint, the count."""
    return (line.startswith("  hint:") or re.match(r"^\s*\d+ \| ", line) is not None
            or set(line.strip()) <= {"^"} or re.match(r"^\d+ errors? in ", line) is not None)


def _assert_one_line(argv: list[str], path: Path | str, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip() and not _context(ln)]
    assert code == 2, (argv, code, err)
    assert len(lines) == 1, (argv, err)
    assert str(path) in lines[0], (argv, err)
    return lines[0]


# (name, argv, the path the line must name, a word of what it says); {t}: the fixture's folder
CASES = [
    # acc verify OUT SPEC
    ("verify missing folder", ["verify", "{t}/nope", "{t}/tiny.acspec"], "{t}/nope", "no such folder"),
    ("verify a file", ["verify", "{t}/file.json", "{t}/tiny.acspec"], "{t}/file.json", "a file"),
    ("verify not a model", ["verify", "{t}/empty", "{t}/tiny.acspec"], "{t}/empty", "config.json missing"),
    ("verify config.json a folder", ["verify", "{t}/cfgdir", "{t}/tiny.acspec"], "{t}/cfgdir", "config.json"),
    ("verify invalid config.json", ["verify", "{t}/notjson", "{t}/tiny.acspec"], "{t}/notjson/config.json",
     "not valid JSON"),
    ("verify another vocabulary", ["verify", "{t}/model", "{t}/smol.acspec"], "{t}/model", "vocabulary"),
    ("verify built from another spec", ["verify", "{t}/built-other", "{t}/tiny.acspec"], "{t}/built-other",
     "other.acspec"),
    ("verify missing spec", ["verify", "{t}/model", "{t}/nope.acspec"], "{t}/nope.acspec", "not found"),
    ("verify spec a folder", ["verify", "{t}/model", "{t}/empty"], "{t}/empty", "folder"),
    ("verify spec not UTF-8", ["verify", "{t}/model", "{t}/badutf.acspec"], "{t}/badutf.acspec", "UTF-8"),
    # acc eval MODEL [--parent P]
    ("eval missing folder", ["eval", "{t}/nope"], "{t}/nope", "no such folder"),
    ("eval a file", ["eval", "{t}/file.json"], "{t}/file.json", "a file"),
    ("eval not a model", ["eval", "{t}/empty"], "{t}/empty", "no config.json"),
    ("eval config.json a folder", ["eval", "{t}/cfgdir"], "{t}/cfgdir", "no config.json"),
    ("eval invalid config.json", ["eval", "{t}/notjson"], "{t}/notjson/config.json", "JSON"),
    ("eval no weights", ["eval", "{t}/weightless"], "{t}/weightless", "no weights"),
    ("eval unreadable manifest", ["eval", "{t}/badmanifest"], "{t}/badmanifest/autocompress-manifest.json",
     "manifest"),
    ("eval manifest's spec gone", ["eval", "{t}/gone"], "{t}/gone/autocompress-manifest.json", "deleted.acspec"),
    ("eval missing parent", ["eval", "{t}/model", "--parent", "{t}/nope"], "{t}/nope", "not found"),
    ("eval parent not a model", ["eval", "{t}/model", "--parent", "{t}/empty"], "{t}/empty", "config.json"),
    ("eval parent invalid config", ["eval", "{t}/model", "--parent", "{t}/notjson"], "{t}/notjson", "JSON"),
    ("eval parent no weights", ["eval", "{t}/model", "--parent", "{t}/weightless"], "{t}/weightless", "no weights"),
    ("eval model of another parent", ["eval", "{t}/model", "--parent", "{t}/bigvocab"], "{t}/model", "vocabulary"),
    # acc profile --model M --out FILE (engine transformers: nothing is measured before these answers)
    ("profile missing model", ["profile", "--hardware", "cpu", "--engine", "transformers", "--model", "{t}/nope",
                               "--out", "{t}/p.json"], "{t}/nope", "not found"),
    ("profile not a model", ["profile", "--hardware", "cpu", "--engine", "transformers", "--model", "{t}/empty",
                             "--out", "{t}/p.json"], "{t}/empty", "config.json"),
    ("profile invalid config", ["profile", "--hardware", "cpu", "--engine", "transformers", "--model", "{t}/notjson",
                                "--out", "{t}/p.json"], "{t}/notjson", "JSON"),
    ("profile no weights", ["profile", "--hardware", "cpu", "--engine", "transformers", "--model", "{t}/weightless",
                            "--out", "{t}/p.json"], "{t}/weightless", "no weights"),
    ("profile out a folder", ["profile", "--hardware", "cpu", "--engine", "transformers", "--model", "{t}/model",
                              "--out", "{t}/empty"], "{t}/empty", "a folder"),
    ("profile missing gguf", ["profile", "--hardware", "cpu", "--engine", "transformers", "--model", "{t}/x.gguf",
                              "--out", "{t}/p.json"], "{t}/x.gguf", "not found"),
    # acc diff OLD NEW
    ("diff missing spec", ["diff", "{t}/nope.acspec", "{t}/tiny.acspec"], "{t}/nope.acspec", "no such file"),
    ("diff spec a folder", ["diff", "{t}/empty", "{t}/tiny.acspec"], "{t}/empty", "a folder"),
    ("diff new spec not UTF-8", ["diff", "{t}/tiny.acspec", "{t}/badutf.acspec"], "{t}/badutf.acspec", "UTF-8"),
    # acc check / fmt / build SPEC
    ("check missing spec", ["check", "{t}/nope.acspec"], "{t}/nope.acspec", "no such file"),
    ("check spec a folder", ["check", "{t}/empty"], "{t}/empty", "folder"),
    ("check spec not UTF-8", ["check", "{t}/badutf.acspec"], "{t}/badutf.acspec", "UTF-8"),
    ("fmt missing spec", ["fmt", "{t}/nope.acspec"], "{t}/nope.acspec", "no such file"),
    ("fmt spec a folder", ["fmt", "{t}/empty"], "{t}/empty", "folder"),
    ("fmt spec not UTF-8", ["fmt", "{t}/badutf.acspec"], "{t}/badutf.acspec", "UTF-8"),
    ("build missing spec", ["build", "{t}/nope.acspec"], "{t}/nope.acspec", "not found"),
    ("build spec a folder", ["build", "{t}/empty"], "{t}/empty", "folder"),
    ("build spec not UTF-8", ["build", "{t}/badutf.acspec"], "{t}/badutf.acspec", "UTF-8"),
]


@pytest.mark.parametrize("name, argv, path, says", CASES, ids=[c[0] for c in CASES])
def test_a_bad_argument_is_one_line_naming_the_path_and_exit_2(tree, capsys, monkeypatch, name, argv, path, says):
    if argv[0] == "eval":  # as where the benchmark data is installed: the model's checks come after it
        monkeypatch.setattr(eval_data, "data_root", lambda: tree / "eval-data")
    if argv[0] == "build":
        pytest.importorskip("torch")
    line = _assert_one_line([a.format(t=tree) for a in argv], path.format(t=tree), capsys)
    assert says in line, line
