"""Port OpenHands' own tests onto cowconv: copy, rename imports, run, compare.

OpenHands' SDK (``OpenHands/software-agent-sdk``) tests the API cowconv
implements. This script takes the selected test files (:data:`SELECTION`) from
an OpenHands checkout, writes them into a git-ignored directory and runs them
with pytest, either

* ``--target cowconv`` (default): imports renamed (:data:`MODULE_MAP`) plus the
  plumbing listed in ``tests/openhands/README.md``, run against cowconv; or
* ``--target openhands``: the files unchanged, run against openhands-sdk (a
  Python >= 3.12 environment with openhands-sdk/tools/agent-server 1.58.2;
  ``tests/openhands/venv.py`` builds one).

Nothing of OpenHands' is committed: the copies live under
``tests/openhands/ported/`` (git-ignored) and are written again on every run.

    python tests/openhands/port.py run --target cowconv --junitxml cc.xml
    python tests/openhands/port.py run --target openhands \\
        --python /work/venvs/oh312/bin/python --junitxml oh.xml
    python tests/openhands/port.py report oh.xml cc.xml > table.md

The rewriting is plain functions on source text, standard library only:

>>> modules = {"openhands.sdk", "openhands.sdk.llm", "openhands.sdk.llm.llm"}
>>> mapped_module("openhands.sdk.llm.llm")
'cowconv'
>>> mapped_module("openhands.agent_server.conversation_router")
'cowconv.agent_server.conversation_router'
>>> mapped_module("openhands.agent_server.bash_router")  # no such module: its package's row
'cowconv.agent_server'
>>> split_dotted("openhands.sdk.llm.llm.logger", modules)
('openhands.sdk.llm.llm', 'logger')
>>> print(rewrite_source("from openhands.sdk.llm import LLM, Message as M\\n", modules,
...                      strict=True)[0], end="")
from cowconv import LLM, Message as M
>>> print(rewrite_source("from openhands.sdk.llm import LLM\\n", modules)[0], end="")
import _ohport as _ohp; LLM = _ohp.take('openhands.sdk.llm', 'LLM')
>>> src = 'with patch("openhands.sdk.llm.llm.logger"):\\n    pass\\n'
>>> print(rewrite_source(src, modules)[0], end="")
with patch("cowconv.logger"):
    pass
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import io
import os
import shutil
import subprocess
import sys
import tokenize
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MODULE_MAP",
    "SELECTION",
    "SOURCE_COMMIT",
    "Selected",
    "mapped_module",
    "port",
    "report",
    "rewrite_source",
    "run",
    "split_dotted",
]

#: The OpenHands commit the selection was written against (v1.43.1 + 2 commits).
SOURCE_COMMIT = "611629e6999ad398dc49c761721eefe18d5e6bd9"
#: The release of openhands-sdk / -tools / -agent-server the tests run against.
OPENHANDS_VERSION = "1.58.2"

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "ported"
#: Where a fetched snapshot of OpenHands' repository is found when neither
#: ``--source`` nor ``--git-dir`` is given (the environment variable wins).
DEFAULT_GIT_DIRS = ("/work/.mirror/OpenHands+software-agent-sdk/repo",)


@dataclass(frozen=True)
class Selected:
    """One test file taken from OpenHands, and which of its tests run.

    ``tests`` holds fnmatch patterns matched against the test's id inside the
    file (``test_x``, ``test_x[param]``, ``TestClass::test_y``); empty means all.
    """

    path: str
    tests: tuple[str, ...] = ()
    why: str = ""


#: The selected files, in the order of the baseline report.
SELECTION: tuple[Selected, ...] = (
    Selected("tests/sdk/conversation/local/test_fork.py", why="Conversation.fork()"),
    Selected(
        "tests/sdk/conversation/local/test_call_context_isolation.py",
        ("test_fork_*",),
        "the other local fork test",
    ),
    Selected(
        "tests/sdk/conversation/test_path_rules_injection.py",
        ("test_fork_*",),
        "the other local fork test",
    ),
    Selected(
        "tests/sdk/conversation/local/test_conversation_tree.py",
        why="parent_id, navigate_to, fork(from_event_id), view",
    ),
    Selected("tests/sdk/conversation/test_event_tree.py", why="EventLog tree helpers"),
    Selected("tests/sdk/conversation/remote/test_remote_fork.py", why="RemoteConversation.fork"),
    Selected(
        "tests/sdk/conversation/remote/test_remote_navigate.py",
        why="RemoteConversation.navigate_to",
    ),
    Selected(
        "tests/sdk/conversation/remote/test_remote_events_list.py",
        why="RemoteEventsList paging and cache",
    ),
    Selected(
        "tests/sdk/conversation/remote/test_remote_conversation.py",
        why="RemoteConversation create/attach/send/run/pause/secrets/policy/close",
    ),
    Selected(
        "tests/agent_server/test_conversation_router.py",
        (
            "test_search_conversations_*",
            "test_count_conversations_*",
            "test_get_conversation_*",
            "test_batch_get_conversations_*",
            "test_start_conversation_new",
            "test_start_conversation_existing",
            "test_start_conversation_invalid_request",
            "test_start_conversation_minimal_request",
            "test_start_conversation_legacy_request_without_agent_kind",
            "test_pause_conversation_*",
            "test_delete_conversation_*",
            "test_run_conversation_*",
            "test_update_conversation_secrets_*",
            "test_update_secrets_with_*",
            "test_set_conversation_confirmation_policy_*",
            "test_update_conversation_success",
            "test_update_conversation_failure",
            "test_update_conversation_invalid_title",
            "test_fork_conversation_*",
            "test_navigate_conversation_*",
        ),
        "routes: create, get, search/count/batch, run, pause, delete, PATCH, "
        "secrets, confirmation policy, fork, navigate",
    ),
    Selected(
        "tests/agent_server/test_conversation_service.py",
        (
            "test_fork_rejects_id_of_unloaded_persisted_conversation",
            "TestConversationServiceSearchConversations::*",
            "TestConversationServiceCountConversations::*",
            "TestConversationServiceStartConversation::test_start_conversation_with_secrets",
            "TestConversationServiceStartConversation::test_start_conversation_without_secrets",
            "TestConversationServiceStartConversation::test_start_conversation_with_custom_id",
            "TestConversationServiceStartConversation::test_start_conversation_with_duplicate_id",
            "TestConversationServiceUpdateConversation::test_update_conversation_success",
            "TestConversationServiceUpdateConversation::test_update_conversation_strips_whitespace",
            "TestConversationServiceUpdateConversation::test_update_conversation_not_found",
            "TestConversationServiceUpdateConversation::test_update_conversation_persists_changes",
            "TestConversationServiceDeleteConversation::test_delete_conversation_not_found",
            "TestConversationServiceDeleteConversation::test_delete_conversation_success",
            "TestConversationTreeForkAndNavigate::*",
        ),
        "service: create, search/count, update, delete, fork, navigate",
    ),
    Selected(
        "tests/agent_server/test_event_router.py",
        ("TestSendMessageEndpoint::*", "TestSearchEventsEndpoint::*"),
        "events: send message, search, count",
    ),
    Selected("tests/sdk/event/test_event_serialization.py", why="event JSON round trip"),
)

#: Helper files the selected tests import or need (copied with the same rewriting).
SUPPORT_FILES: tuple[str, ...] = (
    "tests/__init__.py",
    "tests/sdk/__init__.py",
    "tests/sdk/conversation/__init__.py",
    "tests/sdk/conversation/conftest.py",
    "tests/sdk/conversation/remote/__init__.py",
    "tests/sdk/event/__init__.py",
    "tests/agent_server/__init__.py",
    # TestConversationTreeForkAndNavigate builds its conversations with these helpers.
    "tests/agent_server/stress/__init__.py",
    "tests/agent_server/stress/scripts.py",
)
#: Copied for ``--target openhands`` only (see README, change 4).
OPENHANDS_ONLY_FILES: tuple[str, ...] = ("tests/conftest.py",)

#: OpenHands module prefix -> the cowconv modules searched for a name, nearest first.
#: The longest matching prefix wins; every deeper module maps like its package.
MODULE_MAP: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("openhands.sdk.testing", ("cowconv.testing", "cowconv")),
    # OpenHands' file-per-event log and its file stores (cowconv.EventLog is another class).
    ("openhands.sdk.conversation.event_store", ("cowconv.event_store", "cowconv")),
    ("openhands.sdk.io", ("cowconv.io", "cowconv")),
    # The remote client: tests patch names there (WebSocketCallbackClient, time) that the
    # remote backend looks up at run time.
    (
        "openhands.sdk.conversation.impl.remote_conversation",
        ("cowconv.backends.remote", "cowconv"),
    ),
    # OpenHands' SDK subpackages with a cowconv package of their own (names also at the root).
    ("openhands.sdk.context", ("cowconv.context", "cowconv")),
    ("openhands.sdk.hooks", ("cowconv.hooks", "cowconv")),
    ("openhands.sdk.logger", ("cowconv.logger", "cowconv")),
    ("openhands.sdk.mcp", ("cowconv.mcp", "cowconv")),
    ("openhands.sdk.security", ("cowconv.security", "cowconv")),
    ("openhands.sdk.subagent", ("cowconv.subagent", "cowconv")),
    ("openhands.sdk", ("cowconv",)),
    (
        "openhands.agent_server.config",
        ("cowconv.agent_server.config", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.conversation_router",
        ("cowconv.agent_server.conversation_router", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.conversation_service",
        ("cowconv.agent_server.conversation_service", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.dependencies",
        ("cowconv.agent_server.dependencies", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.event_router",
        ("cowconv.agent_server.event_router", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.event_service",
        ("cowconv.agent_server.event_service", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.models",
        ("cowconv.agent_server.models", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.sockets",
        ("cowconv.agent_server.sockets", "cowconv.agent_server", "cowconv"),
    ),
    (
        "openhands.agent_server.utils",
        ("cowconv.agent_server.utils", "cowconv.agent_server", "cowconv"),
    ),
    ("openhands.agent_server", ("cowconv.agent_server", "cowconv")),
    ("openhands.tools.browser_use", ("cowconv.tools.browser_use", "cowconv.tools", "cowconv")),
    ("openhands.tools.delegate", ("cowconv.tools.delegate", "cowconv.tools", "cowconv")),
    ("openhands.tools.file_editor", ("cowconv.tools.file_editor", "cowconv.tools", "cowconv")),
    (
        "openhands.tools.preset.default",
        ("cowconv.tools.preset.default", "cowconv.tools.preset", "cowconv.tools", "cowconv"),
    ),
    (
        "openhands.tools.preset.planning",
        ("cowconv.tools.preset.planning", "cowconv.tools.preset", "cowconv.tools", "cowconv"),
    ),
    ("openhands.tools.preset", ("cowconv.tools.preset", "cowconv.tools", "cowconv")),
    ("openhands.tools.task", ("cowconv.tools.task", "cowconv.tools", "cowconv")),
    ("openhands.tools.task_tracker", ("cowconv.tools.task_tracker", "cowconv.tools", "cowconv")),
    ("openhands.tools.terminal", ("cowconv.tools.terminal", "cowconv.tools", "cowconv")),
    ("openhands.tools.tom_consult", ("cowconv.tools.tom_consult", "cowconv.tools", "cowconv")),
    ("openhands.tools.workflow", ("cowconv.tools.workflow", "cowconv.tools", "cowconv")),
    ("openhands.tools", ("cowconv.tools", "cowconv")),
    ("openhands", ("cowconv",)),
)

#: Calls whose first string argument names a module path (rewritten, README change 2).
PATCH_CALLS = frozenset({"patch", "setattr", "delattr"})


def cowconv_chain(module: str) -> tuple[str, ...]:
    """The cowconv modules searched, nearest first, for a name from ``module``.

    >>> cowconv_chain("openhands.tools.terminal.definition")
    ('cowconv.tools.terminal', 'cowconv.tools', 'cowconv')
    """
    for prefix, chain in MODULE_MAP:
        if module == prefix or module.startswith(prefix + "."):
            return chain
    raise ValueError(f"not an OpenHands module: {module}")


def mapped_module(module: str) -> str:
    """The nearest public cowconv module for an OpenHands module path."""
    return cowconv_chain(module)[0]


def split_dotted(dotted: str, modules: set[str]) -> tuple[str, str]:
    """Split ``package.module.attr.attr`` at its longest known module prefix."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate, ".".join(parts[end:])
    return parts[0], ".".join(parts[1:])


