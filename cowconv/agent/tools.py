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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, overload

from pydantic import BaseModel, ConfigDict, ValidationError
from pyrsistent import PMap
from typing_extensions import TypeVar

from cowconv._exceptions import InvalidTypeError, InvalidValueError, ToolArgumentError
from cowconv.core.events import Event
from cowconv.core.frozen import decode_json, freeze, thaw
from cowconv.core.message import TextContent
from cowconv.core.schema import Action, Observation
from cowconv.core.usage import Usage
from cowconv.core.workspace import Workspace

if TYPE_CHECKING:
    from cowconv.core.agent import Tool
    from cowconv.core.state import ConversationState

__all__ = [
    "Action",
    "DeclaredResources",
    "Observation",
    "ToolDefinition",
    "ToolExecutor",
    "ToolResult",
    "create_tools",
    "decode_arguments",
    "openhands_style",
    "register_tool",
    "registered_tools",
    "resolve_tool",
]

# Built-in tools: name -> module that registers it when imported.
_BUILTINS = {
    "terminal": "cowconv.tools.terminal",
    "file_editor": "cowconv.tools.file_editor",
    "task_tracker": "cowconv.tools.task_tracker",
    "browser_tool_set": "cowconv.tools.browser_use",
    "task_tool_set": "cowconv.tools.task",
    "workflow_tool_set": "cowconv.tools.workflow",
    "glob": "cowconv.tools.search",
    "grep": "cowconv.tools.search",
    "planning_file_editor": "cowconv.tools.planning_file_editor",
}
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
    #: An OpenHands-style tool's answer, recorded whole on the observation event.
    observation: Observation | None = None
    #: What the call spent on LLMs of its own (a sub-agent's), by usage id: the run adds it
    #: to the conversation's stats with the step.
    usage: Mapping[str, Usage] | None = None


