"""Events: the immutable facts a conversation is made of, in OpenHands' shapes and JSON.

Every event is a frozen pydantic model whose nested values are frozen too
(tuples, frozen models, ``PMap``), so an event can be shared by any number of
conversations and forks without ever being copied. Its JSON is OpenHands'
JSON: ``kind`` names the class, ``parent_id`` links it into the conversation
tree (left out while it is ``None``), ``timestamp`` is ISO-8601 text.

>>> event = MessageEvent(source="user", llm_message=Message(role="user", content="Hello"))
>>> event.text, event.kind
('Hello', 'MessageEvent')
>>> Event.model_validate_json(event.model_dump_json()) == event
True
>>> MessageEvent(role="user", content="Hello").llm_message == event.llm_message  # shorthand
True
>>> event.llm_message.content[0].text = "changed"
Traceback (most recent call last):
...
cowconv._exceptions.FrozenInstanceError: TextContent is immutable (it may be shared by forks): ...

New kinds subclass :class:`Event` (or another event class); they are
registered under their class name when defined, and ``Event.model_validate``
returns an instance of the class a dump's ``kind`` names:

>>> class NoteEvent(Event):
...     note: str = "remember"
>>> type(Event.model_validate(NoteEvent(source="user").model_dump())).__name__
'NoteEvent'

Events written by cowconv 0.1 (kinds ``"message"``, ``"action"``, ...) load
as the classes that replaced them (:func:`upgrade_legacy_event`).
"""

import uuid
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Final, Literal, NoReturn, Self, TypeAlias

