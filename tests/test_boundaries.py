"""The house's walls, read from the code: who may import whom (issue 9).

Every module of the installed package (the folders `pyproject.toml` maps to `everchat.*`)
is parsed with `ast`, never imported, and its imports resolved to modules of the
repository (relative ones too; `from pkg import name` counts as importing `pkg.name` when
that is a module). What is checked:

- the pure cores (`actors/memory`, `actors/store`, `actors/turns/turn.py`,
  `actors/compactor/compaction.py`, `actors/models`) import nothing from `everchat.transport` or
  `everchat.frontends`, and `transport` nothing from `everchat.actors`: at any depth, a
  lazy import inside a function crosses the wall all the same;
- production imports no test code (hypothesis, pytest, the helpers under tests/);
- the modules import one way, without a circle. Module-level imports (those under
  `if TYPE_CHECKING:` included: a circle for the type checker is one for the reader) are
  checked first; then imports inside functions are added to the same graph, because a
  lazy import only hides a circle from the interpreter, it does not break it. The two
  are apart so a failure says which kind closed the circle.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

__all__: list[str] = []

ROOT = Path(__file__).resolve().parents[1]
PURE = ("everchat.actors.tree", "everchat.actors.folder", "everchat.actors.turns.turn",
        "everchat.actors.compactor.compaction", "everchat.actors.models")
TEST_ONLY = ("hypothesis", "pytest")


def _folders() -> dict[str, Path]:
    """`everchat.x` -> the repository folder it is installed from."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {name: ROOT / folder for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in _folders().items():
        for path in sorted(folder.rglob("*.py")):
            if ".venv" in path.parts or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


MODULES = _modules()


def _top_level(tree: ast.Module) -> set[int]:
    """ids of the import nodes that run when the module is imported: outside every def
    (inside `if` / `try` / `with` and class bodies at the top, such as `if TYPE_CHECKING:`)."""
    found: set[int] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.add(id(node))
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef, ast.ExceptHandler)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported name, at module level) for every import statement in the file. A name
    is a repository module when one matches, else the import as written."""
    tree = ast.parse(path.read_text(), str(path))
    top = _top_level(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found.extend((name, id(node) in top) for name in names)
    return found


IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}


def _within(name: str, places: tuple[str, ...]) -> bool:
    """`name` is one of `places` or inside one of them (a package's submodule)."""
    return name in places or name.startswith(tuple(place + "." for place in places))


def _crossing(sources: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """Every import, at any depth, from a module within `sources` of one within `forbidden`."""
    return sorted(f"{module} imports {name}" for module, found in IMPORTS.items() if _within(module, sources)
                  for name, _ in found if _within(name, forbidden))


def _cycle(module_level_only: bool) -> list[str] | None:
    """One import circle among the repository's modules, as a path, or None."""
    graph = {module: sorted({name for name, top in found if name in MODULES and name != module
                             and (top or not module_level_only)})
             for module, found in IMPORTS.items()}
    state: dict[str, int] = {}       # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for name in graph[module]:
            if state.get(name) == 1:
                return path[path.index(name):] + [name]
            if name not in state:
                circle = visit(name)
                if circle:
                    return circle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            circle = visit(module)
            if circle:
                return circle
    return None


def test_the_walk_sees_the_package():
    """Guards the checks below against passing on nothing: the modules they name exist and
    their imports are read (relative ones resolved)."""
    for name in (*PURE, "everchat.transport._node", "everchat.frontends.cli.main"):
        assert name in MODULES, name
    assert ("everchat.transport._mailbox", True) in IMPORTS["everchat.transport._node"]


def test_the_pure_cores_import_neither_the_transport_nor_the_front_ends():
    assert _crossing(PURE, ("everchat.transport", "everchat.frontends")) == []


def test_the_transport_imports_nothing_of_the_actors():
    assert _crossing(("everchat.transport",), ("everchat.actors",)) == []


def test_production_imports_no_test_code():
    helpers = tuple(path.stem for path in (ROOT / "tests").glob("*.py"))
    assert _crossing(tuple(MODULES), TEST_ONLY + helpers) == []


@pytest.mark.parametrize("module_level_only", [True, False], ids=["module-level", "with-imports-in-functions"])
def test_the_modules_import_one_way_without_a_circle(module_level_only):
    assert _cycle(module_level_only) is None