@dataclass(frozen=True)
class DeclaredResources:
    """What a tool call touches, for running a step's calls in parallel (OpenHands' SDK's).

    Calls that share a key never run at once. ``declared=False`` (the
    default) means "unknown": such a tool's calls run one at a time.
    ``declared=True`` with no keys: the call may run beside any other.

    >>> DeclaredResources(keys=("file:/tmp/a",), declared=True).keys
    ('file:/tmp/a',)
    """

    keys: tuple[str, ...] = ()
    declared: bool = False


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
    """Base class of tools: cowconv's class-level form, or OpenHands' instance form.

    **cowconv's form**: a subclass sets ``name``, ``Params`` (the arguments
    the model passes, validated before ``execute``), optionally ``Settings``
    (validated from ``Tool(name=..., params=...)``) and ``description``
    (default: the class docstring), and implements ``execute``. One instance
    serves one conversation; ``close()`` releases what it holds.

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

    **OpenHands' form** (its SDK's ``ToolDefinition``): a subclass has no
    ``Params``; its ``create(conv_state, **params)`` returns a sequence of
    instances built with ``description``, ``action_type``,
    ``observation_type`` and an ``executor`` (a :class:`ToolExecutor`), which
    the runtime calls with the validated action. :func:`create_tools` makes a
    conversation's tools either way.

    >>> class EchoAction(Action):
    ...     text: str
    >>> class Echo(ToolExecutor[EchoAction, Observation]):
    ...     def __call__(self, action, conversation=None):
    ...         return Observation.from_text(action.text)
    >>> class EchoTool(ToolDefinition[EchoAction, Observation]):
    ...     @classmethod
    ...     def create(cls, conv_state=None, **params):
    ...         return [cls(description="Repeat.", action_type=EchoAction, executor=Echo())]
    >>> [echo] = EchoTool.create()
    >>> echo.name, echo(EchoAction(text="hi")).text
    ('echo', 'hi')
    >>> echo.execute(echo.validate_arguments({"text": "hi"})).output
    'hi'
    >>> echo.to_openai_tool()["function"]["parameters"]["required"]
    ['text']
    """

    name: ClassVar[str]
    description: str = ""
    Params: ClassVar[type[BaseModel]]
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # As in OpenHands' SDK: a class that names itself nothing is named after its class,
        # in snake case without a "_tool" suffix (class GrepTool -> "grep").
        if "name" not in cls.__dict__:
            cls.name = _snake_case(cls.__name__).removesuffix("_tool")

    def __init__(
        self,
        workspace: Workspace | None = None,
        settings: BaseModel | None = None,
        *,
        description: str | None = None,
        action_type: type[BaseModel] | None = None,
        observation_type: type[Observation] | None = None,
        executor: ToolExecutor[Any, Any] | None = None,
        annotations: Any = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        # An OpenHands-style instance (made by its own ``create``) has no workspace of its own:
        # its executor knows where it works.
        self.workspace = workspace if workspace is not None else Workspace(working_dir=".")
        self.settings = settings if settings is not None else NoSettings()
        if description is not None:
            self.description = description
        if action_type is not None and not (
            isinstance(action_type, type) and issubclass(action_type, BaseModel)
        ):
            raise InvalidTypeError(
                f"action_type of tool {self.name!r} must be an Action class, got {action_type!r}"
            )
        if observation_type is not None and not (
            isinstance(observation_type, type) and issubclass(observation_type, Observation)
        ):
            raise InvalidTypeError(
                f"observation_type of tool {self.name!r} must be an Observation class, "
                f"got {observation_type!r}"
            )
        self.action_type = action_type
        self.observation_type = observation_type
        self.executor = executor
        self.annotations = annotations
        self.meta = meta

    @overload
    @classmethod
    def create(cls, workspace: Workspace, params: Mapping[str, Any] | None = None) -> Self: ...

    @overload
    @classmethod
    def create(cls, workspace: Any = None, params: None = None, **options: Any) -> list[Self]: ...

    @classmethod
    def create(
        cls, workspace: Any = None, params: Mapping[str, Any] | None = None, **options: Any
    ) -> Self | list[Self]:
        """An instance for ``workspace``, with ``params`` validated as its ``Settings``.

        Called as OpenHands' SDK calls it, with a conversation state (or
        anything with a ``workspace``) and keyword settings, it returns a
        one-tool list; ``executor=`` there gives the tool an executor to run
        its calls (OpenHands' way of sharing one terminal between tools).
        """
        if not isinstance(workspace, Workspace):
            executor = options.pop("executor", None)
            where = getattr(workspace, "workspace", None)
            if not isinstance(where, Workspace):
                raise InvalidTypeError(
                    f"{cls.__name__}.create() takes a Workspace or a conversation state, "
                    f"got {type(workspace).__name__}"
                )
            tool = cls.create(where, {**(params or {}), **options})
            if executor is not None:
                tool.executor = executor
            return [tool]
        if options:
            raise InvalidTypeError(
                f"{cls.__name__}.create(workspace, params) takes settings as params, "
                f"not as keywords {sorted(options)}"
            )
        try:
            settings = cls.Settings.model_validate(dict(params or {}))
        except ValidationError as error:
            raise InvalidValueError(f"invalid settings for tool {cls.name!r}: {error}") from None
        return cls(workspace, settings)

    @classmethod
    def spec(cls) -> dict[str, Any]:
        """The OpenAI function spec of this tool class, derived from ``Params``."""
        description = cls.description or inspect.cleandoc(cls.__doc__ or "") or cls.name
        return _function_spec(cls.name, description, cls.Params)

    def to_openai_tool(self) -> dict[str, Any]:
        """The OpenAI function spec the model is given for this tool (OpenHands' name).

        An OpenHands-style instance's spec comes from its ``action_type``
        and ``description``; a cowconv tool's is its class's :meth:`spec`.
        """
        if self.action_type is None:
            return type(self).spec()
        description = self.description or inspect.cleandoc(type(self).__doc__ or "") or self.name
        return _function_spec(self.name, description, self.action_type)

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
        """Decoded arguments (a JSON object, frozen or not) as ``Params`` (or ``action_type``).

        Arguments that do not fit are a :class:`ToolArgumentError` naming
        every problem.

        >>> from cowconv import Workspace
        >>> terminal = resolve_tool("terminal").create(Workspace(working_dir="."))
        >>> terminal.validate_arguments({"command": "ls"}).command
        'ls'
        >>> terminal.validate_arguments({})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ToolArgumentError: invalid arguments for 'terminal': command: ...
        """
        model = self.action_type if self.action_type is not None else self.Params
        try:
            params: ActionT = model.model_validate(thaw(arguments))  # type: ignore[assignment]
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or '(arguments)'}: "
                f"{problem['msg']}"
                for problem in error.errors()
            )
            raise ToolArgumentError(f"invalid arguments for {self.name!r}: {problems}") from None
        return params

    def execute(self, params: ActionT) -> ToolResult:
        """Run the tool. Raising means the tool crashed (the run stops with an error).

        cowconv's tools implement it; an OpenHands-style tool runs its
        ``executor`` (see :meth:`__call__`) and answers with the observation,
        whose text for the model is what :attr:`Observation.to_llm_content` shows.
        """
        observation = self(params)
        text = "".join(
            part.text for part in observation.to_llm_content if isinstance(part, TextContent)
        )
        return ToolResult(output=text, observation=observation)

    def __call__(self, action: ActionT, conversation: Any = None) -> Observation:
        """Run ``action`` and answer an :class:`Observation` (OpenHands' way to call a tool).

        With an ``executor``, the executor's answer (coerced to
        ``observation_type`` when one is declared, as OpenHands' SDK does);
        a cowconv tool's :meth:`execute` result otherwise, as an observation
        that is an error when the exit code is not 0.
        """
        if self.executor is None:
            if type(self).execute is ToolDefinition.execute:
                raise NotImplementedError(f"Tool {self.name!r} has no executor")
            result = self.execute(action)
            if result.observation is not None:
                return result.observation
            failed = result.exit_code not in (None, 0)
            return Observation.from_text(result.output, is_error=failed)
        answer = self.executor(action, conversation)
        if self.observation_type is not None:
            if isinstance(answer, self.observation_type):
                return answer
            return self.observation_type.model_validate(
                answer.model_dump() if isinstance(answer, BaseModel) else answer
            )
        if isinstance(answer, Observation):
            return answer
        if isinstance(answer, BaseModel):
            return Observation.model_validate(answer.model_dump())
        if isinstance(answer, dict):
            return Observation.model_validate(answer)
        raise InvalidTypeError(
            f"the executor of tool {self.name!r} answered {type(answer).__name__}: "
            "an Observation, a pydantic model or a dict is needed without an observation_type"
        )

    def declared_resources(self, action: Any) -> DeclaredResources:
        """What a call with ``action`` touches (default: undeclared, one call at a time).

        Only ``Agent(tool_concurrency_limit=N)`` with ``N > 1`` consults it.
        """
        return DeclaredResources()

    def restore(self, events: Sequence[Event]) -> None:
        """Take up what this tool left in a conversation's history (the default: nothing).

        Called with the conversation's history before the first ``execute``
        of an instance, and again when a later run starts (``navigate_to``
        may have moved the branch since); a fork's tools get the fork's
        history, so they can start where the source's stood at the fork point.
        """

    def use_secrets(self, secrets: Mapping[str, Callable[[], str | None]]) -> None:
        """Take the conversation's secrets (name -> how to get the value); the default: none.

        The terminal exports the ones a command names and hides their values
        in its output, as OpenHands' SDK's does.
        """

    def close(self) -> None:
        """Release processes or connections: the executor's, if it has one."""
        if self.executor is not None:
            self.executor.close()


