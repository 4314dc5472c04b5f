"""Known syntax mistakes, as data: (code, message, hint, [malformed examples]).

``match`` finds the entry whose example fails in the same parser state with the same unexpected
token type (or character) as the user's error, in the spirit of Lark's
``UnexpectedInput.match_examples`` but keyed on (state, token) rather than state alone, so
that e.g. ``memory: 512`` and ``memory 512`` get different messages. A second pass matches on
the unexpected character alone (';' is wrong everywhere). Messages may use ``{prev}`` (the
token before the error), ``{got}`` (the unexpected text) and ``{unquoted}``.
``tests/lang/test_grammar.py`` walks the table: every example must produce its own message.
"""

from __future__ import annotations

from dataclasses import dataclass

from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken


@dataclass(frozen=True)
class Mistake:
    code: str
    message: str
    hint: str
    examples: tuple[str, ...]


_W = "workload w { concurrency 1 input 8 tokens output 8 tokens "
_SETTINGS = ("hardware rtx-5080", "engine vllm", "precision bf16", "kv_cache fp8", "tensor_parallel 1",
             "profile \"p.json\"")

MISTAKES: tuple[Mistake, ...] = (
    # Generic character mistakes first: the character-only pass takes the first entry.
    Mistake("colon", "no ':' after '{prev}': a setting and its value are separated by a space",
            "delete the ':'",
            tuple(f"target {{ {s.split()[0]}: {s.split()[1]} }}" for s in _SETTINGS)
            + ("workload w { concurrency: 4 }", "workload w { batch: 4 }", "workload w { input: 8 tokens }",
               "workload w { output: 8 tokens }", "workload w { prefix_cache: 50% }", "model: \"x\"",
               "output: \"x\"", "search { steps: 3 }", "search { strategy: uniform }", "search { axes: ffn }",
               "distill { steps: 3 }", "distill { data: \"x\" }", "distill { lr: 0.1 }", "target { memory: 1 GiB }")),
    Mistake("yaml-block", "'{prev}' opens a block with '{{', not ':'",
            "write '{prev} {{' ... '}}'; settings go inside the braces, one per line",
            ("target:", "search:", "distill:", "evaluate:", "workload w:")),
    Mistake("semicolon", "no ';' needed: settings are separated by spaces or newlines",
            "delete the ';'", ("workload w { concurrency 4; }", "target { engine vllm; }", "model \"x\";")),
    Mistake("equals", "no '=' between '{prev}' and its value", "write '{prev} <value>', e.g. 'engine vllm'",
            ("target { engine = vllm }", "workload w { concurrency = 4 }", "target { hardware = rtx-5080 }",
             "search { steps = 4 }", "model = \"x\"")),
    Mistake("strict-less", "bounds are inclusive: use '<=', not '<'", "write e.g. 'ttft <= 15 ms'",
            ("workload w { ttft < 15 ms }", "workload w { tpot p99 < 2 ms }", "target { memory < 1 GiB }")),
    Mistake("strict-greater", "bounds are inclusive: use '>=', not '>'", "write e.g. 'throughput >= 2000 tok/s'",
            ("workload w { throughput > 5 tok/s }", "workload w { throughput p50 > 5 tok/s }")),
    Mistake("equals-bound", "a bound needs '<=' (latency, memory) or '>=' (throughput), not '='",
            "write e.g. 'ttft <= 15 ms'", ("workload w { ttft = 15 ms }", "workload w { ttft == 15 ms }",
                                           "target { memory = 1 GiB }", "workload w { tpot p99 = 2 ms }")),
    Mistake("unterminated-string", "unterminated string: a '\"' opens a string that never closes on this line",
            "add the closing '\"'", ("model \"smollm2", "output \"out/x", "distill { data \"a.txt }")),
    Mistake("slash-comment", "comments start with '#', not '//'", "write '# ...'", ("// a comment",)),
    Mistake("missing-compare", "missing '<=' or '>=' before the value of '{prev}'",
            "bounds are written 'ttft <= 15 ms', 'throughput >= 2000 tok/s', 'memory <= 512 MiB'",
            ("target { memory 512 MiB }", _W + "ttft 15 ms }", _W + "tpot 2 ms }", _W + "e2e 1 s }",
             _W + "throughput 9 tok/s }", _W + "tpot p99 2 ms }")),
    Mistake("quoted-name", "names are written without quotes: {unquoted}",
            "quotes are for paths and the model; write {unquoted}",
            ("target { hardware \"rtx-5070\" }", "target { engine \"vllm\" }", "target { precision \"bf16\" }",
             "target { kv_cache \"fp8\" }", "workload \"npc\" { }", "search { strategy \"uniform\" }",
             "search { axes \"ffn\" }", "search { axes ffn, \"depth\" }")),
    Mistake("unquoted-path", "'{prev}' takes a quoted string: \"{got}\"", "write {prev} \"{got}\"",
            ("model smollm2", "output out", "target { profile p }", "distill { data train }",
             "evaluate { data x }", "target { hardware custom gpu }")),
    Mistake("missing-comma", "separate list entries with ','", "write e.g. 'axes hidden, ffn' or 'data \"a\", \"b\"'",
            ("search { axes hidden ffn }", "search { axes hidden depth }", "search { axes hidden kv_heads }",
             "search { axes hidden x }", "distill { data \"a\" \"b\" }", "evaluate { data \"a\" \"b\" }")),
    Mistake("workload-name", "a workload needs a name: 'workload <name> {{'",
            "e.g. 'workload chat {{ ... }}'; names are identifiers like chat, npc, batch-serving",
            ("workload {", "workload { concurrency 1 }")),
    Mistake("missing-brace", "'{prev}' is a block: its settings go inside '{{ ... }}'",
            "write '{prev} {{' on this line and close it with '}}'",
            tuple(f"target {s}" for s in _SETTINGS) + ("search steps 3", "distill steps 3", "evaluate tokens 8 tokens",
                                                        "target memory <= 1 GiB", "workload w concurrency 4")),
    Mistake("stray-brace", "unmatched '}': no block is open here", "delete it, or check the block above",
            ("}", "model \"x\" }", "target { } }", "output \"o\" }")),
    Mistake("percent-before", "a share is written '<number>%', e.g. 'prefix_cache 80%'", "",
            ("workload w { prefix_cache %80 }",)),
)


@dataclass(frozen=True)
class Key:
    state: int | None
    what: str  # token type, '$END', or 'char:<c>'


def key_of(e: UnexpectedInput, position: int | None) -> Key:
    if isinstance(e, UnexpectedCharacters):
        text = e.char if hasattr(e, "char") else "?"
        return Key(position, "char:" + text)
    if isinstance(e, UnexpectedToken):
        return Key(position, e.token.type)
    return Key(position, "?")


class Matcher:
    """Index of the table: (state, token) -> entry, and char -> first entry."""

    def __init__(self, first_error):
        """``first_error(text) -> Key | None``: the key of the first syntax error of ``text``."""
        self.exact: dict[Key, Mistake] = {}
        self.by_char: dict[str, Mistake] = {}
        self.problems: list[str] = []
        for m in MISTAKES:
            for ex in m.examples:
                k = first_error(ex)
                if k is None:
                    self.problems.append(f"{m.code}: example parses without error: {ex!r}")
                    continue
                self.exact.setdefault(k, m)
                if k.what.startswith("char:"):
                    self.by_char.setdefault(k.what, m)

    def match(self, k: Key) -> Mistake | None:
        return self.exact.get(k) or self.by_char.get(k.what)