def _is_openhands(module: str | None) -> bool:
    return module is not None and (module == "openhands" or module.startswith("openhands."))


def _import_replacement(node: ast.ImportFrom | ast.Import, strict: bool) -> str | None:
    """One line standing for an ``import`` statement from OpenHands, or None to keep it."""
    if isinstance(node, ast.ImportFrom):
        if node.level or not _is_openhands(node.module):
            return None
        assert node.module is not None
        if strict:
            names = ", ".join(
                alias.name + (f" as {alias.asname}" if alias.asname else "") for alias in node.names
            )
            return f"from {mapped_module(node.module)} import {names}"
        binds = [
            f"{alias.asname or alias.name} = _ohp.take({node.module!r}, {alias.name!r})"
            for alias in node.names
        ]
        return "import _ohport as _ohp; " + "; ".join(binds)
    if not any(_is_openhands(alias.name) for alias in node.names):
        return None
    binds = []
    for alias in node.names:
        if not _is_openhands(alias.name):
            binds.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
        elif alias.asname:
            target = mapped_module(alias.name)
            binds.append(
                f"import {target} as {alias.asname}"
                if strict
                else f"import _ohport as _ohp; {alias.asname} = _ohp.module({alias.name!r})"
            )
        else:  # ``import openhands.sdk.x`` binds ``openhands``: give it cowconv's top
            binds.append("import cowconv as openhands")
    return "; ".join(binds)


