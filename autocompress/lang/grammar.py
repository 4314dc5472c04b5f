"""The grammar (``grammar/acspec.lark``) and its parser, loaded once per process, and what the
rest of the language reads off the grammar.

The parser comes from the grammar's LALR tables, shipped as JSON (``tables``: checked against the
grammar's sha256; no pickle), so ``acc check`` starts fast. ``grammar_names`` gives the literal
names a rule allows (hardware, engines, precisions, ...), which the checker and its "did you
mean" hints use; ``SECTIONS`` and ``HOMES`` let error messages say where a setting belongs.

Run as a script, it regenerates the shipped tables after an edit of the grammar:

    python -m autocompress.lang.grammar
"""

from __future__ import annotations

import functools

from lark import Lark

from autocompress._resources import resource
from autocompress.lang import tables

SECTIONS = ("model", "target", "workload", "search", "distill", "evaluate", "output")
# Where each setting lives, for "'concurrency' is a workload setting".
HOMES = {
    "hardware": "target", "engine": "target", "precision": "target", "kv_cache": "target",
    "tensor_parallel": "target", "memory": "target", "profile": "target",
    "concurrency": "workload", "batch": "workload", "input": "workload", "prefix_cache": "workload",
    "ttft": "workload", "tpot": "workload", "e2e": "workload", "throughput": "workload",
    "strategy": "search", "axes": "search", "steps": "search", "seed": "search", "temperature": "search",
    "finalists": "search",
    "data": "distill", "tokens": "distill", "seq_len": "distill", "lr": "distill",
}


@functools.lru_cache(maxsize=1)
def grammar_text() -> str:
    return resource("grammar/acspec.lark").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def lark_parser() -> Lark:
    return tables.load(grammar_text())


@functools.lru_cache(maxsize=None)
def grammar_names(rule: str) -> tuple[str, ...]:
    """The literal names the grammar lists for ``rule`` (e.g. 'hardware_name'), in order."""
    lark = lark_parser()
    literal = {t.name: t.pattern.value for t in lark.terminals if t.pattern.type == "str"}
    out: list[str] = []
    for r in lark.rules:
        if r.origin.name == rule:
            for sym in r.expansion:
                if sym.is_term and sym.name in literal and literal[sym.name] not in out:
                    out.append(literal[sym.name])
    return tuple(out)


if __name__ == "__main__":
    tables.write_shipped(grammar_text())
    print(f"wrote {tables.SHIPPED}")
