"""``GlobTool`` and ``GrepTool``: OpenHands' read-only file search tools (``glob``, ``grep``).

>>> import pathlib, tempfile
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> _ = (root / "fork.py").write_text("def fork(): ...\\n")
>>> found = GlobExecutor(str(root))(GlobAction(pattern="*.py"))
>>> [pathlib.Path(name).name for name in found.files]
['fork.py']
>>> GrepExecutor(str(root))(GrepAction(pattern="def\\\\s+fork")).matches == found.files
True

``glob`` finds files by name pattern (``**/*.py``; a pattern without
``**`` matches at any depth, as OpenHands' ripgrep backend does), ``grep``
finds files whose content matches a regular expression (case-insensitive;
``include`` filters file names, e.g. ``*.py``). Both answer absolute paths,
newest first, at most 100, with OpenHands' texts. Hidden files and
directories (a name starting with ``.``) are left out. They read files and
change nothing, so a fork needs nothing of them: they keep no state.

OpenHands' SDK runs ripgrep when it is installed (which also skips what
``.gitignore`` lists); cowconv searches in Python, as OpenHands does without
ripgrep.
"""

from __future__ import annotations

import fnmatch
import glob as glob_module
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import Field
from pyrsistent import pmap

from cowconv._exceptions import InvalidTypeError, WorkspaceMissingError
from cowconv.agent.tools import ToolDefinition, ToolExecutor, register_tool
from cowconv.core.schema import Action, Observation
from cowconv.core.workspace import Workspace

__all__ = [
    "GlobAction",
    "GlobExecutor",
    "GlobObservation",
    "GlobTool",
    "GrepAction",
    "GrepExecutor",
    "GrepObservation",
    "GrepTool",
]

