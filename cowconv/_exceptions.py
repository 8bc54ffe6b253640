"""The exceptions cowconv raises.

Every error cowconv raises derives from :class:`CowconvError`, so one
``except`` catches them all. Each also keeps the built-in base a Python user
expects (``ValueError`` for a bad value, ``TypeError`` for a wrong type,
``KeyError`` for a missing key, ...), so ``except ValueError`` works as well::

    CowconvError
    ├── ConversationNotFoundError (also KeyError)
    ├── EventNotFoundError (also ValueError and KeyError)
    ├── ConversationConflictError
    │   ├── ConversationExistsError (also ValueError)
    │   ├── ConversationRunningError (also RuntimeError)
    │   └── InactiveServiceError (also ValueError): the agent server's service is closed
    ├── EventIndexError (also IndexError)
    ├── FrozenInstanceError (also AttributeError)
    ├── InvalidTypeError (also TypeError)
    ├── InvalidValueError (also ValueError)
    │   ├── MessageRoleError (also AssertionError): send_message() of a non-user message
    │   └── SkillValidationError: a skill file or definition that cannot be loaded
    ├── LLMError
    ├── LLMNotFoundError (also KeyError): no LLM under a usage id in an LLMRegistry
    ├── MCPError: an MCP server cannot be reached or fails a call
    │   └── MCPTimeoutError (timeout): it did not answer in time
    ├── StoreError
    │   ├── CorruptStoreError
    │   ├── FileMissingError (also FileNotFoundError): no file at a file store's path
    │   ├── SchemaVersionError
    │   └── StoreLockedError
    ├── ConversationRunError (also RuntimeError): a run ended in error or stuck, or a remote
    │   run could not be followed to its end
    ├── RemoteError (status_code, message; 0: the server could not be reached)
    │   └── WebSocketConnectionError (also ConnectionError): no events socket in time
    ├── ServiceError (also RuntimeError)
    ├── StartError: the agent server cannot start (cowconv serve)
    ├── ToolArgumentError (also ValueError): a tool call's arguments do not fit the tool
    │   └── ToolError: a tool refused its call (OpenHands' file editor classes and texts)
    │       ├── EditorToolParameterInvalidError (parameter, value)
    │       ├── EditorToolParameterMissingError (command, parameter)
    │       └── FileValidationError (path, reason): a file too large, binary, not regular
    ├── UnsafeExposureError (also ValueError): a server open to other machines, no key
    ├── WorkspaceMissingError (also FileNotFoundError)
    ├── BranchError (index, conversation_id): one branch of a suite could not run
    │   ├── BranchCancelledError: the suite was cancelled (Ctrl-C) before the branch ended
    │   ├── BranchLostError: its worker died while running it (it was not run again)
    │   ├── BranchRunError: its run ended in error (LLM call, tool); with raise_on_error
    │   ├── BranchTimeoutError: it ran past its time limit (or the suite's)
    │   └── BranchWorkspaceError: its workspace is missing on its worker (no LLM call made)
    ├── BranchesError (also ExceptionGroup): the branch runs that raised, and every fork
    └── SuiteError: a recorded branch suite (suite_id=) cannot be started or resumed as asked
        ├── SuiteExistsError (also ValueError): the suite id is taken
        └── SuiteNotFoundError (also KeyError): the store records no such suite

An error the agent server answers is raised by the client as a
:class:`RemoteError` that is also the error the server raised (a remote
``EventNotFoundError`` is caught by ``except EventNotFoundError`` too), so
code handles every backend alike.

>>> issubclass(ConversationNotFoundError, KeyError)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cowconv.conversation import Conversation

__all__ = [
    "BranchCancelledError",
    "BranchError",
    "BranchLostError",
    "BranchRunError",
    "BranchTimeoutError",
    "BranchWorkspaceError",
    "BranchesError",
    "ConversationConflictError",
    "ConversationExistsError",
    "ConversationNotFoundError",
    "ConversationRunError",
    "ConversationRunningError",
    "CorruptStoreError",
    "CowconvError",
    "EditorToolParameterInvalidError",
    "EditorToolParameterMissingError",
    "EventIndexError",
    "EventNotFoundError",
    "FileMissingError",
    "FileValidationError",
    "FrozenInstanceError",
    "InactiveServiceError",
    "InvalidTypeError",
    "InvalidValueError",
    "LLMError",
    "LLMNotFoundError",
    "MCPError",
    "MCPTimeoutError",
    "MessageRoleError",
    "RemoteError",
    "SchemaVersionError",
    "ServiceError",
    "SkillValidationError",
    "StartError",
    "StoreError",
    "StoreLockedError",
    "SuiteError",
    "SuiteExistsError",
    "SuiteNotFoundError",
    "ToolArgumentError",
    "ToolError",
    "UnsafeExposureError",
    "WebSocketConnectionError",
    "WorkspaceMissingError",
]


class CowconvError(Exception):
    """Base class of every cowconv error.

    >>> from cowconv import SQLiteStore
    >>> try:
    ...     SQLiteStore(":memory:").load("nope")
    ... except CowconvError as error:
    ...     print(type(error).__name__)
    ConversationNotFoundError
    """


class ConversationNotFoundError(CowconvError, KeyError):
    """No conversation has the given id.

    >>> from cowconv import SQLiteStore
    >>> try:
    ...     SQLiteStore(":memory:").info("ci-42")
    ... except ConversationNotFoundError as error:
    ...     print(error.conversation_id, "|", error)
    ci-42 | no conversation with id 'ci-42'
    """

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"no conversation with id {conversation_id!r}")
        self.conversation_id = conversation_id

    def __str__(self) -> str:
        return str(self.args[0])


class EventNotFoundError(CowconvError, ValueError, KeyError):
    """No branch of the conversation has the event (``navigate_to``, ``fork(from_event_id=)``).

    A ``ValueError`` as OpenHands' SDK raises, and a ``KeyError`` as a lookup.

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> try:
    ...     conversation.navigate_to("nope")
    ... except ValueError as error:
    ...     print(error)
    unknown event_id 'nope': no branch of conversation ... has it
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConversationConflictError(CowconvError):
    """The request clashes with the conversation's current state (id taken, already running).

    The agent server answers it with 409.

    >>> issubclass(ConversationExistsError, ConversationConflictError)
    True
    """