def _patch_string_spans(tree: ast.AST) -> list[tuple[int, int, int, int]]:
    """Source spans of the first argument of patch()/setattr()/delattr() calls."""
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = node.args[0]
        if name in PATCH_CALLS and isinstance(first, ast.Constant) and isinstance(first.value, str):
            assert first.end_lineno is not None and first.end_col_offset is not None
            spans.append((first.lineno, first.col_offset, first.end_lineno, first.end_col_offset))
    return spans


def rewrite_source(text: str, modules: set[str], *, strict: bool = False) -> tuple[str, list[str]]:
    """``text`` with OpenHands imports and patch targets pointed at cowconv.

    Line numbers are kept (a multi-line import becomes one line and blank
    lines), so a failure's line number reads the same in OpenHands' file.
    Returns the new text and a list of the changes made.
    """
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    changes: list[str] = []
    edits: list[tuple[int, int, int, int, str]] = []  # (line, col, end_line, end_col, new)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            new = _import_replacement(node, strict)
            if new is None:
                assert isinstance(node, (ast.Import, ast.ImportFrom))
                continue
            assert node.end_lineno is not None and node.end_col_offset is not None
            padding = "\n" * (node.end_lineno - node.lineno)
            edits.append(
                (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, new + padding)
            )
            what = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            changes.append(f"line {node.lineno}: import from {what}")
    # Patch targets: rewrite inside the string tokens of the first argument.
    spans = _patch_string_spans(tree)
    if spans:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        for token in tokens:
            if token.type != tokenize.STRING:
                continue
            (row, col), (end_row, end_col) = token.start, token.end
            if not any(
                (row, col) >= (a, b) and (end_row, end_col) <= (c, d) for a, b, c, d in spans
            ):
                continue
            quote_at = min(i for i in (token.string.find('"'), token.string.find("'")) if i >= 0)
            body = token.string[quote_at + 1 :]
            if not body.startswith("openhands"):
                continue
            dotted = body.split(token.string[quote_at])[0]
            module, rest = split_dotted(dotted.rstrip("."), modules)
            if not _is_openhands(module):
                continue
            target = mapped_module(module) + ("." + rest if rest else "")
            if dotted.endswith("."):
                target += "."
            new_token = token.string[: quote_at + 1] + target + body[len(dotted) :]
            edits.append((row, col, end_row, end_col, new_token))
            changes.append(f"line {row}: patch target {dotted} -> {target}")
    # Apply the edits from the end so earlier positions stay valid.
    for row, col, end_row, end_col, new in sorted(edits, reverse=True):
        start = sum(len(line) for line in lines[: row - 1]) + col
        stop = sum(len(line) for line in lines[: end_row - 1]) + end_col
        joined = "".join(lines)
        lines = (joined[:start] + new + joined[stop:]).splitlines(keepends=True)
    return "".join(lines), sorted(set(changes), key=lambda c: int(c.split()[1].rstrip(":")))


