"""Events: the immutable facts a conversation is made of.

Every event is a frozen pydantic model whose nested values are frozen too
(tuples, frozen models, ``PMap``), so an event can be shared by any number of
conversations and forks without ever being copied.

>>> event = MessageEvent(source="user", role="user", content="Hello")
>>> event.text
'Hello'
>>> Event.model_validate_json(event.model_dump_json()) == event
True
>>> event.content[0].text = "changed"
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for TextContent
...

New kinds subclass :class:`Event` with a ``kind: Literal["..."]`` field; they
are registered on definition and ``Event.model_validate`` dispatches on
``kind``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeAlias, Union

from pydantic import (
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from cowconv._exceptions import InvalidTypeError
from cowconv.core.frozen import CheckedModel, FrozenJSON, FrozenJSONMap

__all__ = [
    "ActionEvent",
    "AgentErrorEvent",
    "AnyEvent",
    "CondensationEvent",
    "Content",
    "Event",
    "EventSource",
    "ImageContent",
    "MessageEvent",
    "ObservationEvent",
    "PauseEvent",
    "Role",
    "SystemPromptEvent",
    "TextContent",
    "new_event_id",
    "utc_now",
]

EventSource: TypeAlias = Literal["user", "agent", "environment"]
Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
_SOURCE_OF_ROLE: dict[str, EventSource] = {"user": "user", "tool": "environment"}


def new_event_id() -> str:
    """A new event id: a random UUID's text.

    >>> len(new_event_id()), new_event_id() != new_event_id()
    (36, True)
    """
    return str(uuid.uuid4())


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC (every cowconv timestamp).

    >>> utc_now().tzinfo
    datetime.timezone.utc
    """
    return datetime.now(UTC)