class ConversationExistsError(ConversationConflictError, ValueError):
    """A new conversation or fork asked for an id its store already holds.

    >>> from cowconv import LLM, Agent, Conversation, SQLiteStore
    >>> store = SQLiteStore(":memory:")
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".",
    ...                       store=store, conversation_id="c1")
    >>> try:
    ...     source.fork(conversation_id=source.fork().id)
    ... except ConversationExistsError as error:
    ...     print(isinstance(error, ValueError), "already exists" in str(error))
    True True
    """

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"a conversation with id {conversation_id!r} already exists")
        self.conversation_id = conversation_id


class ConversationRunningError(ConversationConflictError, RuntimeError):
    """The conversation is running, and this needs it idle (a second ``run()``, ``navigate_to``).

    >>> issubclass(ConversationRunningError, RuntimeError)
    True
    """


class InactiveServiceError(ConversationConflictError, ValueError):
    """The agent server's conversation service is closed (OpenHands' ``"inactive_service"``).

    A ``ValueError`` as OpenHands' server raises; the server answers it with 409.

    >>> str(InactiveServiceError())
    'inactive_service: the conversation service is closed'
    """

    def __init__(self, message: str = "the conversation service is closed") -> None:
        super().__init__(f"inactive_service: {message}")


class EventIndexError(CowconvError, IndexError):
    """A position past the end of a history.

    >>> from cowconv import EventLog
    >>> try:
    ...     EventLog()[0]
    ... except IndexError as error:
    ...     print(type(error).__name__)
    EventIndexError
    """


