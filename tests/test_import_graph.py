"""The packages of cowconv import only downwards: the layers follow the data's path.

::

    _exceptions, _lazy          error classes; lazy package attributes (import nothing)
    core/                       imports nothing of cowconv but _exceptions
    workspaces/                 imports only core: the workspace snapshot store
    agent/, ports, tools/, mcp/ import only core and workspaces (and _exceptions); tools/ and
                                mcp/ also agent/
    backends/, stores/          import ports, core and agent; not each other
    everything else             the top: branches/, distributed/, agent_server/,
                                conversation, guards, visualizer, testing, the CLI,
                                subagent/ and the sub-agent tools (tools/task,
                                tools/delegate, tools/workflow)

A module never imports a cowconv module inside a function (an import there
is a door to a higher floor), except the CLI's import of the optional server.
"""

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


# Layer (a module or package prefix) -> the prefixes its modules may import; the root package
# (``cowconv`` itself, whose lazy attributes can load anything) is in no list.
RULES: dict[str, tuple[str, ...]] = {
    "_exceptions": (),
    "_lazy": (),
    "core": ("_exceptions", "_lazy", "core"),
    # The runtime records a workspace snapshot around each tool call (cowconv.workspaces).
    "agent": ("_exceptions", "_lazy", "core", "agent", "workspaces"),
    "workspaces": ("_exceptions", "_lazy", "core", "workspaces"),
    "ports": ("_exceptions", "_lazy", "core"),
    "tools": ("_exceptions", "_lazy", "core", "agent", "workspaces", "tools"),
    # MCP servers' tools: a tools layer of its own (the agent loop loads it by name).
    "mcp": ("_exceptions", "_lazy", "core", "agent", "workspaces", "mcp"),
    "backends": ("_exceptions", "_lazy", "core", "agent", "workspaces", "ports", "backends"),
    "stores": ("_exceptions", "_lazy", "core", "agent", "workspaces", "ports", "stores"),
}

# Tool packages on the top floor: a sub-agent tool runs a child Conversation (and shows it with
# a visualiser), so it builds on the conversation, not only on core and agent. Nothing below
# imports them: the tool registry loads them by name when an agent uses them.
TOP_LAYER_TOOLS = ("tools.task", "tools.delegate", "tools.workflow")

# (importer, imported prefix) allowed inside a function: optional extras only.
# core.workspace -> core.http: a workspace loads httpx only when it makes its first request.
FUNCTION_LEVEL_ALLOWED = {("_cli", "agent_server"), ("core.workspace", "core.http")}


def _relative(module: str, root: str) -> str:
    return module[len(root) + 1 :] if module.startswith(f"{root}.") else module


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(f"{prefix}.")


def layer_violations(
    graph: dict[str, set[str]], rules: dict[str, tuple[str, ...]], root: str
) -> list[str]:
    """``importer -> imported`` for every edge of ``graph`` its layer's rule does not allow."""
    found = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        name = _relative(importer, root)
        if any(_under(name, top) for top in TOP_LAYER_TOOLS):
            continue  # the top layer imports anything
        layer = next((layer for layer in rules if _under(name, layer)), None)
        if layer is None:
            continue  # the top layer imports anything
        target = _relative(imported, root)
        if imported == root or not any(_under(target, allowed) for allowed in rules[layer]):
            found.append(f"{importer} -> {imported}")
    return found


def function_level_imports(package: Path = PACKAGE) -> list[tuple[str, str]]:
    """(module, imported cowconv module) for every import of the package inside a function."""
    root = package.name
    found = []
    for path in sorted(package.rglob("*.py")):
        name = _module_name(path, package)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and not inner.level:
                    modules = [inner.module or ""]
                elif isinstance(inner, ast.ImportFrom):
                    modules = [root]  # relative: inside the package
                elif isinstance(inner, ast.Import):
                    modules = [alias.name for alias in inner.names]
                else:
                    continue
                found += [(name, module) for module in modules if _under(module, root)]
    return found


class TestLayers:
    @pytest.mark.parametrize("layer", sorted(RULES))
    def test_layer_imports_only_what_its_rule_allows(self, layer: str):
        """Each lower layer imports only the layers its rule names (and never the root)."""
        graph = import_graph()
        assert any(_under(_relative(module, "cowconv"), layer) for module in graph)
        violations = layer_violations(graph, {layer: RULES[layer]}, "cowconv")
        assert violations == []

    def test_no_function_level_import_of_cowconv(self):
        """No module imports a cowconv module inside a function, but for optional extras."""
        found = [
            (module, imported)
            for module, imported in function_level_imports()
            if not any(
                _under(_relative(module, "cowconv"), importer)
                and _under(_relative(imported, "cowconv"), allowed)
                for importer, allowed in FUNCTION_LEVEL_ALLOWED
            )
        ]
        assert found == []

    def test_the_checker_catches_violations(self, tmp_path: Path):
        """A core module importing the agent layer (in a function, too) is reported."""
        package = tmp_path / "pkg"
        for sub in ("core", "agent"):
            (package / sub).mkdir(parents=True)
            (package / sub / "__init__.py").write_text("")
        (package / "__init__.py").write_text("")
        (package / "_exceptions.py").write_text("")
        (package / "core" / "a.py").write_text("from pkg._exceptions import *\n")
        (package / "agent" / "b.py").write_text("from pkg.core import a\n")
        assert layer_violations(import_graph(package), RULES, "pkg") == []
        assert function_level_imports(package) == []
        (package / "core" / "a.py").write_text("def f():\n    from pkg.agent import b\n")
        assert layer_violations(import_graph(package), RULES, "pkg") == [
            "pkg.core.a -> pkg.agent",
            "pkg.core.a -> pkg.agent.b",
        ]
        assert function_level_imports(package) == [("pkg.core.a", "pkg.agent")]
        (package / "core" / "a.py").write_text("import pkg\n")
        assert layer_violations(import_graph(package), RULES, "pkg") == ["pkg.core.a -> pkg"]


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
            ("cowconv.agent.runtime", "cowconv.core.changes"),
        ],
    )
    def test_sees_the_layers(self, importer: str, imported: str):
        """The graph holds the edges the layers are made of (the checker reads the code)."""
        assert imported in import_graph()[importer]
