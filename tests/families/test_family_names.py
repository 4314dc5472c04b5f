"""One place per model family: no module outside a family's folder names a family or its format.

The rule, read from the source with ``ast`` (no module is imported but the torch-free tables):

- **Family names** are every name a table under ``families/`` keys a family by: the ``model_type``
  and GGUF architecture names (``readers.CONFIG_READERS``, ``readers.GGUF_READERS``), the built and
  the not-built families (``registry.BUILD_FAMILIES``, ``registry.NOT_BUILT``) and the build
  families' own names (``FamilyEntry.name``); plus ``FORMATS``, the export formats whose name is no
  ``model_type`` (DeciLM: ``nemotron-nas``; the NemotronH-Puzzle and heterogeneous Gemma 3 formats
  already carry a family's name).
- **Where they may appear**: ``families/`` (each family's config reader, loader, forward, export),
  ``export/`` (the writers of the formats stock engines load, which name the format they write) and
  ``modeling/`` (the classes shipped inside an exported folder, one pair per format).
- **Everywhere else** no identifier (module, class, function, variable, attribute, argument, keyword,
  import) and no string literal contains one, compared without case and without ``-`` / ``_`` (so
  ``LLAMA_FAMILIES``, ``"nemotron-nas"`` and ``decilm_export`` all count). Generic code asks the
  family through its registry row (``registry.entry``, ``families.base.family_of``) instead.
  Docstrings and comments, which say why, may name families.
- **Exceptions** are listed below with their reason; one that no longer occurs fails the test too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from autocompress.families.readers import CONFIG_READERS, GGUF_READERS
from autocompress.families.registry import BUILD_FAMILIES, NOT_BUILT

PACKAGE = Path(__file__).resolve().parents[2] / "autocompress"
FAMILY_FOLDERS = ("families", "export", "modeling")
FORMATS = ("decilm",)

# Top-level tables whose literals may name families: (module, assigned name) -> why.
EXEMPT_TABLES: dict[tuple[str, str], str] = {
    ("parents/aliases.py", "ALIASES"):
        "the catalog of parent models shipped on the package registry: a model's alias, distribution, file "
        "and description carry the model's own name (gemma3-270m), as the hardware catalog names GPUs",
}
# Single literals that may name a family: (module, a part of the literal) -> why.
EXEMPT_LITERALS: dict[tuple[str, str], str] = {
    ("plan/space.py", "Sheared-LLaMA"):
        "a paper's title, cited as the source of the minimum kept fraction",
    ("plan/space.py", "vLLM's DeciLM loader crashes"):
        "the reason printed for the layer-0 attention rule (check report, build log) names the loader whose crash "
        "it avoids; whether the rule applies is asked of the registry row (FamilyEntry.shared_writer)",
}


def _norm(s: str) -> str:
    return s.lower().replace("-", "").replace("_", "")


def family_names() -> tuple[str, ...]:
    names = set(CONFIG_READERS) | set(GGUF_READERS) | set(BUILD_FAMILIES) | set(NOT_BUILT) | set(FORMATS)
    names |= {e.name for e in BUILD_FAMILIES.values()}
    return tuple(sorted({_norm(n) for n in names}))


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _words(node: ast.AST, docstrings: set[int]) -> list[str]:
    """The identifiers and string literals ``node`` itself holds (not its children's)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) and id(node) not in docstrings else []
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, ast.alias):
        return [node.name] + ([node.asname] if node.asname else [])
    if isinstance(node, ast.ImportFrom):
        return [node.module] if node.module else []
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    return []


def offences(source: str, module: str, names: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """(line, word, family name) for every identifier or literal of ``source`` that names a family,
    outside the exempt tables of ``module``."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    exempt: set[int] = set()
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and (module, t.id) in EXEMPT_TABLES for t in targets):
            exempt |= {id(n) for n in ast.walk(stmt.value)} if stmt.value is not None else set()
    out = []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        for word in _words(node, docstrings):
            hit = next((n for n in names if n in _norm(word)), None)
            if hit is not None:
                out.append((getattr(node, "lineno", 0), word, hit))
    return out


def _modules() -> dict[str, Path]:
    return {p.relative_to(PACKAGE).as_posix(): p for p in sorted(PACKAGE.rglob("*.py"))
            if p.relative_to(PACKAGE).parts[0] not in FAMILY_FOLDERS}


def test_no_generic_module_names_a_family():
    names = family_names()
    bad, used = [], set()
    for module, path in _modules().items():
        for line, word, name in offences(path.read_text(encoding="utf-8"), module, names):
            key = next((k for k in EXEMPT_LITERALS if k[0] == module and k[1] in word), None)
            if key is not None:
                used.add(key)
            else:
                bad.append(f"autocompress/{module}:{line}: {word[:80]!r} names {name!r}")
    stale = sorted(set(EXEMPT_LITERALS) - used)
    assert not bad and not stale, (
        f"{len(bad)} identifiers or literals outside {', '.join(FAMILY_FOLDERS)}/ name a family (ask the family "
        "through its registry row, or move the code into its folder):\n" + "\n".join(bad)
        + ("\nstale EXEMPT_LITERALS entries: " + ", ".join(map(str, stale)) if stale else ""))


def test_every_reader_lives_in_its_family_folder():
    for table in (CONFIG_READERS, GGUF_READERS):
        for name, reader in table.items():
            parts = reader.__module__.split(".")
            assert parts[:2] == ["autocompress", "families"] and parts[3:] == ["config"], (name, reader.__module__)


def test_exempt_tables_exist():
    for module, name in EXEMPT_TABLES:
        tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
        assigned = {t.id for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))
                    for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) if isinstance(t, ast.Name)}
        assert name in assigned, f"stale EXEMPT_TABLES entry: {module} has no top-level {name}"


def test_the_reader_finds_a_planted_name_and_skips_docstrings():
    """The check can fail: a family tested by name, a family-named identifier, a format's module
    imported, each is found; the same words in a docstring or a comment are not."""
    names = family_names()
    assert {"llama", "gemma3", "nemotronh", "nemotronnas", "decilm", "qwen2", "nativemoe"} <= set(names)
    src = ('"""Llama, Gemma 3 and DeciLM in a docstring."""\n'
           "from autocompress.export.decilm import expected_shapes\n"
           "LLAMA_FAMILIES = ('a',)\n"
           "def f(arch):\n"
           '    """nemotron_h in a docstring"""\n'
           "    # gemma3 in a comment\n"
           '    return arch.family == "nemotron-nas" or g(model_type=f"{arch.family}") or arch.is_gemma3\n')
    got = {(line, word) for line, word, _ in offences(src, "plan/x.py", names)}
    assert got == {(2, "autocompress.export.decilm"), (3, "LLAMA_FAMILIES"), (7, "nemotron-nas"),
                   (7, "is_gemma3")}, got
    table = 'ALIASES = {"gemma3-270m": 1}\nOTHER = {"gemma3-270m": 1}\n'
    assert [(line, word) for line, word, _ in offences(table, "parents/aliases.py", names)] == [(2, "gemma3-270m")]