from pydantic import (
    Field,
    PlainSerializer,
    PlainValidator,
    SerializationInfo,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from cowconv._exceptions import ConversationRunError, FrozenInstanceError, InvalidValueError
from cowconv.core.error_classification import ErrorClassification, classify_error
from cowconv.core.framing import check_framing_text
from cowconv.core.frozen import FrozenJSON, FrozenJSONMap, decode_json
from cowconv.core.kinds import Kinded
from cowconv.core.message import (
    Content,
    ImageContent,
    Message,
    MessageToolCall,
    Role,
    TextContent,
    content_to_str,
)
from cowconv.core.schema import Action, Observation
from cowconv.core.security import SecurityRisk

__all__ = [
    "ROOT_PARENT_ID",
    "ActionEvent",
    "AgentErrorEvent",
    "AnyEvent",
    "Condensation",
    "CondensationRequest",
    "Content",
    "ConversationErrorEvent",
    "ConversationStateUpdateEvent",
    "Event",
    "EventID",
    "EventIDSet",
    "EventSource",
    "ImageContent",
    "LLMConvertibleEvent",
    "Message",
    "MessageEvent",
    "MessageToolCall",
    "ObservationEvent",
    "PauseEvent",
    "Role",
    "SourceType",
    "SystemPromptEvent",
    "TextContent",
    "legacy_kind_names",
    "new_event_id",
    "run_failure",
    "timestamp_now",
    "upgrade_legacy_event",
    "utc_now",
]

SourceType: TypeAlias = Literal["agent", "user", "environment", "hook"]
"""Who produced an event (OpenHands' ``SourceType``)."""
EventSource: TypeAlias = SourceType
"""cowconv 0.1's name for :data:`SourceType`."""
EventID: TypeAlias = str

ROOT_PARENT_ID: Final = "__root__"
"""The ``parent_id`` of a root event appended after ``navigate_to(None)``.

No event id may equal it, so it always means "a root", never "the child of
an event whose id is ``__root__``" (OpenHands' reserved sentinel).
"""

_SOURCE_OF_ROLE: dict[str, SourceType] = {"user": "user", "tool": "environment"}
N_CHAR_PREVIEW = 500


def new_event_id() -> str:
    """A new event id: a random UUID's text.

    >>> len(new_event_id()), new_event_id() != new_event_id()
    (36, True)
    """
    return str(uuid.uuid4())


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC.

    >>> utc_now().tzinfo
    datetime.timezone.utc
    """
    return datetime.now(UTC)


def timestamp_now() -> str:
    """The current time as an event timestamp: ISO-8601, UTC, always microseconds.

    A fixed width and one offset make timestamps sort as text in time order.

    >>> stamp = timestamp_now()
    >>> len(stamp), stamp.endswith("Z"), datetime.fromisoformat(stamp).tzinfo
    (27, True, datetime.timezone.utc)
    """
    return utc_now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Event(Kinded):
    """Base class of every event: ``id``, ``timestamp``, ``source``, ``parent_id``.

    ``Event.model_validate`` and ``Event.model_validate_json`` return an
    instance of the subclass named by ``kind``:

    >>> data = PauseEvent().model_dump(mode="json")
    >>> type(Event.model_validate(data)).__name__
    'PauseEvent'
    >>> "parent_id" in data, PauseEvent(parent_id="e1").model_dump()["parent_id"]
    (False, 'e1')
    """

    __kind_family__: ClassVar[bool] = True
    __omitted_when_none__: ClassVar[tuple[str, ...]] = ()
    # Fields left out of the JSON while they hold this value (OpenHands' defaults that older
    # cowconv JSON never carried), and fields a subclass never writes.
    __omitted_when_default__: ClassVar[tuple[tuple[str, object], ...]] = ()
    __never_dumped__: ClassVar[tuple[str, ...]] = ()

    id: EventID = Field(default_factory=new_event_id)
    timestamp: str = Field(default_factory=timestamp_now)
    source: SourceType
    parent_id: EventID | None = None

    @field_validator("id")
    @classmethod
    def _not_root_sentinel(cls, value: str) -> str:
        if value == ROOT_PARENT_ID:
            raise InvalidValueError(f"an event id may not equal the reserved sentinel {value!r}")
        # An id is the `id:` line of a server-sent event and a header value: one line.
        if not value:
            raise InvalidValueError("an event id may not be empty")
        return check_framing_text(value, "an event id")

    @field_validator("timestamp", mode="before")
    @classmethod
    def _timestamp_text(cls, value: Any) -> Any:
        # A datetime (cowconv 0.1 took one) is written as ISO-8601 text.
        return value.isoformat() if isinstance(value, datetime) else value

    @model_serializer(mode="wrap")
    def _omit_null_parent(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        # A root event's JSON has no parent_id at all (OpenHands writes it so: additive); nor
        # has it the OpenHands fields an event leaves unset (its JSON stays what it was).
        if isinstance(data, dict):
            for name in ("parent_id", *self.__omitted_when_none__):
                if name in data and data[name] is None:
                    del data[name]
            for name, default in self.__omitted_when_default__:
                if name in data and data[name] == default:
                    del data[name]
            for name in self.__never_dumped__:
                data.pop(name, None)
        return data

    @classmethod
    def _unknown_kind(cls, kind: str, data: dict[str, Any]) -> tuple[type[Kinded], dict[str, Any]]:
        upgraded = upgrade_legacy_event({**data, "kind": kind})
        if upgraded is None:
            return super()._unknown_kind(kind, data)
        new_kind = upgraded.pop("kind")
        target = cls._resolve_kind(new_kind)
        if target is None:
            return super()._unknown_kind(kind, data)
        return target, upgraded

    def __str__(self) -> str:
        return f"{type(self).__name__} ({self.source})"


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


class LLMConvertibleEvent(Event):
    """An event the model sees: it converts to one LLM :class:`Message`.

    >>> MessageEvent(role="user", content="hi").to_llm_message().role
    'user'
    >>> issubclass(MessageEvent, LLMConvertibleEvent)
    True
    """

    @abstractmethod
    def to_llm_message(self) -> Message:
        """The LLM message this event stands for."""

    def __str__(self) -> str:
        base = super().__str__()
        try:
            message = self.to_llm_message()
        except Exception:
            return base
        preview = " ".join(content_to_str(message.content))
        if len(preview) > N_CHAR_PREVIEW:
            preview = preview[: N_CHAR_PREVIEW - 3] + "..."
        return f"{base}\n  {message.role}: {preview or '[no text content]'}"


class MessageEvent(LLMConvertibleEvent):
    """A message from the user or the agent: its exact LLM message and context extensions.

    ``role=`` and ``content=`` (a str or content parts) are a shorthand for
    ``llm_message=Message(role=..., content=...)``. Without ``source``, the
    role decides it: ``"user"`` for a user message, ``"environment"`` for a
    tool message, else ``"agent"``.

    >>> MessageEvent(role="assistant", content="Done.").text
    'Done.'
    >>> MessageEvent(role="user", content="Hi.").source
    'user'
    """

    source: SourceType
    llm_message: Message
    llm_response_id: EventID | None = None
    activated_skills: tuple[str, ...] = ()
    extended_content: tuple[TextContent, ...] = ()
    sender: str | None = None
    critic_result: FrozenJSON = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "llm_message" not in data and ("role" in data or "content" in data):
            data = dict(data)
            data["llm_message"] = {
                "role": data.pop("role", "user"),
                "content": data.pop("content", ()),
            }
        if data.get("source") is None:
            message = data.get("llm_message")
            role = message.role if isinstance(message, Message) else None
            if isinstance(message, dict):
                role = message.get("role")
            if isinstance(role, str):
                data = {**data, "source": _SOURCE_OF_ROLE.get(role, "agent")}
        return data

    @property
    def role(self) -> Role:
        """The LLM message's role."""
        return self.llm_message.role

    @property
    def content(self) -> tuple[TextContent | ImageContent, ...]:
        """The LLM message's content parts."""
        return self.llm_message.content

    @property
    def text(self) -> str:
        """The text parts of the LLM message joined (not ``extended_content``)."""
        return self.llm_message.text

    @property
    def reasoning_content(self) -> str:
        """The model's reasoning text, if it gave any."""
        return self.llm_message.reasoning_content or ""

    @property
    def thinking_blocks(self) -> tuple[Any, ...]:
        """The LLM message's thinking blocks."""
        return self.llm_message.thinking_blocks

    def to_llm_message(self) -> Message:
        """The LLM message with ``extended_content`` appended."""
        if not self.extended_content:
            return self.llm_message
        return self.llm_message.model_copy(
            update={"content": (*self.llm_message.content, *self.extended_content)}
        )


class SystemPromptEvent(Event):
    """The system prompt and the tool specs the agent offers the model.

    >>> SystemPromptEvent(system_prompt="Be brief.").source
    'agent'
    """

    source: SourceType = "agent"
    system_prompt: str
    tools: tuple[FrozenJSONMap, ...] = ()
    dynamic_context: TextContent | None = None
    """Per-conversation context after the prompt (OpenHands' second system block): the
    agent context's repo skills, skills list, suffix, secrets' names and date."""

    __omitted_when_none__: ClassVar[tuple[str, ...]] = ("dynamic_context",)

    @property
    def full_text(self) -> str:
        """The system message's text: the prompt, then the dynamic context on its own line.

        >>> SystemPromptEvent(system_prompt="Be brief.", dynamic_context=TextContent(
        ...     text="Say yay.")).full_text
        'Be brief.\\nSay yay.'
        """
        if self.dynamic_context is None:
            return self.system_prompt
        return f"{self.system_prompt}\n{self.dynamic_context.text}"

    @field_validator("system_prompt", mode="before")
    @classmethod
    def _prompt_text(cls, value: Any) -> Any:
        # OpenHands' SDK gives the prompt as a TextContent (JSON: {"type": "text", "text": ...}).
        if isinstance(value, TextContent):
            return value.text
        if isinstance(value, dict) and set(value) <= {"type", "text", "cache_prompt"}:
            return value.get("text", value)
        return value


class ActionEvent(Event):
    """A tool call the agent made.

    Tool calls answered in one LLM response share ``llm_response_id``; the text
    the model wrote beside them is ``thought``.

    >>> action = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={"command": "ls"})
    >>> action.arguments["command"]
    'ls'

    OpenHands' SDK's fields are accepted too: ``action`` (the call's
    :class:`~cowconv.Action`), ``tool_call`` (the model's
    :class:`~cowconv.MessageToolCall`), and ``thought`` as text parts (kept
    as their text). Without ``arguments``, they are the tool call's JSON
    arguments, else the action's fields.

    >>> call = MessageToolCall(id="c2", name="terminal", arguments='{"command": "pwd"}')
    >>> ActionEvent(tool_name="terminal", tool_call_id="c2", tool_call=call,
    ...             thought=[TextContent(text="Where am I?")]).arguments["command"]
    'pwd'
    """

    source: SourceType = "agent"
    tool_name: str
    tool_call_id: str
    arguments: FrozenJSONMap
    thought: str = ""
    llm_response_id: str | None = None
    action: SerializeAsAny[Action] | None = None
    tool_call: MessageToolCall | None = None
    security_risk: SecurityRisk = SecurityRisk.UNKNOWN
    """The risk the model gave the call (its ``security_risk`` argument), read by
    :class:`~cowconv.security.LLMSecurityAnalyzer`; ``UNKNOWN`` without an analyzer."""
    summary: str | None = None
    reasoning_content: str | None = None
    # cowconv's own: the workspace snapshot (cowconv.workspaces) of the files just before
    # the call ran, on the first call of a step when the workspace records snapshots.
    workspace_snapshot: str | None = None

    __omitted_when_none__: ClassVar[tuple[str, ...]] = (
        "action",
        "tool_call",
        "summary",
        "reasoning_content",
        "workspace_snapshot",
    )
    __omitted_when_default__: ClassVar[tuple[tuple[str, object], ...]] = (
        ("security_risk", SecurityRisk.UNKNOWN),
    )

    @model_validator(mode="before")
    @classmethod
    def _openhands_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        thought = data.get("thought")
        if isinstance(thought, list | tuple):
            data = {**data, "thought": "".join(_part_text(part) for part in thought)}
        if "arguments" not in data:
            data = {**data, "arguments": _arguments_of(data.get("tool_call"), data.get("action"))}
        return data


class ObservationEvent(Event):
    """The result of a tool call.

    >>> ObservationEvent(tool_name="terminal", tool_call_id="c1", output="a.py", exit_code=0).source
    'environment'

    OpenHands' SDK's fields are accepted too: ``observation`` (an
    :class:`~cowconv.Observation`; without ``output``, its text is the
    output) and ``action_id`` (the id of the :class:`ActionEvent` answered).

    >>> ObservationEvent(tool_name="terminal", tool_call_id="c1", action_id="a1",
    ...                  observation=Observation.from_text("a.py")).output
    'a.py'
    """

    source: SourceType = "environment"
    tool_name: str
    tool_call_id: str
    output: str
    exit_code: int | None = None
    extra: FrozenJSON = None
    observation: SerializeAsAny[Observation] | None = None
    action_id: EventID | None = None
    # cowconv's own: the workspace snapshot (cowconv.workspaces) of the files just after
    # the call, when the workspace records snapshots.
    workspace_snapshot: str | None = None

    __omitted_when_none__: ClassVar[tuple[str, ...]] = (
        "observation",
        "action_id",
        "workspace_snapshot",
    )

    @model_validator(mode="before")
    @classmethod
    def _openhands_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and "output" not in data:
            observation = data.get("observation")
            if isinstance(observation, Observation):
                return {**data, "output": observation.text}
            if isinstance(observation, dict):
                content = observation.get("content") or ()
                return {**data, "output": "".join(_part_text(part) for part in content)}
        return data


def _part_text(part: Any) -> str:
    # The text of a content part given as a model or as its JSON (images have none).
    if isinstance(part, TextContent):
        return part.text
    if isinstance(part, dict) and part.get("type", "text") == "text":
        return str(part.get("text", ""))
    return ""


def _arguments_of(tool_call: Any, action: Any) -> Any:
    # An ActionEvent's arguments from OpenHands' fields: the call's JSON, else the action's fields.
    text = tool_call.arguments if isinstance(tool_call, MessageToolCall) else None
    if isinstance(tool_call, dict):
        text = tool_call.get("arguments")
    if isinstance(text, str) and text.strip():
        try:
            decoded = decode_json(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            return decoded
    if isinstance(action, Action):
        return action.model_dump(mode="json", exclude={"kind"})
    if isinstance(action, dict):
        return {key: value for key, value in action.items() if key != "kind"}
    return {}


class AgentErrorEvent(Event):
    """An error that stopped an agent step (failed LLM call, crashed tool).

    With ``tool_call_id`` it answers that tool call.

    >>> AgentErrorEvent(error="rate limited").source
    'agent'
    """

    source: SourceType = "agent"
    error: str
    tool_call_id: str | None = None
    tool_name: str | None = None


class PauseEvent(Event):
    """A run was paused by the user.

    >>> PauseEvent().kind
    'PauseEvent'
    """

    source: SourceType = "user"

    def __str__(self) -> str:
        return f"{type(self).__name__} ({self.source}): Agent execution paused"


class EventIDSet(set[str]):
    """A set of event ids that cannot change: ``Condensation.forgotten_event_ids``.

    It is a ``set`` (OpenHands' SDK's type: ``isinstance(ids, set)``, and it
    compares equal to one), but every method that would change it raises
    :class:`~cowconv.FrozenInstanceError`, and it hashes like the
    ``frozenset`` of its ids, so the event holding it stays immutable and
    hashable. Operators (``|``, ``&``, ``-``, ``copy()``) give plain sets.

    >>> ids = EventIDSet(["e2", "e1"])
    >>> ids == {"e1", "e2"}, isinstance(ids, set), hash(ids) == hash(frozenset(ids))
    (True, True, True)
    >>> ids.add("e3")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.FrozenInstanceError: EventIDSet is immutable (...): cannot add
    """

    __slots__ = ()

    def __new__(cls, ids: Iterable[str] = ()) -> "EventIDSet":
        made = super().__new__(cls)
        set.update(made, ids)  # the one change, made before anyone holds it
        return made

    def __init__(self, ids: Iterable[str] = ()) -> None:
        pass  # filled by __new__: set.__init__ would empty it again

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self))

    def __reduce__(self) -> "tuple[type[EventIDSet], tuple[list[str]]]":
        return (type(self), (sorted(self),))

    def _refuse(self, change: str) -> NoReturn:
        raise FrozenInstanceError(
            f"{type(self).__name__} is immutable (it may be shared by forks): cannot {change}"
        )

    def add(self, element: str) -> None:
        self._refuse("add")

    def discard(self, element: object) -> None:
        self._refuse("discard")

    def remove(self, element: str) -> None:
        self._refuse("remove")

    def pop(self) -> str:
        self._refuse("pop")

    def clear(self) -> None:
        self._refuse("clear")

    def update(self, *others: Iterable[str]) -> None:
        self._refuse("update")

    def intersection_update(self, *others: Iterable[Any]) -> None:
        self._refuse("intersection_update")

    def difference_update(self, *others: Iterable[Any]) -> None:
        self._refuse("difference_update")

    def symmetric_difference_update(self, other: Iterable[str]) -> None:
        self._refuse("symmetric_difference_update")

    def __ior__(self, other: AbstractSet[str]) -> Self:  # type: ignore[override,misc]
        self._refuse("|=")

    def __iand__(self, other: AbstractSet[object]) -> Self:
        self._refuse("&=")

    def __isub__(self, other: AbstractSet[object]) -> Self:
        self._refuse("-=")

    def __ixor__(self, other: AbstractSet[str]) -> Self:  # type: ignore[override,misc]
        self._refuse("^=")


