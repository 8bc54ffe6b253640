"""The modules of cowconv import each other without cycles, the data's path is one way."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cowconv"


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at the top, in functions, in classes.

    Only ``if TYPE_CHECKING:`` blocks are left out: they never run, so they
    cannot make an import order fail (they are there for annotations).
    """
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the cowconv modules it imports anywhere that runs (functions included).

    Importing ``a.b.c`` runs ``a.b`` first, so a module also depends on the
    packages above what it imports (but not on the root package or its own
    packages, which are already being imported when it runs).
    """
    paths = {_module_name(path, package): path for path in package.rglob("*.py")}
    root = package.name
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: resolve against this module's package
                    base = name.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets.add(module)
                targets.update(f"{module}.{alias.name}" for alias in node.names)
        edges: set[str] = set()
        for target in targets:
            parts = target.split(".")
            for end in range(2, len(parts) + 1):  # the packages on the way, then the module
                prefix = ".".join(parts[:end])
                # A module's own packages are being imported already when it runs.
                if prefix in paths and prefix != name and not name.startswith(f"{prefix}."):
                    edges.add(prefix)
            if target == root and name != root:
                edges.add(root)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules, or ``None``."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


class TestImportGraph:
    def test_no_cycles(self):
        """No chain of imports inside cowconv/ leads back to where it started."""
        assert find_cycle(import_graph()) is None

    def test_finds_a_cycle(self, tmp_path: Path):
        """The checker itself sees a cycle made through an import inside a function."""
        package = tmp_path / "pkg"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "_a.py").write_text("from pkg._b import thing\n")
        (package / "_b.py").write_text("def thing():\n    from pkg import _a\n")
        cycle = find_cycle(import_graph(package))
        assert cycle is not None and {"pkg._a", "pkg._b"} <= set(cycle)

    def test_type_checking_imports_do_not_count(self, tmp_path: Path):
        """Imports only type checkers run make no cycle; the same import at run time does."""
        package = tmp_path / "pkg"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "_a.py").write_text("from pkg._b import thing\n")
        guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import _a\n"
        (package / "_b.py").write_text(guarded + "def thing(): ...\n")
        assert find_cycle(import_graph(package)) is None
        (package / "_b.py").write_text(guarded + "else:\n    from pkg import _a\n")
        assert find_cycle(import_graph(package)) is not None

    @pytest.mark.parametrize(
        ("importer", "imported"),
        [
            ("cowconv.conversation", "cowconv.backends.local"),
            ("cowconv.backends.local", "cowconv.agent.runtime"),
        ],
    )
    def test_sees_the_layers(self, importer: str, imported: str):
        """The graph holds the edges the layers are made of (the checker reads the code)."""
        assert imported in import_graph()[importer]