def _function_spec(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


def openhands_style(tool: type[ToolDefinition[Any]]) -> bool:
    """Whether a tool class is in OpenHands' form: no ``Params``, its own ``create``.

    >>> from cowconv.tools.terminal import TerminalTool
    >>> openhands_style(TerminalTool)
    False
    """
    if isinstance(getattr(tool, "Params", None), type):
        return False
    create = getattr(tool.create, "__func__", None)
    return create is not None and create is not ToolDefinition.create.__func__  # type: ignore[attr-defined]


class _FactoryTool(ToolDefinition[Any]):
    """A tool registered as OpenHands allows: a name and a function returning tools."""

    factory: ClassVar[Callable[..., Sequence[ToolDefinition[Any]]]]

    @classmethod
    def create(cls, workspace: Any = None, params: Any = None, **options: Any) -> Any:
        return cls.factory(workspace, **options)


def create_tools(reference: Tool, state: ConversationState) -> list[ToolDefinition[Any]]:
    """The tools ``reference`` makes for a conversation in ``state`` (one, or a tool set's).

    A cowconv tool class makes one instance for the state's workspace; an
    OpenHands-style one is asked through its ``create(conv_state, **params)``,
    which may answer several (a tool set). What it answers that is not a
    sequence of :class:`ToolDefinition` instances is an :class:`InvalidTypeError`.

    >>> from cowconv import LLM, Agent, ConversationState, Tool, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir="."))
    >>> [tool.name for tool in create_tools(Tool(name="terminal"), state)]
    ['terminal']
    """
    tool = resolve_tool(reference.name)
    if not openhands_style(tool):
        return [tool.create(state.workspace, reference.params)]
    made = tool.create(state, **thaw(reference.params))
    if not isinstance(made, Sequence) or not all(isinstance(t, ToolDefinition) for t in made):
        raise InvalidTypeError(
            f"the tools of {reference.name!r} ({tool.__qualname__}) must be a sequence of "
            f"ToolDefinition instances, got {made!r:.200}"
        )
    return list(made)


@overload
def register_tool(cls: type[ToolDefinition[P]], /) -> type[ToolDefinition[P]]: ...


@overload
def register_tool(name: str, factory: Any, /) -> Any: ...


def register_tool(cls: Any, factory: Any = None, /) -> Any:
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

    OpenHands' SDK's form, ``register_tool(name, factory)``, registers an
    OpenHands-style tool class (or a function ``factory(conv_state, **params)``
    returning tools) under ``name``:

    >>> class PingAction(Action):
    ...     host: str
    >>> class PingTool(ToolDefinition[PingAction, Observation]):
    ...     @classmethod
    ...     def create(cls, conv_state=None, **params):
    ...         return [cls(description="Ping a host.", action_type=PingAction)]
    >>> register_tool("doc_ping", PingTool) is PingTool
    True
    >>> resolve_tool("doc_ping") is PingTool
    True
    """
    if isinstance(cls, str):
        return _register(cls, _factory_class(cls, factory))
    if not (isinstance(cls, type) and issubclass(cls, ToolDefinition)):
        raise InvalidTypeError(f"register_tool() takes a ToolDefinition subclass, got {cls!r}")
    if factory is not None:
        raise InvalidTypeError("register_tool(cls) takes one argument; or register_tool(name, cls)")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise InvalidValueError(f"{cls.__name__} needs a non-empty class attribute `name`")
    if not openhands_style(cls) and not (
        isinstance(getattr(cls, "Params", None), type) and issubclass(cls.Params, BaseModel)
    ):
        raise InvalidValueError(
            f"{cls.__name__} needs a pydantic model as class attribute `Params` "
            "(or, in OpenHands' form, a create() of its own returning tools)"
        )
    return _register(name, cls)


def _factory_class(name: str, factory: Any) -> type[ToolDefinition[Any]]:
    """What ``register_tool(name, factory)`` registers: the class, or one calling the function."""
    if not name:
        raise InvalidValueError("register_tool(name, factory) needs a non-empty name")
    if isinstance(factory, type) and issubclass(factory, ToolDefinition):
        return factory
    if not callable(factory):
        raise InvalidTypeError(
            f"register_tool({name!r}, factory) takes a ToolDefinition subclass or a function "
            f"returning tools, got {factory!r}"
        )
    made: type[ToolDefinition[Any]] = type(
        "_FactoryTool",
        (_FactoryTool,),
        {
            "name": name,
            "factory": staticmethod(factory),
            "__module__": getattr(factory, "__module__", __name__),
            "__qualname__": getattr(factory, "__qualname__", repr(factory)),
        },
    )
    return made


def _register(name: str, cls: type[ToolDefinition[Any]]) -> Any:
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
