"""The import graph of ``autocompress``, read from its source with ``ast`` (no module is imported).

The import graph is the architecture (``ARCHITECTURE.md``), so it must be visible and sound:

- no import cycle among the package's modules, counting imports at the top of a module and inside
  its functions alike (not those under ``if TYPE_CHECKING:``, which never run); ``from pkg import
  mod`` is an edge to the submodule ``pkg.mod``;
- no private name (``_x``, not a dunder) imported from, or read off, another module of the package
  (a private module itself may be imported by name);
- imports at the top of the module. An import inside a function is allowed for a heavy optional
  dependency (``HEAVY``: torch and what comes with it, plotting, cvxpy and scipy), which keeps it
  off the light ``acc check`` path; any other import inside a function, of this package or not,
  must be one of ``LOCAL_IMPORTS`` with the reason it cannot sit at the top;
- ``acc check`` imports no torch, vllm or transformers, and a repeated (cached) check imports no
  solver, parser, schema validator or numpy either (``test_check_path_*``, in a subprocess).

The failure messages count the package's intra-package imports at the top of modules and inside
functions.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "autocompress"

# Heavy optional dependencies: imported inside the functions that need them, anywhere. scipy comes
# with cvxpy, through ``feasibility.cvx_import``, which must import it first to trim it (0.25 s of
# ``scipy.sparse`` alone); pyarrow is the optional Parquet reader (``autocompress[parquet]``).
HEAVY = frozenset({"torch", "vllm", "transformers", "matplotlib", "safetensors", "gguf", "cvxpy", "scipy",
                   "pyarrow"})

# Every import inside a function that is neither of a ``HEAVY`` package nor at the top of its module:
# (importing module, imported module) -> why it cannot be at the top. An entry that no longer occurs
# fails the test too, so the table stays the list of what there is.
LOCAL_IMPORTS: dict[tuple[str, str], str] = {
    ("autocompress.check", "autocompress.checker"):
        "a repeated check is served from the cache by a key that needs no stage: importing the "
        "stages (lark, jsonschema, numpy, the cost model, the LP) takes 0.4 s of CPU, the whole cached "
        "answer about 0.15 s",
    ("autocompress.cli.main", "autocompress.cli.fmt_cmd"):
        "acc fmt needs the parser (lark), which a cached acc check never loads",
    ("autocompress.cli.main", "autocompress.cli.build_cmd"):
        "acc build imports torch and every stage; the dispatch first checks that torch is installed "
        "and sets OMP_WAIT_POLICY before torch loads",
    ("autocompress.cli.main", "autocompress.cli.verify_cmd"):
        "acc verify loads the exact cost model and the measurement code, which acc check's cached path never needs",
    ("autocompress.cli.main", "autocompress.cli.profile_cmd"):
        "acc profile loads the measurement code and the fit",
    ("autocompress.cli.main", "autocompress.cli.eval_cmd"):
        "acc eval imports torch, the benchmarks' data and scorer",
    ("autocompress.calibrate.synth", "autocompress.nn.hybrid"):
        "param_shapes needs torch at import; synth is on acc verify's path, which works without torch",
    ("autocompress.export.writer", "autocompress.modeling.configuration_decilm"):
        "that file imports transformers at its top because it ships inside every DeciLM checkpoint; "
        "the writer is on acc verify's path, which works without transformers",
    ("autocompress.modeling.register", "autocompress.modeling.modeling_decilm"):
        "model classes import transformers and torch; register() is called only when a model loads",
    ("autocompress.modeling.register", "autocompress.modeling.modeling_nemotron_h_puzzle"):
        "model classes import transformers and torch; register() is called only when a model loads",
    ("autocompress.modeling.register", "autocompress.modeling.modeling_gemma3_hetero"):
        "model classes import transformers and torch; causal_lm_class() is called only when a model loads",
    ("autocompress.feasibility.cvx_import", "highspy"):
        "optional: cvxpy solves with Clarabel when HiGHS is not installed; imported only to silence "
        "HiGHS's banner, after cvxpy",
}


@dataclass(frozen=True)
class Import:
    module: str        # the importing module
    target: str        # the imported module (absolute)
    names: tuple[str, ...]  # names taken from ``target`` (``from target import names``), else ()
    attrs: tuple[str, ...]  # attributes read off the imported module in the importer
    line: int
    local: bool        # inside a function
    type_checking: bool  # under ``if TYPE_CHECKING:`` (never runs)

    @property
    def internal(self) -> bool:
        return self.target == "autocompress" or self.target.startswith("autocompress.")

    @property
    def top_package(self) -> str:
        return self.target.partition(".")[0]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.lru_cache(maxsize=None)
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _imports_of(module: str, source: str, is_package: bool = False) -> list[Import]:
    tree = ast.parse(source, module)
    modules = _modules()
    found: list[tuple[str, tuple[str, ...], str | None, int, bool, bool]] = []  # target, names, alias

    def visit(node: ast.AST, local: bool, tc: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for a in child.names:
                    bound = a.asname or (a.name if "." not in a.name else None)
                    found.append((a.name, (), bound, child.lineno, local, tc))
            elif isinstance(child, ast.ImportFrom):
                src = _absolute(module, is_package, child.level, child.module)
                plain = []
                for a in child.names:
                    sub = f"{src}.{a.name}"
                    if sub in modules:  # ``from pkg import mod``: the submodule itself
                        found.append((sub, (), a.asname or a.name, child.lineno, local, tc))
                    else:
                        plain.append(a.name)
                if plain or not child.names:
                    found.append((src, tuple(plain), None, child.lineno, local, tc))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True, tc)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for n in child.body:
                    visit(ast.Module(body=[n], type_ignores=[]), local, True)
                for n in child.orelse:
                    visit(ast.Module(body=[n], type_ignores=[]), local, tc)
            else:
                visit(child, local, tc)

    visit(tree, False, False)
    # attributes read off a module bound to a name (``import autocompress.x as m; m._y``)
    attrs: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attrs.setdefault(node.value.id, set()).add(node.attr)
    return [Import(module, target, names, tuple(sorted(attrs.get(bound, ()))) if bound else (), line, local, tc)
            for target, names, bound, line, local, tc in found]


@functools.lru_cache(maxsize=None)
def package_imports() -> tuple[Import, ...]:
    out: list[Import] = []
    for module, path in _modules().items():
        out += _imports_of(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
    return tuple(out)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _where(imp: Import) -> str:
    return f"{imp.module}:{imp.line}"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in package_imports():
        if imp.internal and not imp.type_checking and imp.target in modules and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def _summary() -> str:
    imps = [i for i in package_imports() if not i.type_checking]
    top = sum(1 for i in imps if i.internal and not i.local)
    local = [i for i in imps if i.internal and i.local]
    return (f"intra-package imports: {top} at the top of modules, {len(local)} inside functions "
            f"({len({(i.module, i.target) for i in local})} distinct (module, imported module) pairs)")


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, f"{len(cycles)} import cycles; {_summary()}:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_private_name_imported_across_modules():
    bad = []
    for imp in package_imports():
        if not imp.internal:
            continue
        for n in imp.names:
            if _private(n):
                bad.append(f"{_where(imp)}: from {imp.target} import {n}")
        for a in imp.attrs:
            if _private(a) and f"{imp.target}.{a}" not in _modules():
                bad.append(f"{_where(imp)}: {imp.target}.{a}")
    assert not bad, f"{len(bad)} private names used across modules:\n" + "\n".join(bad)


def test_imports_inside_functions_are_the_allowed_few():
    bad, used = [], set()
    for imp in package_imports():
        if not imp.local or imp.type_checking or imp.top_package in HEAVY:
            continue
        pair = (imp.module, imp.target)
        if pair in LOCAL_IMPORTS:
            used.add(pair)
        else:
            bad.append(f"{_where(imp)}: import {imp.target}" + (f" ({', '.join(imp.names)})" if imp.names else ""))
    stale = sorted(set(LOCAL_IMPORTS) - used)
    assert not bad and not stale, (
        f"{_summary()}; {len(bad)} imports inside functions are neither of a heavy optional dependency "
        f"nor in LOCAL_IMPORTS (move them to the top of the module):\n" + "\n".join(bad)
        + ("\nstale LOCAL_IMPORTS entries: " + ", ".join(map(str, stale)) if stale else ""))


def test_the_reader_sees_every_kind_of_import():
    """The reader above resolves relative imports, submodules named in ``from`` and local imports."""
    src = ("from . import b\nfrom .c import d, _e\nimport x.y as z\n"
           "def f():\n    from ..p import q\n    import torch\n    z._w()\n"
           "if TYPE_CHECKING:\n    from autocompress.nn import llama\n")
    imps = _imports_of("autocompress.lang.a", src)
    got = [(i.target, i.names, i.local) for i in imps]
    assert [i.type_checking for i in imps if i.target.startswith("autocompress.nn")] == [True]
    assert [i.attrs for i in imps if i.target == "x.y"] == [("_w",)]
    assert ("autocompress.lang.c", ("d", "_e"), False) in got
    assert ("x.y", (), False) in got
    assert ("autocompress.p", ("q",), True) in got
    assert ("torch", (), True) in got
    assert any(t == "autocompress.lang.b" or (t == "autocompress.lang" and n == ("b",)) for t, n, _ in got)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# ---- the check path stays light ----------------------------------------------------------------------
_PROBE = """
import json, sys
from autocompress.cli.main import main
code = main(["check", sys.argv[1], "--format", "json", "--out", sys.argv[2]])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if "." not in m)}))
"""
NEVER_ON_CHECK = ("torch", "vllm", "transformers", "safetensors", "matplotlib")
NOT_ON_WARM_CHECK = NEVER_ON_CHECK + ("cvxpy", "lark", "jsonschema", "scipy", "numpy")


def _check_modules(spec: Path, cache: Path, out: Path) -> tuple[int, set[str]]:
    env = dict(os.environ, ACC_CACHE_DIR=str(cache))
    run = subprocess.run([sys.executable, "-c", _PROBE, str(spec), str(out)], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    return got["code"], set(got["modules"])


@pytest.mark.parametrize("example", ["npc-5080.acspec", "nemotron-h-56b-b200-128k.acspec"])
def test_check_path_imports_no_torch_and_a_repeat_no_solver(example, tmp_path):
    spec = REPO / "examples" / example
    code, cold = _check_modules(spec, tmp_path / "cache", tmp_path / "cold.json")
    assert code in (0, 1, 4)
    assert not cold & set(NEVER_ON_CHECK), sorted(cold & set(NEVER_ON_CHECK))
    assert "cvxpy" in cold  # the probe did run the check
    code2, warm = _check_modules(spec, tmp_path / "cache", tmp_path / "warm.json")
    assert code2 == code
    assert not warm & set(NOT_ON_WARM_CHECK), sorted(warm & set(NOT_ON_WARM_CHECK))
    assert (tmp_path / "cold.json").read_text() == (tmp_path / "warm.json").read_text()