_MAX_RESULTS = 100
_TRUNCATED = "\n\n[Results truncated to first 100 files. Consider using a more specific pattern.]"
_READ_ONLY = pmap(
    {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
)


def _newest_first(paths: list[str]) -> tuple[tuple[str, ...], bool]:
    """Up to 100 paths, most recently modified first, and whether more were found."""

    def modified(path: str) -> float:
        try:
            return os.path.getmtime(path)
        except OSError:
            return float("-inf")

    ordered = sorted(paths, key=modified, reverse=True)
    return tuple(ordered[:_MAX_RESULTS]), len(ordered) > _MAX_RESULTS


def _working_dir(conv_state: Any) -> str:
    workspace = (
        conv_state if isinstance(conv_state, Workspace) else getattr(conv_state, "workspace", None)
    )
    if not isinstance(workspace, Workspace):
        raise InvalidTypeError(
            f"the search tools are made for a conversation state or a Workspace, "
            f"got {type(conv_state).__name__}"
        )
    if not os.path.isdir(workspace.working_dir):
        raise WorkspaceMissingError(
            f"the workspace directory {workspace.working_dir!r} does not exist"
        )
    return workspace.working_dir


_Tool = TypeVar("_Tool", bound=ToolDefinition[Any, Any])


def _one_search_tool(
    cls: type[_Tool],
    conv_state: Any,
    settings: Mapping[str, Any],
    *,
    description: str,
    relative: str,
    action_type: type[Action],
    observation_type: type[Observation],
    executor: Callable[[str], ToolExecutor[Any, Any]],
) -> list[_Tool]:
    """``[cls(...)]`` searching the workspace of ``conv_state``: what both tools' ``create`` do."""
    if settings:
        raise InvalidTypeError(f"the {cls.name} tool takes no settings, got {sorted(settings)}")
    working_dir = _working_dir(conv_state)
    return [
        cls(
            description=(
                f"{description}\n\nYour current working directory is: {working_dir}\n{relative}"
            ),
            action_type=action_type,
            observation_type=observation_type,
            annotations=_READ_ONLY,
            executor=executor(working_dir),
        )
    ]


# -- glob ------------------------------------------------------------------------------------


class GlobAction(Action):
    """A ``glob`` call: a file name pattern, and the directory to search (default: workspace).

    >>> GlobAction(pattern="**/*.py").path is None
    True
    """

    pattern: str = Field(
        description='The glob pattern to match files (e.g., "**/*.js", "src/**/*.ts")'
    )
    path: str | None = Field(
        default=None,
        description=(
            "The directory (absolute path) to search in. Defaults to the current working directory."
        ),
    )


class GlobObservation(Observation):
    """What ``glob`` found: the files (newest first), the pattern and the directory searched.

    >>> GlobObservation.from_text("none", files=(), pattern="*.md", search_path="/").files
    ()
    """

    files: tuple[str, ...] = Field(
        description="List of matching file paths sorted by modification time"
    )
    pattern: str = Field(description="The glob pattern that was used")
    search_path: str = Field(description="The directory that was searched")
    truncated: bool = Field(
        default=False, description="Whether results were truncated to 100 files"
    )


def _split_absolute(pattern: str) -> tuple[Path | None, str]:
    """An absolute pattern's directory (up to its first wildcard) and the rest; else None."""
    if not pattern:
        return None, "**/*"
    pattern = os.path.expanduser(pattern)
    if not pattern.startswith("/"):
        return None, pattern
    parts = Path(pattern).parts
    fixed: list[str] = []
    for part in parts:
        if glob_module.has_magic(part):
            break
        fixed.append(part)
    rest = parts[len(fixed) :]
    return Path(*fixed).resolve(), "/".join(rest) if rest else "**/*"


class GlobExecutor(ToolExecutor[GlobAction, GlobObservation]):
    """Runs ``glob`` calls in ``working_dir`` (OpenHands' class; its Python search).

    >>> import tempfile
    >>> GlobExecutor(tempfile.mkdtemp())(GlobAction(pattern="*.rs")).text.startswith("No files")
    True
    """

    def __init__(self, working_dir: str) -> None:
        self.working_dir = Path(working_dir).resolve()

    def __call__(self, action: GlobAction, conversation: Any = None) -> GlobObservation:
        """The files matching ``action.pattern``, or an error observation saying why none."""
        if action.path:
            search_path, pattern = Path(action.path).resolve(), action.pattern
        else:
            extracted, pattern = _split_absolute(action.pattern)
            search_path = extracted if extracted is not None else self.working_dir
        if not search_path.is_dir():
            return GlobObservation.from_text(
                f"Search path '{search_path}' is not a valid directory",
                is_error=True,
                files=(),
                pattern=action.pattern,
                search_path=str(search_path),
            )
        if "**" not in pattern:  # as ripgrep's -g: a pattern matches at any depth
            pattern = f"**/{pattern}"
        matches = glob_module.glob(pattern, root_dir=search_path, recursive=True)
        found = [str(search_path / match) for match in matches]
        files, truncated = _newest_first([path for path in found if os.path.isfile(path)])
        if not files:
            text = (
                f"No files found matching pattern '{action.pattern}' in directory '{search_path}'"
            )
        else:
            text = (
                f"Found {len(files)} file(s) matching pattern '{action.pattern}' "
                f"in '{search_path}':\n" + "\n".join(files)
            )
            if truncated:
                text += _TRUNCATED
        return GlobObservation.from_text(
            text,
            files=files,
            pattern=action.pattern,
            search_path=str(search_path),
            truncated=truncated,
        )


GLOB_DESCRIPTION = """Fast file pattern matching tool.
* Supports glob patterns like "**/*.js" or "src/**/*.ts"
* Use this tool when you need to find files by name patterns
* Returns matching file paths sorted by modification time
* Only the first 100 results are returned. Consider narrowing your search with stricter glob \
patterns or provide path parameter if you need more results.

Examples:
- Find all JavaScript files: "**/*.js"
- Find TypeScript files in src: "src/**/*.ts"
- Find Python test files: "**/test_*.py"
"""


class GlobTool(ToolDefinition[GlobAction, GlobObservation]):
    """The ``glob`` tool: find files by name pattern in the conversation's workspace.

    >>> import tempfile
    >>> from cowconv import Workspace
    >>> [tool] = GlobTool.create(Workspace(working_dir=tempfile.mkdtemp()))
    >>> tool.name, tool.to_openai_tool()["function"]["parameters"]["required"]
    ('glob', ['pattern'])
    """

    name = "glob"
    #: One line for catalogues of tools (OpenHands' SDK's attribute).
    catalog_description: ClassVar[str] = "Find files by name pattern, such as **/*.ts."

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: Any = None, params: Mapping[str, Any] | None = None, **options: Any
    ) -> list[GlobTool]:
        """A one-tool list searching the workspace of ``conv_state`` (or a Workspace)."""
        return _one_search_tool(
            cls,
            conv_state,
            {**(params or {}), **options},
            description=GLOB_DESCRIPTION,
            relative="When searching for files, patterns are relative to this directory.",
            action_type=GlobAction,
            observation_type=GlobObservation,
            executor=GlobExecutor,
        )


# -- grep ------------------------------------------------------------------------------------


class GrepAction(Action):
    """A ``grep`` call: a regular expression, a directory, and a file name filter.

    >>> GrepAction(pattern="TODO", include="*.py").include
    '*.py'
    """

    pattern: str = Field(description="The regex pattern to search for in file contents")
    path: str | None = Field(
        default=None,
        description=(
            "The directory (absolute path) to search in. Defaults to the current working directory."
        ),
    )
    include: str | None = Field(
        default=None,
        description=(
            'Optional file pattern to filter which files to search (e.g., "*.js", "*.{ts,tsx}")'
        ),
    )