class FrozenInstanceError(CowconvError, AttributeError):
    """An attribute of an immutable snapshot was set (as attrs' frozen classes raise).

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> try:
    ...     conversation.state.tags = {}
    ... except AttributeError as error:
    ...     print(type(error).__name__)
    FrozenInstanceError
    """


class InvalidTypeError(CowconvError, TypeError):
    """An argument of a type cowconv does not take.

    >>> from cowconv import EventLog
    >>> try:
    ...     EventLog(["not an event"])
    ... except TypeError as error:
    ...     print(type(error).__name__)
    InvalidTypeError
    """


class ServiceError(CowconvError, RuntimeError):
    """A service cowconv starts or relies on is not there or went away.

    The in-process agent server or stub LLM server did not start (or is used
    outside its ``with`` block), Ray was not initialised, a worker died.

    >>> from cowconv.testing import StubLLMServer
    >>> try:
    ...     StubLLMServer().base_url
    ... except RuntimeError as error:
    ...     print(type(error).__name__)
    ServiceError
    """


class InvalidValueError(CowconvError, ValueError):
    """A value or argument cowconv refuses, before anything is recorded.

    Out-of-range and malformed arguments, and values that could not be
    stored and loaded back unchanged: NaN and infinity, JSON nested deeper
    than :data:`cowconv.MAX_DEPTH`, and
    text that is not valid Unicode (a lone surrogate). Inside a pydantic
    model it surfaces as that model's ``ValidationError`` (also a ``ValueError``).

    >>> from cowconv import freeze
    >>> try:
    ...     freeze({"ratio": float("nan")})
    ... except ValueError as error:
    ...     print(type(error).__name__)
    InvalidValueError
    """


class MessageRoleError(InvalidValueError, AssertionError):
    """``send_message()`` was given a message of another role than ``user``.

    Also an ``AssertionError``, the error OpenHands' SDK raises there (its
    message starts the same way), so code written for OpenHands catches it.

    >>> error = MessageRoleError("assistant")
    >>> isinstance(error, ValueError), isinstance(error, AssertionError), error.role
    (True, True, 'assistant')
    >>> str(error)
    "Only user messages are allowed to be sent to the agent: got a message of role 'assistant'"
    """

    def __init__(self, role: str) -> None:
        super().__init__(
            f"Only user messages are allowed to be sent to the agent: got a message of role "
            f"{role!r}"
        )
        self.role = role


class SkillValidationError(InvalidValueError):
    """A skill file or definition cowconv cannot load (OpenHands' ``SkillValidationError``).

    >>> issubclass(SkillValidationError, ValueError)
    True
    """


class LLMError(CowconvError):
    """An LLM call failed (after retries, where retrying made sense).

    A run records it as an :class:`~cowconv.AgentErrorEvent` instead of
    raising; ``LLM.completion`` raises it.

    >>> issubclass(LLMError, CowconvError)
    True
    """