class _Frozen(CheckedModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class TextContent(_Frozen):
    """A text part of a message.

    >>> TextContent(text="hi").text
    'hi'
    """

    type: Literal["text"] = "text"
    text: str


class ImageContent(_Frozen):
    """Image parts of a message, given by URL (``data:`` URLs included).

    >>> ImageContent(image_urls=["https://example.com/a.png"]).image_urls
    ('https://example.com/a.png',)
    """

    type: Literal["image"] = "image"
    image_urls: tuple[str, ...]


Content: TypeAlias = Annotated[TextContent | ImageContent, Field(discriminator="type")]

_KINDS: dict[str, type[Event]] = {}
_adapter: TypeAdapter[Any] | None = None


class Event(_Frozen):
    """Base class of every event: ``id``, ``timestamp``, ``source`` and ``kind``.

    ``Event.model_validate`` and ``Event.model_validate_json`` return an
    instance of the subclass named by ``kind``:

    >>> data = PauseEvent().model_dump(mode="json")
    >>> type(Event.model_validate(data)).__name__
    'PauseEvent'
    """

    kind: str
    id: str = Field(default_factory=new_event_id)
    timestamp: datetime = Field(default_factory=utc_now)
    source: EventSource

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        field = cls.model_fields.get("kind")
        if field is None or not isinstance(field.default, str):
            raise InvalidTypeError(f"{cls.__name__} must declare kind: Literal['...'] = '...'")
        registered = _KINDS.get(field.default)
        if registered is not None and registered.__qualname__ != cls.__qualname__:
            raise InvalidTypeError(
                f"event kind {field.default!r} is already used by {registered.__name__}"
            )
        _KINDS[field.default] = cls
        global _adapter
        _adapter = None

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: Any = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Any:
        """Validate ``obj``; on the base class, as the subclass its ``kind`` names."""
        if cls is Event:
            return _event_adapter().validate_python(
                obj, strict=strict, from_attributes=from_attributes, context=context
            )
        return super().model_validate(
            obj,
            strict=strict,
            extra=extra,
            from_attributes=from_attributes,
            context=context,
            by_alias=by_alias,
            by_name=by_name,
        )

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        extra: Any = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Any:
        """Validate JSON; on the base class, as the subclass its ``kind`` names."""
        if cls is Event:
            return _event_adapter().validate_json(json_data, strict=strict, context=context)
        return super().model_validate_json(
            json_data,
            strict=strict,
            extra=extra,
            context=context,
            by_alias=by_alias,
            by_name=by_name,
        )


def _event_adapter() -> TypeAdapter[Any]:
    global _adapter
    if _adapter is None:
        kinds = tuple(_KINDS.values())
        union: Any = Annotated[Union[kinds], Field(discriminator="kind")]  # noqa: UP007
        _adapter = TypeAdapter(union)
    return _adapter


def _validate_any_event(value: Any) -> Event:
    if isinstance(value, Event):
        return value
    event: Event = Event.model_validate(value)
    return event


AnyEvent: TypeAlias = Annotated[
    Event,
    PlainValidator(_validate_any_event),
    PlainSerializer(lambda event, info: event.model_dump(mode=info.mode)),
    WithJsonSchema({"type": "object", "required": ["kind", "id", "timestamp", "source"]}),
]
"""A field type holding an event of any registered kind (polymorphic)."""


def _text_of(content: tuple[TextContent | ImageContent, ...]) -> str:
    return "".join(part.text for part in content if isinstance(part, TextContent))


class MessageEvent(Event):
    """An LLM message: a role and its content parts.

    A plain string as ``content`` becomes one :class:`TextContent`. Without
    ``source``, the role decides it: ``"user"`` for a user message,
    ``"environment"`` for a tool message, else ``"agent"``.

    >>> MessageEvent(role="assistant", content="Done.").text
    'Done.'
    >>> MessageEvent(role="user", content="Hi.").source
    'user'
    """

    kind: Literal["message"] = "message"
    source: EventSource = "agent"
    role: Role
    content: tuple[Content, ...]

    @model_validator(mode="before")
    @classmethod
    def _source_from_role(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("source") is None and "role" in data:
            return {**data, "source": _SOURCE_OF_ROLE.get(data["role"], "agent")}
        return data

    @field_validator("content", mode="before")
    @classmethod
    def _text_shorthand(cls, value: Any) -> Any:
        return (TextContent(text=value),) if isinstance(value, str) else value

    @property
    def text(self) -> str:
        """The text parts joined."""
        return _text_of(self.content)


class SystemPromptEvent(Event):
    """The system prompt and the tool specs the agent offers the model.

    >>> SystemPromptEvent(system_prompt="Be brief.").source
    'agent'
    """

    kind: Literal["system_prompt"] = "system_prompt"
    source: EventSource = "agent"
    system_prompt: str
    tools: tuple[FrozenJSONMap, ...] = ()


class ActionEvent(Event):
    """A tool call the agent made.

    Tool calls answered in one LLM response share ``llm_response_id``; the text
    the model wrote beside them is ``thought``.

    >>> action = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={"command": "ls"})
    >>> action.arguments["command"]
    'ls'
    """

    kind: Literal["action"] = "action"
    source: EventSource = "agent"
    tool_name: str
    tool_call_id: str
    arguments: FrozenJSONMap
    thought: str = ""
    llm_response_id: str | None = None


class ObservationEvent(Event):
    """The result of a tool call.

    >>> ObservationEvent(tool_name="terminal", tool_call_id="c1", output="a.py", exit_code=0).source
    'environment'
    """

    kind: Literal["observation"] = "observation"
    source: EventSource = "environment"
    tool_name: str
    tool_call_id: str
    output: str
    exit_code: int | None = None
    extra: FrozenJSON = None


class AgentErrorEvent(Event):
    """An error that stopped an agent step (failed LLM call, crashed tool).

    With ``tool_call_id`` it answers that tool call.

    >>> AgentErrorEvent(error="rate limited").source
    'agent'
    """

    kind: Literal["agent_error"] = "agent_error"
    source: EventSource = "agent"
    error: str
    tool_call_id: str | None = None
    tool_name: str | None = None


class PauseEvent(Event):
    """A run was paused.

    >>> PauseEvent().kind
    'pause'
    """

    kind: Literal["pause"] = "pause"
    source: EventSource = "user"


class CondensationEvent(Event):
    """Older events replaced, in what the model sees, by a summary (nothing is deleted).

    The view sent to the LLM after it is: the first ``summary_offset``
    events of the history, then ``summary``, then the events after the last
    of ``forgotten_event_ids`` (see :class:`~cowconv.LLMSummarizingCondenser`).
    The forgotten events stay in the history, and forks share the
    condensation like any other event.

    >>> CondensationEvent(forgotten_event_ids=["e1", "e2"], summary="Listed files.",
    ...                   summary_offset=1).forgotten_event_ids
    ('e1', 'e2')
    """

    kind: Literal["condensation"] = "condensation"
    source: EventSource = "environment"
    forgotten_event_ids: tuple[str, ...] = ()
    summary: str | None = None
    summary_offset: int | None = Field(default=None, ge=0)
    llm_response_id: str | None = None
