"""The JSON bodies of the agent server's REST API.

Requests reuse the library's own models (:class:`~cowconv.Agent`,
:class:`~cowconv.Workspace`); responses are :class:`~cowconv.ConversationInfo`,
events, and the pages below.

>>> ForkRequest.model_validate({"title": "Debug"}).reset_metrics
True
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    RootModel,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from cowconv._exceptions import InvalidValueError
from cowconv.core.agent import Agent
from cowconv.core.events import AnyEvent, Event
from cowconv.core.frozen import CheckedModel
from cowconv.core.kinds import kind_names
from cowconv.core.state import ConversationInfo, ExecutionStatus
from cowconv.core.workspace import Workspace

__all__ = [
    "ID_WHITESPACE",
    "ActivateSkillRequest",
    "AppendEventRequest",
    "BranchInfo",
    "BranchList",
    "ConversationPage",
    "CreateConversationRequest",
    "ErrorResponse",
    "EventPage",
    "ForkRequest",
    "HealthResponse",
    "NavigateRequest",
    "SendMessageRequest",
    "StateResponse",
    "StreamStatus",
]


def _plain_id(value: str) -> str:
    # The schema's pattern is matched by pydantic's regex engine, whose idea of whitespace
    # is not Python's ('\x1f', '\xa0'): check again as the library will.
    if any(character.isspace() for character in value) or "/" in value:
        raise InvalidValueError("an id holds no whitespace and no '/'")
    return value


# Every character Python's str.isspace() calls whitespace, spelled out: regex engines
# disagree about \s (pydantic's and JavaScript's leave out \x1c-\x1f and \x85).
ID_WHITESPACE = (
    "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
_CONTROL = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029"
ConversationId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=f"^[^/{ID_WHITESPACE}]+$"),
    AfterValidator(_plain_id),
]
_ID = Field(default=None)
# What core/framing.check_framing_text lets through: no control characters or line
# separators, no whitespace at either end.
_EVENT_ID_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "pattern": f"^[^{ID_WHITESPACE}{_CONTROL}](?:[^{_CONTROL}]*[^{ID_WHITESPACE}{_CONTROL}])?$",
}


_SERVER_WORKSPACE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "working_dir": {"type": "string", "pattern": f"[^{ID_WHITESPACE}]"},
        "host": {"type": "null"},
        "api_key": {"type": "null"},
    },
    "required": ["working_dir"],
    "additionalProperties": False,
}


class _Request(CheckedModel):
    # Built at once (CheckedModel defers for import time; the server is not on that path):
    # FastAPI wraps a request model in Annotated[..., FieldInfo(alias=...)], and building a
    # deferred model inside that wrapper warns that the alias has no effect.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=False)


class CreateConversationRequest(_Request):
    """Create a conversation: the agent (LLM settings and credentials), its workspace.

    The API key in ``agent.llm.api_key`` stays on the server; responses never
    show it. ``workspace.working_dir`` is a directory on the server's machine.

    >>> body = {"agent": {"llm": {"model": "openai/gpt-4o", "api_key": "sk-1"}},
    ...         "workspace": {"working_dir": "/tmp"}, "tags": {"team": "a"}}
    >>> CreateConversationRequest.model_validate(body).agent.llm.api_key
    SecretStr('**********')
    """

    agent: Agent
    # The schema says what the server takes: a working_dir on the server, nothing else.
    workspace: Annotated[Workspace, WithJsonSchema(_SERVER_WORKSPACE_SCHEMA)]
    id: ConversationId | None = _ID
    tags: dict[str, str] | None = None
    max_iteration_per_run: int | None = Field(default=None, gt=0)

    @field_validator("workspace")
    @classmethod
    def _local_to_the_server(cls, workspace: Workspace) -> Workspace:
        if workspace.host is not None or workspace.api_key is not None:
            raise InvalidValueError(
                "the workspace of a server-side conversation is a working_dir on the "
                "server; leave out host and api_key"
            )
        if not workspace.working_dir.strip():
            raise InvalidValueError("workspace.working_dir must not be empty")
        return workspace


class ForkRequest(_Request):
    """Fork a conversation: every field is optional.

    ``id`` names the fork (a new UUID when left out), ``title`` becomes
    ``tags["title"]``, ``reset_metrics`` starts the fork's stats at zero and
    ``from_event_id`` forks the history up to and including that event.

    >>> ForkRequest().model_dump()
    {'id': None, 'title': None, 'tags': None, 'reset_metrics': True, 'from_event_id': None}
    """

    id: ConversationId | None = _ID
    title: str | None = None
    tags: dict[str, str] | None = None
    reset_metrics: bool = True
    from_event_id: str | None = None


class NavigateRequest(_Request):
    """Move a conversation's active branch to end at ``event_id`` (``null``: empty).

    The seed SDK's body for ``POST /api/conversations/{id}/navigate``.

    >>> NavigateRequest(event_id="e1").event_id
    'e1'
    """

    event_id: str | None = None


class BranchInfo(BaseModel):
    """One branch of a conversation's tree: its leaf, its length, whether it is the active one.

    >>> BranchInfo(leaf_event_id="e3", event_count=3, active=True).event_count
    3
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    leaf_event_id: str | None
    event_count: int = Field(ge=0)
    active: bool