class LLMNotFoundError(CowconvError, KeyError):
    """No LLM is registered under the usage id asked for (``LLMRegistry.get``).

    >>> issubclass(LLMNotFoundError, KeyError)
    True
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MCPError(CowconvError):
    """An MCP server cannot be reached, or a call to it failed (OpenHands' ``MCPError``).

    A run never raises it: the server's tools are left out, or the call's
    observation is an error the model sees.

    >>> issubclass(MCPError, CowconvError)
    True
    """


class MCPTimeoutError(MCPError):
    """An MCP server did not answer within ``timeout`` seconds.

    >>> MCPTimeoutError("no answer", timeout=30.0).timeout
    30.0
    """

    def __init__(self, message: str, timeout: float, config: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.timeout = timeout
        self.config = config


class StoreError(CowconvError):
    """The persistent store cannot do what was asked.

    >>> from cowconv import SQLiteStore
    >>> store = SQLiteStore(":memory:")
    >>> store.close()
    >>> try:
    ...     store.list()
    ... except StoreError as error:
    ...     print(type(error).__name__)
    StoreError
    """


class CorruptStoreError(StoreError):
    """The store file is damaged or is not a cowconv store. It was left untouched.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.db"
    >>> _ = path.write_text("not a database")
    >>> from cowconv import SQLiteStore
    >>> try:
    ...     SQLiteStore(path)
    ... except CorruptStoreError:
    ...     print(path.read_text())
    not a database
    """


class SchemaVersionError(StoreError):
    """The store was written by a schema version this cowconv cannot read.

    >>> issubclass(SchemaVersionError, StoreError)
    True
    """


class FileMissingError(StoreError, FileNotFoundError):
    """A file store (:mod:`cowconv.io`) has no file at the path read.

    >>> issubclass(FileMissingError, FileNotFoundError)
    True
    """


class StoreLockedError(StoreError):
    """Another process held the store's write lock for longer than the wait allowed.

    ``SQLiteStore(path, lock_timeout=...)`` sets the wait.

    >>> issubclass(StoreLockedError, StoreError)
    True
    """


class RemoteError(CowconvError):
    """The agent server answered with an error status.

    >>> error = RemoteError(404, "no conversation with id 'x'")
    >>> error.status_code, str(error)
    (404, "agent server answered 404: no conversation with id 'x'")
    """

    def __init__(self, status_code: int, message: str) -> None:
        # Not super(): the client raises subclasses that are also the server's error class
        # (EventNotFoundError, ...), whose constructors take other arguments.
        Exception.__init__(self, f"agent server answered {status_code}: {message}")
        self.status_code = status_code
        self.message = message


class ConversationRunError(CowconvError, RuntimeError):
    """A ``run()`` that did not end well (OpenHands' SDK's name), on every backend.

    Raised when the run ended in ``error`` or ``stuck`` (the history records
    why, and ``run()`` again continues from it), and when a remote run
    could not be followed to its end: it timed out (it may still be running
    on the server), the server lost the conversation, or it answered the
    run's status out of the protocol's shape.
    ``conversation_id`` names the conversation; ``conversation_error`` is the
    :class:`~cowconv.ConversationErrorEvent` the run recorded, if any;
    ``status_code`` is the server's answer behind it (0: none).

    >>> error = ConversationRunError("c1", TimeoutError("run timed out after 5 seconds"))
    >>> error.conversation_id, isinstance(error, RuntimeError), str(error)
    ('c1', True, 'conversation c1: run timed out after 5 seconds')
    """

    def __init__(
        self, conversation_id: object, cause: BaseException, conversation_error: Any = None
    ) -> None:
        Exception.__init__(self, f"conversation {conversation_id}: {cause}")
        self.status_code = getattr(cause, "status_code", 0)
        self.message = str(cause)
        self.conversation_id = conversation_id
        self.conversation_error = conversation_error


class WebSocketConnectionError(RemoteError, ConnectionError):
    """The agent server's events socket did not subscribe in time (OpenHands' SDK's name).

    >>> str(WebSocketConnectionError("c1", 30.0))
    'conversation c1: the events WebSocket was not ready within 30.0 seconds'
    """

    def __init__(self, conversation_id: object, timeout: float) -> None:
        message = f"the events WebSocket was not ready within {timeout} seconds"
        Exception.__init__(self, f"conversation {conversation_id}: {message}")
        self.status_code = 0
        self.message = message
        self.conversation_id = conversation_id
        self.timeout = timeout


# The errors an agent server names in its answers; a client raises each as a class that is
# both a RemoteError and that error (made once per class).
_MIRRORED: dict[str, type[CowconvError]] = {
    error.__name__: error
    for error in (
        ConversationNotFoundError,
        EventNotFoundError,
        ConversationConflictError,
        ConversationExistsError,
        InvalidValueError,
    )
}
_REMOTE_CLASSES: dict[type[CowconvError], type[RemoteError]] = {}


def remote_error_class(name: str | type[CowconvError] | None) -> type[RemoteError]:
    """The class a client raises for a server's error named ``name`` (:class:`RemoteError`
    if it names none of the mirrored ones).

    >>> error = remote_error_class("EventNotFoundError")(404, "no event 'e1'")
    >>> isinstance(error, EventNotFoundError), isinstance(error, RemoteError), error.status_code
    (True, True, 404)
    """
    local = _MIRRORED.get(name) if isinstance(name, str) else name
    if local is None:
        return RemoteError
    known = _REMOTE_CLASSES.get(local)
    if known is not None:
        return known
    made = type(
        local.__name__,
        (RemoteError, local),
        {"__module__": __name__, "__doc__": f"A {local.__name__} the agent server answered."},
    )
    return _REMOTE_CLASSES.setdefault(local, made)


_REASON_SHOWN = 500  # characters of a branch error's reason its message quotes


class BranchError(CowconvError):
    """One branch of a suite could not be shipped to a worker or run there.

    Its fork records the reason as an :class:`~cowconv.AgentErrorEvent` and
    ends with status ``error``; the other branches go on.

    The message is one line and quotes at most 500 characters of ``reason``
    (an exception's text can hold a whole repr); ``reason`` keeps all of it.

    >>> error = BranchError(3, "c-42", "its worker died")
    >>> error.index, error.conversation_id, str(error)
    (3, 'c-42', "branch 3 (conversation 'c-42') failed: its worker died")
    >>> len(str(BranchError(0, "c", "x" * 5000))) < 600
    True
    """

    def __init__(self, index: int, conversation_id: str, reason: str) -> None:
        shown = " ".join(str(reason).split())
        if len(shown) > _REASON_SHOWN:
            more = len(shown) - _REASON_SHOWN
            shown = f"{shown[:_REASON_SHOWN]}... ({more:,} more characters in .reason)"
        super().__init__(f"branch {index} (conversation {conversation_id!r}) failed: {shown}")
        self.index = index
        self.conversation_id = conversation_id
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.index, self.conversation_id, self.reason))


class BranchTimeoutError(BranchError):
    """A branch ran past its time limit (``branch_timeout=``) or the suite's (``timeout=``).

    Its worker slot was freed for the rest of the suite; its fork ends
    ``error`` with an :class:`~cowconv.AgentErrorEvent` saying so.

    >>> str(BranchTimeoutError(1, "c-7", "it ran past its time limit of 30 s"))
    "branch 1 (conversation 'c-7') failed: it ran past its time limit of 30 s"
    """


class BranchCancelledError(BranchError):
    """The suite was cancelled (Ctrl-C, or the iterator closed) before this branch ended.

    >>> issubclass(BranchCancelledError, BranchError)
    True
    """


class BranchLostError(BranchError):
    """The worker running this branch died; it was not run again (that would repeat its
    LLM calls).

    >>> issubclass(BranchLostError, BranchError)
    True
    """


class BranchRunError(BranchError):
    """A branch's run ended in error: an LLM call failed (after its retries), a tool crashed,
    credentials were missing. Raised only with ``raise_on_error=True``: otherwise the fork
    records it (status ``error``, an :class:`~cowconv.AgentErrorEvent`).

    ``tool_name`` names the tool that crashed, if it was one.

    >>> error = BranchRunError(0, "c-1", "LLM call failed: HTTP 503", tool_name=None)
    >>> error.reason, error.tool_name
    ('LLM call failed: HTTP 503', None)
    """

    def __init__(
        self, index: int, conversation_id: str, reason: str, tool_name: str | None = None
    ) -> None:
        super().__init__(index, conversation_id, reason)
        self.tool_name = tool_name

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.index, self.conversation_id, self.reason, self.tool_name))


class BranchWorkspaceError(BranchError):
    """A branch's workspace directory does not exist where it runs; no LLM call was made.

    >>> issubclass(BranchWorkspaceError, BranchError)
    True
    """


class BranchesError(ExceptionGroup[Exception], CowconvError):
    """Branch runs that raised, together, after every run ended; ``forks`` holds all forks.

    >>> group = BranchesError("1 of 2 branch runs raised", [OSError("disk full")], forks=[])
    >>> [str(e) for e in group.exceptions], group.forks
    (['disk full'], [])
    """

    forks: Sequence[Conversation]

    def __new__(
        cls, message: str, errors: Sequence[Exception], forks: Sequence[Conversation] = ()
    ) -> BranchesError:
        group = super().__new__(cls, message, errors)
        group.forks = forks
        return group

    def __init__(
        self, message: str, errors: Sequence[Exception], forks: Sequence[Conversation] = ()
    ) -> None:
        super().__init__(message, errors)

    def derive(self, errors: Sequence[Exception]) -> BranchesError:  # type: ignore[override]
        return BranchesError(self.message, errors, self.forks)


class SuiteError(CowconvError):
    """A recorded branch suite (``run_branches(..., suite_id=...)``) cannot be started or
    resumed as asked: its store cannot be shared, or it differs from what was recorded.

    >>> issubclass(SuiteExistsError, SuiteError)
    True
    """


class SuiteExistsError(SuiteError, ValueError):
    """The store already records a suite under this id (resume it, or choose another id).

    >>> issubclass(SuiteExistsError, ValueError)
    True
    """


class SuiteNotFoundError(SuiteError, KeyError):
    """The store records no suite under this id.

    >>> str(SuiteNotFoundError("no suite 'nightly' in the store"))
    "no suite 'nightly' in the store"
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ToolArgumentError(CowconvError, ValueError):
    """A tool call's arguments are not valid JSON or do not fit the tool's ``Params``.

    >>> from cowconv import Workspace, resolve_tool
    >>> terminal = resolve_tool("terminal").create(Workspace(working_dir="."))
    >>> terminal.parse_arguments('{"comand": "ls"}')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.ToolArgumentError: invalid arguments for 'terminal': command: ...

    The runtime shows this message to the model as the tool's result.
    """


class ToolError(ToolArgumentError):
    """A tool refused its call; ``message`` is the text the model is shown (OpenHands' class).

    The file editor raises it (and its subclasses) for what it refuses;
    its executor answers the message as an error observation.

    >>> ToolError("No edit history found for /w/a.py.").message
    'No edit history found for /w/a.py.'
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EditorToolParameterMissingError(ToolError):
    """A command was called without a parameter it needs (OpenHands' class and text).

    >>> str(EditorToolParameterMissingError("create", "file_text"))
    'Parameter `file_text` is required for command: create.'
    """

    def __init__(self, command: str, parameter: str) -> None:
        super().__init__(f"Parameter `{parameter}` is required for command: {command}.")
        self.command = command
        self.parameter = parameter


class EditorToolParameterInvalidError(ToolError):
    """A parameter's value cannot be used, and why (OpenHands' class and text).

    >>> str(EditorToolParameterInvalidError("insert_line", "9", "Out of range."))
    'Invalid `insert_line` parameter: 9. Out of range.'
    """

    def __init__(self, parameter: str, value: str, hint: str | None = None) -> None:
        text = f"Invalid `{parameter}` parameter: {value}."
        super().__init__(f"{text} {hint}" if hint else text)
        self.parameter = parameter
        self.value = value


class FileValidationError(ToolError):
    """A file the tool cannot read or edit: too large, binary, not a regular file.

    >>> str(FileValidationError("/w/blob", "File appears to be binary."))
    'File validation failed for /w/blob: File appears to be binary.'
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"File validation failed for {path}: {reason}")
        self.path = path
        self.reason = reason


class StartError(CowconvError):
    """The server cannot start; the message is one line for the operator.

    >>> str(StartError("port: must be at most 65535"))
    'port: must be at most 65535'
    """


class UnsafeExposureError(CowconvError, ValueError):
    """The server would accept requests from other machines without a session key.

    >>> from cowconv.agent_server.security import check_exposure
    >>> check_exposure("0.0.0.0", session_api_key=None)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.UnsafeExposureError: ...
    """


class WorkspaceMissingError(CowconvError, FileNotFoundError):
    """The workspace directory a tool runs in is gone (it existed when the conversation began).

    >>> issubclass(WorkspaceMissingError, OSError)
    True
    """