# ---------------------------------------------------------------- the source


@dataclass
class Source:
    """An OpenHands checkout: a directory, or a git directory and a commit."""

    directory: Path | None = None
    git_dir: Path | None = None
    commit: str = SOURCE_COMMIT
    _listing: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.directory is not None:
            return str(self.directory)
        return f"{self.git_dir} at {self.commit}"

    def read(self, path: str) -> str | None:
        if self.directory is not None:
            file = self.directory / path
            return file.read_text(encoding="utf-8") if file.exists() else None
        result = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "show", f"{self.commit}:{path}"],
            capture_output=True,
            text=True,
        )
        return result.stdout if result.returncode == 0 else None

    def listing(self) -> list[str]:
        if not self._listing:
            if self.directory is not None:
                root = self.directory
                self._listing = [str(p.relative_to(root)) for p in root.rglob("*.py")]
            else:
                result = subprocess.run(
                    [
                        "git",
                        "--git-dir",
                        str(self.git_dir),
                        "ls-tree",
                        "-r",
                        "--name-only",
                        self.commit,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                self._listing = result.stdout.split()
        return self._listing

    def modules(self) -> set[str]:
        """Every OpenHands module and package name in the checkout."""
        names = set()
        for path in self.listing():
            parts = Path(path).parts
            if "openhands" not in parts or not path.endswith(".py"):
                continue
            parts = parts[parts.index("openhands") :]
            if parts[-1] == "__init__.py":
                parts = parts[:-1]
            else:
                parts = (*parts[:-1], parts[-1][:-3])
            for end in range(1, len(parts) + 1):
                names.add(".".join(parts[:end]))
        return names


def find_source(
    directory: str | None = None, git_dir: str | None = None, commit: str | None = None
) -> Source | None:
    """The OpenHands checkout named, or one found from the environment/defaults."""
    if directory:
        return Source(directory=Path(directory))
    candidates = [git_dir] if git_dir else [os.environ.get("OPENHANDS_GIT_DIR"), *DEFAULT_GIT_DIRS]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Source(git_dir=Path(candidate), commit=commit or SOURCE_COMMIT)
    env_dir = os.environ.get("OPENHANDS_SRC")
    if env_dir and Path(env_dir).is_dir():
        return Source(directory=Path(env_dir))
    return None


# ---------------------------------------------------------------- writing the port

_OHPORT = '''"""Written by tests/openhands/port.py: where a ported import finds its name.

``take(origin, name)`` returns the name from the nearest cowconv module (see
MODULE_MAP in port.py). A name cowconv lacks becomes a placeholder class: the
file still imports, and only a test that uses the name fails, saying which
OpenHands name cowconv does not have.
"""

import importlib

CHAINS = {chains!r}


class MissingInCowconv(AttributeError):
    """A ported test used an OpenHands name that cowconv does not provide."""


def _chain(origin):
    best = ""
    for prefix in CHAINS:
        if (origin == prefix or origin.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return CHAINS[best]


class _MissingMeta(type):
    def _fail(cls, what=""):
        raise MissingInCowconv(
            f"cowconv has no {{cls._oh_name!r}} (OpenHands: {{cls._oh_origin}}.{{cls._oh_name}})"
            + what
        )

    def __getattr__(cls, attr):
        if attr.startswith("__") or attr.startswith("_oh_"):
            raise AttributeError(attr)
        cls._fail(f"; used .{{attr}}")

    def __call__(cls, *args, **kwargs):
        cls._fail("; called")

    def __getitem__(cls, item):
        return cls

    def __instancecheck__(cls, obj):
        return False

    def __subclasscheck__(cls, sub):
        return False

    def __iter__(cls):
        cls._fail("; iterated")


def placeholder(name, origin):
    return _MissingMeta(name, (), {{"_oh_name": name, "_oh_origin": origin, "__test__": False}})


def take(origin, name):
    for module_name in _chain(origin):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        try:
            return getattr(module, name)
        except AttributeError:
            continue
    return placeholder(name, origin)


def module(origin):
    return importlib.import_module(_chain(origin)[0])
'''

_CONFTEST = '''"""Written by tests/openhands/port.py: runs only the selected tests."""

import fnmatch

SELECTION = {selection!r}


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        path, _, name = item.nodeid.partition("::")
        patterns = SELECTION.get(path)
        if patterns is None or not patterns:
            (keep if patterns is not None else drop).append(item)
            continue
        bare = name.split("[")[0]
        if any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(bare, p) for p in patterns):
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
'''

_PYTEST_INI = """[pytest]
# Written by tests/openhands/port.py. OpenHands' own settings (pyproject.toml at
# {commit}) less its -v/--tb addopts; asyncio_mode=auto needs pytest-asyncio.
python_files = test_*.py
python_classes = Test*
python_functions = test_*
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
# A file that fails to import on cowconv must not stop the others.
addopts = -p no:cacheprovider -m "not stress" --continue-on-collection-errors
markers =
    stress: OpenHands' stress tests
"""


def port(source: Source, out: Path, target: str, *, strict: bool = False) -> dict[str, list[str]]:
    """Write the selected files for ``target`` under ``out``; return the changes per file."""
    if target not in ("cowconv", "openhands"):
        raise ValueError(f"target is cowconv or openhands, not {target!r}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    modules = source.modules()
    changes: dict[str, list[str]] = {}
    paths = [s.path for s in SELECTION] + list(SUPPORT_FILES)
    if target == "openhands":
        paths += list(OPENHANDS_ONLY_FILES)
    for path in paths:
        text = source.read(path)
        if text is None:
            raise FileNotFoundError(f"{path} is not in {source.describe()}")
        if target == "cowconv" and path.endswith(".py"):
            text, changes[path] = rewrite_source(text, modules, strict=strict)
        destination = out / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text, encoding="utf-8")
    selection = {s.path: list(s.tests) for s in SELECTION}
    (out / "conftest.py").write_text(_CONFTEST.format(selection=selection), encoding="utf-8")
    (out / "pytest.ini").write_text(_PYTEST_INI.format(commit=source.commit), encoding="utf-8")
    if target == "cowconv":
        chains = {prefix: list(chain) for prefix, chain in MODULE_MAP}
        (out / "_ohport.py").write_text(_OHPORT.format(chains=chains), encoding="utf-8")
    (out / "SOURCE").write_text(f"{source.describe()}\ntarget: {target}\n", encoding="utf-8")
    return changes


def run(out: Path, python: str, pytest_args: Sequence[str] = ()) -> int:
    """Run pytest on a ported tree with ``python``; return pytest's exit code."""
    env = dict(os.environ)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.setdefault("COWCONV_PRELOAD_LITELLM", "0")
    # _ohport and the ported ``tests`` package first, then the caller's path (a worktree's
    # checkout of cowconv ahead of the installed one).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(out), os.environ.get("PYTHONPATH")]))
    command = [
        python,
        "-m",
        "pytest",
        "-c",
        "pytest.ini",
        "--rootdir",
        ".",
        "--confcutdir",
        ".",
        *pytest_args,
    ]
    if not any(not a.startswith("-") for a in pytest_args):
        command.append("tests")
    return subprocess.call(command, cwd=out, env=env)


# ---------------------------------------------------------------- comparing runs


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the message) from a JUnit XML file."""
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "")
        if not classname:  # a file that could not be collected
            error = case.find("error")
            message = "" if error is None else (error.text or error.get("message") or "")
            lines = [ln for ln in message.splitlines() if ln.startswith("E ")]
            path = name.replace(".", "/") + ".py"
            results[path + "::*"] = ("error", (lines[-1] if lines else message)[:200])
            continue
        module, _, cls = classname, "", ""
        parts = classname.split(".")
        # classname is tests.sdk...test_file[.TestClass]
        for i in range(len(parts), 0, -1):
            if parts[i - 1].startswith("test_"):
                module, cls = "/".join(parts[:i]) + ".py", ".".join(parts[i:])
                break
        test_id = f"{module}::{cls + '::' if cls else ''}{name}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or child.text or "").strip()
                message = message.splitlines()[0] if message else ""
            elif child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "").strip()
        results[test_id] = (outcome, message[:200])
    return results


def report(openhands_xml: Path, cowconv_xml: Path) -> str:
    """A Markdown table per file: each test's outcome on openhands-sdk and on cowconv."""
    oh, cc = _outcomes(openhands_xml), _outcomes(cowconv_xml)
    by_file: dict[str, list[str]] = {}
    for test_id in sorted(set(oh) | set(cc)):
        by_file.setdefault(test_id.split("::")[0], []).append(test_id)
    out = ["| file | selected | pass on openhands | pass on cowconv |", "|---|---|---|---|"]
    for path, ids in by_file.items():
        ids = [i for i in ids if not i.endswith("::*")]
        whole = cc.get(path + "::*")
        out.append(
            f"| `{path}` | {len(ids)} | {sum(oh.get(i, ('',))[0] == 'passed' for i in ids)} "
            f"| {0 if whole else sum(cc.get(i, ('',))[0] == 'passed' for i in ids)} |"
        )
    for path, ids in by_file.items():
        out += [
            "",
            f"### `{path}`",
            "",
            "| test | openhands | cowconv | cowconv failure |",
            "|---|---|---|---|",
        ]
        for test_id in ids:
            if test_id.endswith("::*"):
                continue
            o = oh.get(test_id, ("missing", ""))
            c = cc.get(test_id) or cc.get(path + "::*", ("missing", ""))
            if test_id not in cc and path + "::*" in cc:
                c = ("error", "file does not import: " + c[1])
            note = c[1].replace("|", "\\|") if c[0] not in ("passed",) else ""
            out.append(f"| `{test_id.split('::', 1)[1]}` | {o[0]} | {c[0]} | {note} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- what each test needs


def _referenced(node: ast.AST) -> set[str]:
    """Bare names, ``self.x`` attributes and ``private ._x`` uses in a piece of code."""
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            if isinstance(sub.value, ast.Name) and sub.value.id == "self":
                names.add("self." + sub.attr)
            elif (
                sub.attr.startswith("_")
                and not sub.attr.startswith("__")
                and not (isinstance(sub.value, ast.Name) and sub.value.id in ("self", "_mod"))
                and sub.attr not in _NOT_OPENHANDS_PRIVATE
            ):
                names.add("private ." + sub.attr)
    return names


#: Underscore names the selected tests use that are not OpenHands' (mock, pytest, pydantic).
_NOT_OPENHANDS_PRIVATE = frozenset({"_mock_children", "_mock_return_value", "_asdict"})


def _patch_targets(node: ast.AST, modules: set[str]) -> set[tuple[str, str]]:
    """(OpenHands module, attribute) named by patch()/setattr() strings in ``node``."""
    found = set()
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call) or not sub.args:
            continue
        func = sub.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = sub.args[0]
        if (
            name in PATCH_CALLS
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value.startswith("openhands.")
        ):
            module, rest = split_dotted(first.value, modules)
            if rest:
                found.add((module, rest.split(".")[0]))
    return found


def _closure(
    start: ast.AST,
    cls: ast.ClassDef | None,
    imported: dict[str, str],
    top: dict[str, ast.AST],
    modules: set[str],
) -> tuple[set[str], set[tuple[str, str]]]:
    """The OpenHands names and patch targets reachable from ``start``."""
    todo, seen_defs = [start], set()
    names: set[str] = set()
    patches: set[tuple[str, str]] = set()
    while todo:
        node = todo.pop()
        if id(node) in seen_defs:
            continue
        seen_defs.add(id(node))
        refs = _referenced(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            refs |= {a.arg for a in node.args.args}  # fixtures by name
            for deco in node.decorator_list:
                refs |= _referenced(deco)
                patches |= _patch_targets(deco, modules)
        patches |= _patch_targets(node, modules)
        for ref in refs:
            if ref.startswith("private "):
                names.add(ref)
            elif ref in imported:
                names.add(imported[ref])
            elif ref in top and top[ref] is not start:
                todo.append(top[ref])
            elif ref.startswith("self.") and cls is not None:
                for item in cls.body:
                    if getattr(item, "name", None) == ref[5:]:
                        todo.append(item)
        if cls is not None and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for item in cls.body:  # class-level fixtures the method asks for
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    item.name in {a.arg for a in node.args.args}
                ):
                    todo.append(item)
    return names, patches


def needs(
    source: Source, present: dict[tuple[str, str], bool] | None = None
) -> dict[str, set[str]]:
    """test id -> the OpenHands names (``origin.Name``) it uses that cowconv lacks.

    Static: a test uses the names its body, its class's ``self.`` helpers, the
    module-level helpers and fixtures it reaches, and its patch targets refer
    to. ``present`` caches whether cowconv has a name (checked by importing
    cowconv in this interpreter).
    """
    import importlib

    present = {} if present is None else present

    def has(origin: str, name: str) -> bool:
        key = (origin, name)
        if key not in present:
            present[key] = False
            for module_name in cowconv_chain(origin):
                try:
                    if hasattr(importlib.import_module(module_name), name):
                        present[key] = True
                        break
                except ImportError:
                    continue
        return present[key]

    modules = source.modules()
    conftest = source.read("tests/sdk/conversation/conftest.py") or ""
    result: dict[str, set[str]] = {}
    for selected in SELECTION:
        text = source.read(selected.path)
        if text is None:
            continue
        tree = ast.parse(text + "\n" + conftest)
        imported: dict[str, str] = {}  # local name -> origin module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_openhands(node.module):
                for alias in node.names:
                    imported[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        top: dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                top[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        top[target.id] = node

        tests: list[tuple[str, ast.AST, ast.ClassDef | None]] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
                "test"
            ):
                tests.append((node.name, node, None))
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(
                        item, (ast.FunctionDef, ast.AsyncFunctionDef)
                    ) and item.name.startswith("test"):
                        tests.append((f"{node.name}::{item.name}", item, node))
        # Module-level statements that run at import (class bodies, decorators) are
        # needed by every test of the file.
        module_level: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("Test"):
                for base in node.bases:
                    module_level |= {imported[r] for r in _referenced(base) if r in imported}
        for name, node, cls in tests:
            if selected.tests and not any(fnmatch.fnmatchcase(name, p) for p in selected.tests):
                continue
            names, patches = _closure(node, cls, imported, top, modules)
            missing = {n for n in names if n.startswith("private ")}
            missing |= {
                f"{o.split(':')[0]}.{o.split(':')[1]}"
                for o in names | module_level
                if not o.startswith("private ") and not has(*o.split(":"))
            }
            missing |= {f"patch {m}.{a}" for m, a in patches if not has(m, a)}
            result[f"{selected.path}::{name}"] = missing
    return result


# ---------------------------------------------------------------- command line


def _load_venv_module():  # type: ignore[no-untyped-def]
    """tests/openhands/venv.py, loaded by path (its name would shadow the stdlib's venv)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cowconv_openhands_venv", HERE / "venv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source_from(args: argparse.Namespace) -> Source:
    source = find_source(args.source, args.git_dir, args.commit)
    if source is None:
        raise SystemExit(
            "no OpenHands checkout: pass --source DIR or --git-dir GITDIR, or set "
            "OPENHANDS_GIT_DIR (a snapshot of OpenHands/software-agent-sdk)"
        )
    return source


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("write", "run"):
        p = sub.add_parser(name, help=f"{name} the ported tests")
        p.add_argument("--source", help="an OpenHands checkout (a directory)")
        p.add_argument("--git-dir", help="an OpenHands git directory (no work tree)")
        p.add_argument("--commit", default=None, help=f"with --git-dir (default {SOURCE_COMMIT})")
        p.add_argument("--target", choices=("cowconv", "openhands"), default="cowconv")
        p.add_argument("--out", help="where to write (default tests/openhands/ported/TARGET)")
        p.add_argument(
            "--strict-imports",
            action="store_true",
            help="rename imports only: a name cowconv lacks fails the whole file",
        )
        if name == "run":
            p.add_argument(
                "--python",
                help="the interpreter to run pytest with "
                "(default: this one for cowconv; the venv.py build for openhands)",
            )
            p.add_argument(
                "pytest_args",
                nargs=argparse.REMAINDER,
                help="-- then arguments for pytest (e.g. --junitxml x.xml -q)",
            )
    p = sub.add_parser("needs", help="per test, the OpenHands names cowconv lacks (static)")
    p.add_argument("--source")
    p.add_argument("--git-dir")
    p.add_argument("--commit", default=None)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = sub.add_parser("report", help="compare two JUnit XML runs")
    p.add_argument("openhands_xml")
    p.add_argument("cowconv_xml")
    args = parser.parse_args(list(argv) if argv is not None else None)

    if args.command == "report":
        sys.stdout.write(report(Path(args.openhands_xml), Path(args.cowconv_xml)))
        return 0
    if args.command == "needs":
        import json

        found = needs(_source_from(args))
        if args.json:
            print(json.dumps({k: sorted(v) for k, v in found.items()}, indent=1))
        else:
            for test_id, missing in found.items():
                print(test_id, "|", ", ".join(sorted(missing)) or "-")
        return 0
    source = _source_from(args)
    out = Path(args.out) if args.out else DEFAULT_OUT / args.target
    changes = port(source, out, args.target, strict=args.strict_imports)
    count = sum(len(c) for c in changes.values())
    print(
        f"ported {len(SELECTION)} files from {source.describe()} to {out} "
        f"({args.target}; {count} changes)",
        file=sys.stderr,
    )
    if args.command == "write":
        return 0
    python = args.python
    if python is None:
        if args.target == "cowconv":
            python = sys.executable
        else:
            python = str(_load_venv_module().openhands_python())
    pytest_args = [a for a in args.pytest_args if a != "--"]
    return run(out, python, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