class BranchList(BaseModel):
    """Every branch of a conversation (``state.branches``), the active one last.

    >>> BranchList(items=[]).items
    []
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[BranchInfo]


class SendMessageRequest(_Request):
    """A user message to add to a conversation.

    >>> SendMessageRequest(text="Run `ls`.").text
    'Run `ls`.'
    """

    text: str


class AppendEventRequest(RootModel[AnyEvent]):
    """An event to append as it is (any event kind; its ``kind`` says which).

    >>> AppendEventRequest.model_validate({"kind": "PauseEvent"}).root.kind
    'PauseEvent'

    Its schema is one of the schemas of the concrete event kinds, each with
    its ``kind`` and the id rule the server applies, so a client (or a
    fuzzer) built from the schema sends what the server takes.
    """

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        choices = []
        for name, kind in sorted(kind_names(Event).items()):
            if inspect.isabstract(kind) or kind is Event:
                continue
            reference = handler(kind.__pydantic_core_schema__)
            schema = handler.resolve_ref_schema(reference)
            properties = schema.setdefault("properties", {})
            properties["kind"] = {"const": name, "type": "string"}
            properties["id"] = {**properties.get("id", {}), **_EVENT_ID_SCHEMA}
            schema["required"] = sorted({*schema.get("required", ()), "kind"})
            choices.append(reference)
        return {"oneOf": choices}

    @field_validator("root")
    @classmethod
    def _has_a_kind(cls, event: Event) -> Event:
        # Without "kind" the body would validate as the bare base class: say which kind.
        if type(event) is Event:
            raise InvalidValueError("an event needs its 'kind' (the name of its class)")
        return event


class ActivateSkillRequest(_Request):
    """A knowledge skill to activate.

    >>> ActivateSkillRequest(name="sql").name
    'sql'
    """

    name: str = Field(min_length=1)


class StateResponse(BaseModel):
    """A conversation's snapshot without its events, and the ids of the events a client lacks.

    ``state`` is the :class:`~cowconv.ConversationState` as JSON (api keys
    redacted, no ``events``); ``event_ids`` are the ids of the events from
    position ``ids_from`` on. A client reads the events themselves page by page.

    >>> StateResponse(state={}, ids_from=0, event_ids=[]).ids_from
    0
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: dict[str, Any]
    ids_from: int = Field(ge=0)
    event_ids: list[str]


class EventPage(BaseModel):
    """A page of a conversation's events, oldest first.

    ``offset`` is the position of the first item in the history, ``total``
    the length of the history when the page was read, and ``next_offset``
    where the next page starts (``None`` on the last page).

    >>> EventPage(items=[], offset=0, total=0, next_offset=None).total
    0
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[AnyEvent]
    offset: int = Field(ge=0)
    total: int = Field(ge=0)
    next_offset: int | None = None


class ConversationPage(BaseModel):
    """A page of conversation summaries, oldest first.

    >>> ConversationPage(items=[], next_offset=None).items
    []
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[ConversationInfo]
    next_offset: int | None = None
    unreadable: list[str] = []
    """Ids of stored conversations that cannot be read (damaged rows), left out of ``items``;
    ``DELETE`` removes them."""


class StreamStatus(BaseModel):
    """The ``status`` message of the event stream.

    ``running`` says whether a run started through the server is still going;
    ``event_count`` is how many events the stream has delivered so far.

    >>> StreamStatus(execution_status="idle", running=False, event_count=0).running
    False
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_status: ExecutionStatus
    running: bool
    event_count: int = Field(ge=0)


class ErrorResponse(BaseModel):
    """The body of every error answer.

    >>> ErrorResponse(detail="no conversation with id 'x'").detail
    "no conversation with id 'x'"
    """

    detail: str | list[dict[str, object]]
    error: str | None = Field(
        default=None, description="the cowconv exception's class name, when one was raised"
    )


class HealthResponse(BaseModel):
    """The answer of ``GET /health``.

    >>> HealthResponse().status
    'ok'
    """

    status: str = "ok"
