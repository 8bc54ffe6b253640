"""Tools: what an agent can do, resolved by name from a registry.

An :class:`~cowconv.Agent` holds :class:`~cowconv.Tool` references
(``Tool(name="terminal")``), which serialise and fork as plain data. The
registry turns a name into a :class:`ToolDefinition` subclass; the spec the
model sees is derived from the subclass's pydantic ``Params`` model.

>>> from pydantic import BaseModel
>>> class EchoParams(BaseModel):
...     text: str
>>> @register_tool
... class EchoTool(ToolDefinition[EchoParams]):
...     '''Repeat the text back.'''
...     name = "echo"
...     Params = EchoParams
...     def execute(self, params: EchoParams) -> ToolResult:
...         return ToolResult(output=params.text, exit_code=0)
>>> resolve_tool("echo") is EchoTool
True
>>> EchoTool.spec()["function"]["parameters"]["required"]
['text']
>>> from cowconv import Workspace
>>> tool = EchoTool.create(Workspace(working_dir="."))
>>> tool.execute(tool.parse_arguments('{"text": "hi"}')).output
'hi'

Built-in tools (``terminal``) are registered on first use, so
``Tool(name="terminal")`` resolves without importing
``cowconv.tools.terminal`` first, and ``import cowconv`` stays light.
"""

from __future__ import annotations

import importlib
import inspect
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pyrsistent import PMap
from typing_extensions import TypeVar

from cowconv._exceptions import InvalidTypeError, InvalidValueError, ToolArgumentError
from cowconv.core.events import Event
from cowconv.core.frozen import decode_json, freeze, thaw
from cowconv.core.schema import Action, Observation
from cowconv.core.workspace import Workspace

__all__ = [
    "Action",
    "Observation",
    "ToolDefinition",
    "ToolExecutor",
    "ToolResult",
    "decode_arguments",
    "register_tool",
    "registered_tools",
    "resolve_tool",
]

# Built-in tools: name -> module that registers it when imported.
_BUILTINS = {"terminal": "cowconv.tools.terminal"}
_REGISTRY: dict[str, type[ToolDefinition[Any]]] = {}
_REGISTRY_LOCK = threading.Lock()


