"""A tiny random Llama parent (HF folder + offline tokenizer), data files and a contract it misses."""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
import textwrap
from pathlib import Path

SPEC = """\
model "parent"
target {
  hardware  rtx-5070
  engine    vllm
  precision bf16
}
workload chat {
  concurrency 1
  input  128 tokens
  output 32 tokens
  tpot <= 0.55 ms      # the parent: 0.572 ms predicted
}
search   { steps 3  seed 0 }
distill  { data "data/*"  steps 6  seq_len 32 tokens  batch 2 }
evaluate { tokens 256 tokens }
output "out/tiny"
"""


def make_project(root: Path) -> Path:
    """Write parent/, data/ and spec.acspec under ``root``; return the spec path."""
    import pydoc_data.topics as topics
    import torch
    from _exportkit import build_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    build_tokenizer(root / "parent")
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(root / "parent")
    # a license the export must inherit (stated in the card and config.json, files copied)
    (root / "parent" / "README.md").write_text("---\nlicense: apache-2.0\n---\n# tiny parent\n")
    (root / "parent" / "LICENSE").write_text("Apache License, Version 2.0 (test copy)\n")
    (root / "data").mkdir()
    (root / "data" / "prose.txt").write_text("\n\n".join(list(topics.topics.values())[:40]))
    docs = []
    for mod in (json, textwrap, inspect):
        for _, f in sorted(vars(mod).items()):
            if inspect.isfunction(f) and f.__module__ == mod.__name__:
                docs.append(json.dumps({"text": inspect.getsource(f), "kind": "code"}))
    (root / "data" / "code.jsonl").write_text("\n".join(docs))
    spec = root / "spec.acspec"
    spec.write_text(SPEC)
    return spec


def count_calls(monkeypatch, module: str, name: str) -> list:
    """Count the calls of ``module.name`` made through any module of the package that bound it (its
    own and every ``from module import name``); the returned list grows by one per call. Import
    the modules of the path under test first: only modules already loaded are patched."""
    import importlib

    fn = getattr(importlib.import_module(module), name)
    calls: list = []

    def counted(*a, **k):
        calls.append(a)
        return fn(*a, **k)

    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("autocompress") and getattr(mod, name, None) is fn:
            monkeypatch.setattr(mod, name, counted)
    return calls


def count_parses(monkeypatch) -> tuple[list, list]:
    """(spec parses, parent resolutions) from now on: every parse of spec text goes through
    ``lang.load.parse_spec_with_warnings``, every parent through ``parents.resolve.resolve_parent``."""
    import autocompress.checker  # noqa: F401  (a check's miss imports it: loaded, so patched)
    import autocompress.cli.build_cmd  # noqa: F401
    import autocompress.measure.verify  # noqa: F401

    return (count_calls(monkeypatch, "autocompress.lang.load", "parse_spec_with_warnings"),
            count_calls(monkeypatch, "autocompress.parents.resolve", "resolve_parent"))


def weights_hash(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def shortlist_choice(sl: dict) -> int:
    """The finalist a shortlist must build, recomputed from its table: the least KL after the short
    distillation, unless a runner-up within the default 2% went to a runoff (``build.runoff``),
    whose least KL after the longer distillation wins. Asserts the runoff ran exactly when due."""
    from autocompress.build import runoff

    rows = sl["finalists"]
    first = min(range(len(rows)), key=lambda j: (rows[j]["kl_after"], j))
    assert sl.get("chosen_first_round", sl["chosen"]) == first
    ro = sl.get("runoff")
    assert runoff.entrants({**sl, "chosen": first}, ro["margin"] if ro else 0.02) == (ro["entrants"] if ro else [])
    if not ro:
        return first
    return ro["entrants"][min(range(2), key=lambda j: (ro["kl_after"][j], j))]