def _event_id_set(ids: Any) -> EventIDSet:
    if isinstance(ids, EventIDSet):
        return ids
    if isinstance(ids, str) or not isinstance(ids, Iterable):
        raise InvalidValueError(f"forgotten_event_ids must be a set or list of ids, got {ids!r}")
    items = list(ids)
    if not all(isinstance(item, str) for item in items):
        raise InvalidValueError(f"forgotten_event_ids must hold event ids (str), got {items!r}")
    return EventIDSet(items)


EventIDs: TypeAlias = Annotated[
    EventIDSet,
    PlainValidator(_event_id_set),
    PlainSerializer(sorted, return_type=list[str]),
    WithJsonSchema({"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
]


class Condensation(Event):
    """Older events replaced, in what the model sees, by a summary (nothing is deleted).

    The view sent to the LLM after it is: the first ``summary_offset``
    events of the history, then ``summary``, then the events after the last
    of ``forgotten_event_ids`` (see :class:`~cowconv.LLMSummarizingCondenser`).
    The forgotten events stay in the history, and forks share the
    condensation like any other event.

    >>> condensation = Condensation(forgotten_event_ids=["e2", "e1"], summary="Listed files.",
    ...                             summary_offset=1)
    >>> condensation.forgotten_event_ids == {"e1", "e2"}
    True
    >>> condensation.model_dump()["forgotten_event_ids"]
    ['e1', 'e2']

    ``forgotten_event_ids`` is a ``set``, as in OpenHands' SDK, that cannot
    change (an :class:`EventIDSet`): the event stays immutable. Its JSON is
    the sorted list, so a condensation always serializes to the same text
    (a set's iteration order changes from one process to the next).
    """

    source: SourceType = "environment"
    forgotten_event_ids: EventIDs = Field(default_factory=EventIDSet)
    summary: str | None = None
    summary_offset: int | None = Field(default=None, ge=0)
    llm_response_id: str | None = None


class CondensationRequest(Event):
    """A request to condense the history at the agent's next step (OpenHands' event).

    Recorded after the last condensation, it makes the next step of a run
    condense the history with the agent's :class:`~cowconv.LLMSummarizingCondenser`
    whatever its size (an agent without a condenser ignores it).

    >>> CondensationRequest().source
    'environment'
    """

    source: SourceType = "environment"


class ConversationErrorEvent(Event):
    """A failure that stopped a run, for the client: not an observation, never sent to the LLM.

    Unlike :class:`AgentErrorEvent` it answers no tool call; the run that
    records it ends in status ``error``. ``code`` is usually the exception's
    class name, ``detail`` its message; ``classification`` (derived from
    them when not given) is what a client may act on.

    >>> error = ConversationErrorEvent(code="LLMAuthenticationError", detail="invalid api key")
    >>> error.source, error.classification.kind.value, error.classification.user_action
    ('environment', 'auth', 'settings')
    """

    source: SourceType = "environment"
    code: str
    detail: str
    classification: ErrorClassification | None = None

    @model_validator(mode="after")
    def _classified(self) -> Self:
        if self.classification is None:
            object.__setattr__(self, "classification", classify_error(self.code, self.detail))
        return self

    def __str__(self) -> str:
        return f"{type(self).__name__} ({self.source}): {self.code}: {self.detail}"


class ConversationStateUpdateEvent(Event):
    """A change of a conversation's info, as OpenHands' agent server streams it.

    ``key`` names the field (``execution_status``, ``stats``, ...), or is
    ``"full_state"`` for the whole info in ``value``. A client keeps these in
    its cached info (:class:`~cowconv.RemoteEventsList` does not keep it).
    A history it is appended to keeps it like any other event; it is never
    sent to the LLM.

    >>> update = ConversationStateUpdateEvent(key="execution_status", value="paused")
    >>> update.kind, update.source, update.key, update.value
    ('ConversationStateUpdateEvent', 'environment', 'execution_status', 'paused')
    """

    source: SourceType = "environment"
    key: str
    value: Any = None


CondensationEvent = Condensation
"""cowconv 0.1's name for :class:`Condensation`."""


# -- events of cowconv 0.1 --------------------------------------------------------------------
# The one place that knows the old JSON: kind -> the class that replaced it.
_LEGACY_KINDS: dict[str, str] = {
    "message": "MessageEvent",
    "system_prompt": "SystemPromptEvent",
    "action": "ActionEvent",
    "observation": "ObservationEvent",
    "agent_error": "AgentErrorEvent",
    "pause": "PauseEvent",
    "condensation": "Condensation",
}


def legacy_kind_names(kind: str) -> tuple[str, ...]:
    """The ``kind`` values the JSON of an event of class ``kind`` may carry (0.1's included).

    >>> legacy_kind_names("SystemPromptEvent")
    ('SystemPromptEvent', 'system_prompt')
    """
    return (kind, *(old for old, new in _LEGACY_KINDS.items() if new == kind))


def upgrade_legacy_event(data: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON of a cowconv 0.1 event in today's shape (``None``: not a 0.1 kind).

    >>> upgrade_legacy_event({"kind": "message", "id": "e1", "timestamp": "2025-01-01T00:00:00Z",
    ...                       "source": "user", "role": "user",
    ...                       "content": [{"type": "text", "text": "hi"}]})["llm_message"]["role"]
    'user'
    """
    new_kind = _LEGACY_KINDS.get(str(data.get("kind")))
    if new_kind is None:
        return None
    upgraded = {**data, "kind": new_kind}
    if new_kind == "MessageEvent":
        upgraded["llm_message"] = {
            "role": upgraded.pop("role", "user"),
            "content": upgraded.pop("content", ()),
        }
    return upgraded


def run_failure(
    conversation_id: object, status: object, events: Sequence[Event]
) -> ConversationRunError | None:
    """The error ``run()`` raises for a run that ended in ``status``: ``None`` unless
    ``error`` or ``stuck``, on every backend.

    It names the latest error event of ``events`` (the run's branch, walked back to its
    last user message); ``conversation_error`` is it when OpenHands' kind.

    >>> error = run_failure("c1", "error", [AgentErrorEvent(error="rate limited")])
    >>> str(error), error.conversation_error
    ('conversation c1: the run ended in error: rate limited', None)
    >>> run_failure("c1", "finished", []) is None
    True
    """
    status = getattr(status, "value", status)
    if status not in ("error", "stuck"):
        return None
    reason = "the run ended " + ("in error" if status == "error" else "stuck")
    recorded: ConversationErrorEvent | None = None
    for position in range(len(events) - 1, -1, -1):
        event = events[position]
        if isinstance(event, ConversationErrorEvent):
            recorded = event
            reason = f"{reason}: {event.code}: {event.detail}"
            break
        if isinstance(event, AgentErrorEvent):
            reason = f"{reason}: {event.error}"
            break
        if isinstance(event, MessageEvent) and event.source == "user":
            break  # the run's events start after it
    return ConversationRunError(conversation_id, RuntimeError(reason), conversation_error=recorded)