def decode_arguments(arguments: str, tool_name: str) -> PMap[str, Any]:
    """A tool call's JSON ``arguments`` text as a frozen JSON object (empty text: ``{}``).

    Text that is not JSON, not an object, or holds what a history cannot
    record (JSON's ``NaN``, a lone surrogate, nesting deeper than
    :data:`~cowconv.core.frozen.MAX_DEPTH`) is a :class:`ToolArgumentError`
    naming ``tool_name``.

    >>> decode_arguments('{"command": "ls"}', "terminal")["command"]
    'ls'
    >>> decode_arguments("[1, 2]", "terminal")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.ToolArgumentError: the arguments of 'terminal' must be a JSON ...
    """
    try:
        decoded = decode_json(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError) as error:
        reason = error if isinstance(error, ValueError) else "nested too deeply"
        raise ToolArgumentError(
            f"the arguments of {tool_name!r} are not valid JSON ({reason}): {arguments!r}"
        ) from None
    if not isinstance(decoded, dict):
        raise ToolArgumentError(
            f"the arguments of {tool_name!r} must be a JSON object, got {arguments!r}"
        )
    try:
        frozen: PMap[str, Any] = freeze(decoded)
    except (ValueError, RecursionError) as error:
        reason = error if isinstance(error, ValueError) else "nested too deeply"
        raise ToolArgumentError(
            f"the arguments of {tool_name!r} cannot be recorded ({reason}): {arguments!r}"
        ) from None
    return frozen


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: text for the model, an exit code, JSON-like extras.

    >>> ToolResult(output="a.py", exit_code=0).output
    'a.py'
    """

    output: str
    exit_code: int | None = None
    extra: Mapping[str, Any] | None = None


P = TypeVar("P", bound=BaseModel)
#: What a tool call's arguments validate to: cowconv's ``Params`` model or OpenHands' ``Action``.
ActionT = TypeVar("ActionT", bound=BaseModel)
#: What the tool answers: OpenHands' ``Observation`` type; cowconv's one-parameter tools
#: (``ToolDefinition[Params]``) answer a :class:`ToolResult`, the default.
ObservationT = TypeVar("ObservationT", default=ToolResult)


class ToolExecutor(ABC, Generic[ActionT, ObservationT]):
    """What runs an OpenHands-style tool: called with the action, answers an observation.

    OpenHands' SDK keeps the code of a tool in an executor object beside the
    tool's description; ``close`` releases what it holds and ``interrupt``
    (called from another thread) stops a call in flight.

    >>> class EchoAction(Action):
    ...     text: str
    >>> class Echo(ToolExecutor[EchoAction, Observation]):
    ...     def __call__(self, action, conversation=None):
    ...         return Observation.from_text(action.text)
    >>> Echo()(EchoAction(text="hi")).text
    'hi'
    """

    @abstractmethod
    def __call__(self, action: ActionT, conversation: Any = None) -> ObservationT:
        """Run the tool for ``action`` (in ``conversation`` when given)."""

    def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release processes or connections (the default holds none)."""

    def interrupt(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Stop a call in flight, from another thread (the default does nothing)."""


def _snake_case(name: str) -> str:
    """``"GrepTool"`` -> ``"grep_tool"``; a run of capitals is one word (``"MCPTool"``).

    >>> _snake_case("GrepTool"), _snake_case("MCPTool"), _snake_case("FileEditor2")
    ('grep_tool', 'mcp_tool', 'file_editor2')
    """
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|\b|[0-9_])|[A-Z]?[a-z0-9]+|[A-Z]+", name)
    return "_".join(word.lower() for word in words)


class NoSettings(BaseModel):
    """Settings of a tool that takes none (``Tool(name=...).params`` must be empty)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ToolDefinition(ABC, Generic[ActionT, ObservationT]):
    """Base class of tools: a ``name``, a pydantic ``Params`` model and ``execute``.

    Subclasses set ``name``, ``Params`` (the arguments the model passes,
    validated before ``execute``), optionally ``Settings`` (validated from
    ``Tool(name=..., params=...)``) and ``description`` (default: the class
    docstring). One instance serves one conversation; ``close()`` releases
    what it holds.

    >>> from pydantic import BaseModel
    >>> from cowconv import Workspace
    >>> class WordCountParams(BaseModel):
    ...     text: str
    >>> class WordCount(ToolDefinition[WordCountParams]):
    ...     description = "Count the words of a text."
    ...     name = "doc_word_count"
    ...     Params = WordCountParams
    ...     def execute(self, params):
    ...         return ToolResult(output=str(len(params.text.split())), exit_code=0)
    >>> tool = WordCount.create(Workspace(working_dir="."))
    >>> tool.execute(tool.parse_arguments('{"text": "fork me cheaply"}')).output
    '3'
    >>> WordCount.spec()["function"]["parameters"]["required"]
    ['text']
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]]
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # As in OpenHands' SDK: a class that names itself nothing is named after its class,
        # in snake case without a "_tool" suffix (class GrepTool -> "grep").
        if "name" not in cls.__dict__:
            cls.name = _snake_case(cls.__name__).removesuffix("_tool")

    def __init__(self, workspace: Workspace, settings: BaseModel) -> None:
        self.workspace = workspace
        self.settings = settings

    @classmethod
    def create(cls, workspace: Workspace, params: Mapping[str, Any] | None = None) -> Self:
        """An instance for ``workspace``, with ``params`` validated as its ``Settings``."""
        try:
            settings = cls.Settings.model_validate(dict(params or {}))
        except ValidationError as error:
            raise InvalidValueError(f"invalid settings for tool {cls.name!r}: {error}") from None
        return cls(workspace, settings)

    @classmethod
    def spec(cls) -> dict[str, Any]:
        """The OpenAI function spec of this tool, derived from ``Params``."""
        schema = cls.Params.model_json_schema()
        schema.pop("title", None)
        description = cls.description or inspect.cleandoc(cls.__doc__ or "") or cls.name
        return {
            "type": "function",
            "function": {"name": cls.name, "description": description, "parameters": schema},
        }

    def parse_arguments(self, arguments: str) -> ActionT:
        """The model's JSON ``arguments`` text as ``Params``, or :class:`ToolArgumentError`.

        A convenience for :func:`decode_arguments` then :meth:`validate_arguments`,
        which is the path a run takes (it records the decoded arguments first).

        >>> from cowconv import Workspace
        >>> terminal = resolve_tool("terminal").create(Workspace(working_dir="."))
        >>> terminal.parse_arguments('{"command": "ls"}').command
        'ls'
        """
        return self.validate_arguments(decode_arguments(arguments, self.name))

    def validate_arguments(self, arguments: Mapping[str, Any]) -> ActionT:
        """Decoded arguments (a JSON object, frozen or not) as ``Params``.

        Arguments that do not fit ``Params`` are a :class:`ToolArgumentError`
        naming every problem.

        >>> from cowconv import Workspace
        >>> terminal = resolve_tool("terminal").create(Workspace(working_dir="."))
        >>> terminal.validate_arguments({"command": "ls"}).command
        'ls'
        >>> terminal.validate_arguments({})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ToolArgumentError: invalid arguments for 'terminal': command: ...
        """
        try:
            params: ActionT = self.Params.model_validate(thaw(arguments))  # type: ignore[assignment]
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or '(arguments)'}: "
                f"{problem['msg']}"
                for problem in error.errors()
            )
            raise ToolArgumentError(f"invalid arguments for {self.name!r}: {problems}") from None
        return params

    @abstractmethod
    def execute(self, params: ActionT) -> ToolResult:
        """Run the tool. Raising means the tool crashed (the run stops with an error)."""

    def restore(self, events: Sequence[Event]) -> None:
        """Take up what this tool left in a conversation's history (the default: nothing).

        Called once, with the conversation's history, before the first
        ``execute`` of an instance; a fork's tools get the fork's history,
        so they can start where the source's stood at the fork point.
        """

    def close(self) -> None:
        """Release processes or connections (the default holds none)."""


def register_tool(cls: type[ToolDefinition[P]]) -> type[ToolDefinition[P]]:
    """Register a tool class under its ``name`` (usable as a decorator).

    Registering another class under a taken name is a ``ValueError``;
    registering the same class again does nothing.

    >>> from pydantic import BaseModel
    >>> class ShoutParams(BaseModel):
    ...     text: str
    >>> @register_tool
    ... class Shout(ToolDefinition[ShoutParams]):
    ...     description = "Upper-case a text."
    ...     name = "doc_shout"
    ...     Params = ShoutParams
    ...     def execute(self, params):
    ...         return ToolResult(output=params.text.upper())
    >>> resolve_tool("doc_shout") is Shout  # an agent may now use Tool(name="doc_shout")
    True
    """
    if not (isinstance(cls, type) and issubclass(cls, ToolDefinition)):
        raise InvalidTypeError(f"register_tool() takes a ToolDefinition subclass, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise InvalidValueError(f"{cls.__name__} needs a non-empty class attribute `name`")
    if not (isinstance(getattr(cls, "Params", None), type) and issubclass(cls.Params, BaseModel)):
        raise InvalidValueError(
            f"{cls.__name__} needs a pydantic model as class attribute `Params`"
        )
    with _REGISTRY_LOCK:
        taken = _REGISTRY.get(name)
        if taken is not None and taken.__qualname__ != cls.__qualname__:
            raise InvalidValueError(
                f"tool name {name!r} is already registered by {taken.__qualname__}"
            )
        _REGISTRY[name] = cls
    return cls


def resolve_tool(name: str) -> type[ToolDefinition[Any]]:
    """The tool class registered as ``name``; built-ins are imported on demand.

    >>> resolve_tool("terminal").name
    'terminal'
    >>> resolve_tool("no-such-tool")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: unknown tool 'no-such-tool'; registered tools: ...
    """
    tool = _REGISTRY.get(name)
    if tool is None and name in _BUILTINS:
        importlib.import_module(_BUILTINS[name])
        tool = _REGISTRY.get(name)
    if tool is None:
        known = ", ".join(repr(n) for n in registered_tools())
        raise InvalidValueError(f"unknown tool {name!r}; registered tools: {known}")
    return tool


def registered_tools() -> list[str]:
    """The names of every tool that can be resolved, built-ins included.

    >>> "terminal" in registered_tools()
    True
    """
    return sorted(_REGISTRY.keys() | _BUILTINS.keys())