class GrepObservation(Observation):
    """What ``grep`` found: the files whose content matches (newest first), and the search.

    >>> GrepObservation.from_text("none", matches=(), pattern="x", search_path="/").matches
    ()
    """

    matches: tuple[str, ...] = Field(description="List of file paths containing the pattern")
    pattern: str = Field(description="The regex pattern that was used")
    search_path: str = Field(description="The directory that was searched")
    include_pattern: str | None = Field(
        default=None, description="The file pattern filter that was used"
    )
    truncated: bool = Field(
        default=False, description="Whether results were truncated to 100 files"
    )


def _expand_braces(pattern: str) -> list[str]:
    """``*.{ts,tsx}`` -> ``['*.ts', '*.tsx']`` (one level of braces, as ripgrep's globs)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [
        expanded
        for choice in match.group(1).split(",")
        for expanded in _expand_braces(head + choice + tail)
    ]


def _visible_files(root: Path) -> Iterator[Path]:
    """Every file under ``root`` outside hidden directories, hidden files left out."""
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if not name.startswith(".")]
        for name in files:
            if not name.startswith("."):
                yield Path(directory) / name


def _contains(path: Path, regex: re.Pattern[str]) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as file:
            return any(regex.search(line) for line in file)
    except OSError:
        return False


class GrepExecutor(ToolExecutor[GrepAction, GrepObservation]):
    """Runs ``grep`` calls in ``working_dir`` (OpenHands' class; its Python search).

    >>> import tempfile
    >>> GrepExecutor(tempfile.mkdtemp())(GrepAction(pattern="(")).text.startswith("Invalid regex")
    True
    """

    def __init__(self, working_dir: str) -> None:
        self.working_dir = Path(working_dir).resolve()

    def __call__(self, action: GrepAction, conversation: Any = None) -> GrepObservation:
        """The files whose content matches ``action.pattern``, or an error observation."""
        search_path = Path(action.path).resolve() if action.path else self.working_dir

        def failed(text: str) -> GrepObservation:
            return GrepObservation.from_text(
                text,
                is_error=True,
                matches=(),
                pattern=action.pattern,
                search_path=str(search_path),
                include_pattern=action.include,
            )

        if not search_path.is_dir():
            return failed(f"Search path '{action.path}' is not a valid directory")
        try:
            regex = re.compile(action.pattern, re.IGNORECASE)
        except re.error as error:
            return failed(f"Invalid regex pattern: {error}")
        includes = _expand_braces(action.include) if action.include else None
        found = [
            str(path)
            for path in _visible_files(search_path)
            if (includes is None or any(fnmatch.fnmatch(path.name, i) for i in includes))
            and _contains(path, regex)
        ]
        matches, truncated = _newest_first(found)
        include_info = f" (filtered by '{action.include}')" if action.include else ""
        if not matches:
            text = (
                f"No files found containing pattern '{action.pattern}' "
                f"in directory '{search_path}'{include_info}"
            )
        else:
            text = (
                f"Found {len(matches)} file(s) containing pattern '{action.pattern}' "
                f"in '{search_path}'{include_info}:\n" + "\n".join(matches)
            )
            if truncated:
                text += _TRUNCATED
        return GrepObservation.from_text(
            text,
            matches=matches,
            pattern=action.pattern,
            search_path=str(search_path),
            include_pattern=action.include,
            truncated=truncated,
        )


GREP_DESCRIPTION = """Fast content search tool.
* Searches file contents using regular expressions
* Supports full regex syntax (eg. "log.*Error", "function\\s+\\w+", etc.)
* Filter files by pattern with the include parameter (eg. "*.js", "*.{ts,tsx}")
* Returns matching file paths sorted by modification time.
* Only the first 100 results are returned. Consider narrowing your search with stricter regex \
patterns or provide path parameter if you need more results.
* Use this tool when you need to find files containing specific patterns.
"""


class GrepTool(ToolDefinition[GrepAction, GrepObservation]):
    """The ``grep`` tool: find files whose content matches a regular expression.

    >>> import tempfile
    >>> from cowconv import Workspace
    >>> [tool] = GrepTool.create(Workspace(working_dir=tempfile.mkdtemp()))
    >>> tool.name, sorted(tool.to_openai_tool()["function"]["parameters"]["properties"])
    ('grep', ['include', 'path', 'pattern'])
    """

    name = "grep"
    #: One line for catalogues of tools (OpenHands' SDK's attribute).
    catalog_description: ClassVar[str] = "Search file contents with regular expressions."

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: Any = None, params: Mapping[str, Any] | None = None, **options: Any
    ) -> list[GrepTool]:
        """A one-tool list searching the workspace of ``conv_state`` (or a Workspace)."""
        return _one_search_tool(
            cls,
            conv_state,
            {**(params or {}), **options},
            description=GREP_DESCRIPTION,
            relative="When searching for content, searches are performed in this directory.",
            action_type=GrepAction,
            observation_type=GrepObservation,
            executor=GrepExecutor,
        )


register_tool(GlobTool.name, GlobTool)
register_tool(GrepTool.name, GrepTool)
