"""The JSON bodies of the agent server's REST API.

Requests reuse the library's own models (:class:`~cowconv.Agent`,
:class:`~cowconv.Workspace`); responses are :class:`~cowconv.ConversationInfo`,
events, and the pages below.

>>> ForkConversationRequest.model_validate({"title": "Debug"}).reset_metrics
True
"""

from __future__ import annotations

import inspect
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    RootModel,
    SerializeAsAny,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from cowconv._exceptions import InvalidValueError
from cowconv.backends.wire import (
    LLM_FIELDS,
    TOOL_NAMES,
    agent_from_openhands,
    agent_to_openhands,
    mask_secrets,
    unsupported,
)
from cowconv.core.agent import Agent
from cowconv.core.analyzers import SecurityAnalyzerBase
from cowconv.core.events import AnyEvent, Event, utc_now
from cowconv.core.frozen import CheckedModel, check_text
from cowconv.core.hooks import HookConfig
from cowconv.core.ids import ConversationIDField
from cowconv.core.kinds import LazyJsonSchema, kind_names, kinds_json_schema
from cowconv.core.message import ImageContent, Message, TextContent
from cowconv.core.security import ConfirmationPolicyBase, NeverConfirm
from cowconv.core.state import ConversationInfo as ConversationSummary
from cowconv.core.state import ExecutionStatus
from cowconv.core.workspace import Workspace

__all__ = [
    "ActivateSkillRequest",
    "AppendEventRequest",
    "BranchInfo",
    "BranchList",
    "ConversationInfo",
    "ConversationListPage",
    "ConversationPage",
    "ConversationResponse",
    "ConversationSearchPage",
    "ConfirmationResponseRequest",
    "ConversationSortOrder",
    "CreateConversationRequest",
    "ErrorResponse",
    "EventPage",
    "EventSortOrder",
    "ForkConversationRequest",
    "ForkRequest",
    "HealthResponse",
    "ID_WHITESPACE",
    "NavigateConversationRequest",
    "NavigateRequest",
    "OpenHandsEventPage",
    "RunStarted",
    "SERVER_FIELDS",
    "SendMessageRequest",
    "SentMessage",
    "SetConfirmationPolicyRequest",
    "SetSecurityAnalyzerRequest",
    "StartConversationRequest",
    "StateResponse",
    "StoredConversation",
    "StreamStatus",
    "Success",
    "UpdateConversationRequest",
    "UpdateSecretsRequest",
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


def _uuid_text(value: object) -> object:
    # OpenHands' Python clients pass a uuid.UUID: the same id as its text.
    return str(value) if isinstance(value, uuid.UUID) else value


ConversationId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=200, pattern=f"^[^/{ID_WHITESPACE}]+$"),
    AfterValidator(_plain_id),
    # Last, so it runs first and the schema keeps the pattern above.
    BeforeValidator(_uuid_text),
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
        # OpenHands' client names the kind; a server-side conversation runs in this one.
        "kind": {"const": "LocalWorkspace"},
        # cowconv's own: where the server records the workspace's snapshots (a directory
        # there), and the directories a copy's files came from.
        "snapshot_store": {"type": ["string", "null"]},
        "copied_from": {"type": "array", "items": {"type": "string"}},
        # cowconv's own: files larger than this (bytes) are left out of its snapshots.
        "max_snapshot_file_size": {"type": ["integer", "null"], "minimum": 0},
    },
    "required": ["working_dir"],
    "additionalProperties": False,
}


class _Request(CheckedModel):
    # Built at once (CheckedModel defers for import time; the server is not on that path):
    # FastAPI wraps a request model in Annotated[..., FieldInfo(alias=...)], and building a
    # deferred model inside that wrapper warns that the alias has no effect.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=False)


_NEVER_CONFIRM = "NeverConfirm"


def family_json_schema(base: type[BaseModel]) -> JsonSchemaValue:
    """The published schema of a family's JSON (a policy, an analyzer): one object per kind.

    Each registered kind but the family's root is an object whose ``kind`` names it, with the
    fields its class takes and no others, which is what the server accepts.

    >>> [option["properties"]["kind"]["const"] for option in
    ...  family_json_schema(ConfirmationPolicyBase)["oneOf"]]
    ['AlwaysConfirm', 'ConfirmRisky', 'NeverConfirm']
    """
    kinds = {name: kind for name, kind in kind_names(base).items() if kind is not base}  # type: ignore[arg-type]
    schema = kinds_json_schema(kinds)
    options = schema["oneOf"]
    for option in options:
        fields = option["properties"]
        if fields["kind"]["const"] == "ConfirmRisky":  # its validator refuses UNKNOWN
            fields["threshold"] = {"enum": ["LOW", "MEDIUM", "HIGH"], "type": "string"}
        analyzers = fields.get("analyzers")  # an ensemble holds analyzers of the other kinds
        if isinstance(analyzers, dict) and analyzers.get("type") == "array":
            analyzers["items"] = {"oneOf": [other for other in options if other is not option]}
    return schema


PolicyJSON = Annotated[
    dict[str, Any], LazyJsonSchema(lambda: family_json_schema(ConfirmationPolicyBase))
]
AnalyzerJSON = Annotated[
    dict[str, Any], LazyJsonSchema(lambda: family_json_schema(SecurityAnalyzerBase))
]


def _refuse_unsafe(data: dict[str, Any]) -> None:
    """Refuse (422, naming the field) what cowconv cannot honour where ignoring it is unsafe."""
    # Confirmation policy, security analyzer and hooks are acted on by cowconv's loop: they go
    # to StoredConversation (which validates them) and on into the conversation's state.
    oversight: dict[str, type[BaseModel]] = {
        "confirmation_policy": ConfirmationPolicyBase,
        "security_analyzer": SecurityAnalyzerBase,
        "hook_config": HookConfig,
    }
    for field, model in oversight.items():
        value = data.get(field)
        if isinstance(value, BaseModel):  # an object (OpenHands' Python clients): its JSON
            value = data[field] = value.model_dump(mode="json")
        if value is not None:
            try:
                model.model_validate(value)
            except (ValueError, TypeError) as error:
                raise unsupported(field, f"not a valid {model.__name__}: {error}") from None
    checks = {
        "plugins": "cowconv loads no plugins (they may carry hooks that guard actions)",
        "secrets": "cowconv does not inject or mask conversation secrets",
        "container": "cowconv runs tools on the server's machine, not in a container",
        "worktree_options": "cowconv's worktree is a copy of the files now, not a git branch "
        "from a ref",
    }
    for field, reason in checks.items():
        if data.get(field):
            raise unsupported(field, reason)
    # worktree=True is honoured: the conversation gets its own copy of the files (the service).
    if data.get("conversation_runtime") not in (None, "local"):
        raise unsupported("conversation_runtime", checks["container"])


class _AgentOrOpenHandsAgent:
    """The JSON schema of the agent the create route takes: cowconv's ``Agent`` JSON, or
    OpenHands' ``Agent`` JSON (recognised by ``"kind": "Agent"``), whose fields cowconv
    implements are checked as cowconv checks them and whose other fields are kept
    (:func:`~cowconv.backends.wire.agent_from_openhands` says which). The server checks
    bodies against its published schema, so this schema is the door, not a comment."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        ours = handler(core_schema)
        agent = handler.resolve_ref_schema(ours)
        properties = agent.get("properties", {})
        llm = {**handler.resolve_ref_schema(properties["llm"]), "additionalProperties": True}
        llm.pop("title", None)
        condenser = next(
            handler.resolve_ref_schema(choice)
            for choice in properties["condenser"]["anyOf"]
            if "$ref" in choice
        )
        summarizing = {
            **condenser,
            "properties": {
                **condenser.get("properties", {}),
                "kind": {"const": "LLMSummarizingCondenser"},
                "llm": llm,
            },
            "additionalProperties": True,
        }
        summarizing.pop("title", None)
        openhands = {
            "type": "object",
            "title": "OpenHands' Agent",
            "required": ["kind", "llm"],
            "properties": {
                "kind": {"const": "Agent"},
                "llm": llm,
                "tools": {
                    "type": ["array", "null"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "params": {"type": ["object", "null"]},
                        },
                    },
                },
                "filter_tools_regex": {"type": ["string", "null"], "format": "regex"},
                "system_prompt": {"type": ["string", "null"]},
                # Another kind of condenser, or no object at all, is left out (not run).
                "condenser": {
                    "anyOf": [
                        summarizing,
                        {
                            "type": "object",
                            "required": ["kind"],
                            "properties": {"kind": {"not": {"const": "LLMSummarizingCondenser"}}},
                        },
                        {"not": {"type": "object"}},
                    ]
                },
            },
            "additionalProperties": True,
        }
        return {"anyOf": [ours, openhands]}


class StartConversationRequest(BaseModel):
    """Create a conversation: OpenHands' ``StartConversationRequest`` (or cowconv's older body).

    ``agent`` is OpenHands' ``Agent`` JSON as its ``RemoteConversation``
    sends it, or cowconv's :class:`~cowconv.Agent` JSON; the fields cowconv
    implements are honoured (:func:`~cowconv.backends.wire.agent_from_openhands`),
    the others are kept (``openhands_agent``, secrets masked) and shown
    again by ``GET``. ``workspace.working_dir`` is a directory on the
    server's machine. Request fields cowconv does not implement are kept
    too (:attr:`kept`), except those whose silent omission would be unsafe
    (plugins, secrets, containers, worktrees): those are refused with a 422
    naming the field. A confirmation policy, a security analyzer and hooks
    (``hook_config``) are acted on: they become the conversation's state.

    The API key in ``agent.llm.api_key`` stays on the server; responses
    never show it.

    >>> body = {"agent": {"kind": "Agent", "llm": {"model": "openai/gpt-4o", "api_key": "sk-1",
    ...                   "stream": False}, "tools": [{"name": "terminal", "params": {}}]},
    ...         "workspace": {"kind": "LocalWorkspace", "working_dir": "/tmp"},
    ...         "max_iterations": 50, "stuck_detection": True}
    >>> request = StartConversationRequest.model_validate(body)
    >>> request.agent.tools[0].name, request.max_iteration_per_run, request.kept
    ('terminal', 50, {'stuck_detection': True})
    >>> request.openhands_agent  # kept: what cowconv's JSON of the agent does not say
    {'llm': {'stream': False}}
    """

    # Built at once (see _Request); unknown fields are kept (model_extra), not refused. Dumped
    # with OpenHands' names (conversation_id, max_iterations), as StoredConversation reads them.
    model_config = ConfigDict(
        frozen=True, extra="allow", defer_build=False, serialize_by_alias=True
    )

    # The schema says what the server takes: cowconv's Agent JSON or OpenHands' (below).
    agent: Annotated[Agent, _AgentOrOpenHandsAgent()]
    # The schema says what the server takes: a working_dir on the server, nothing else.
    workspace: Annotated[Workspace, WithJsonSchema(_SERVER_WORKSPACE_SCHEMA)]
    id: ConversationId | None = Field(
        default=None,
        validation_alias=AliasChoices("conversation_id", "id"),
        serialization_alias="conversation_id",
    )
    tags: dict[str, str] | None = None
    max_iteration_per_run: int | None = Field(
        default=None,
        gt=0,
        validation_alias=AliasChoices("max_iterations", "max_iteration_per_run"),
        serialization_alias="max_iterations",
    )
    initial_message: SendMessageRequest | None = None
    openhands_agent: dict[str, Any] | None = None
    """What the agent's JSON as sent says beyond cowconv's JSON of it, secrets masked (``None``:
    nothing more)."""

    @model_validator(mode="before")
    @classmethod
    def _from_openhands(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        _refuse_unsafe(data)
        data.pop("openhands_agent", None)  # computed here, never taken from the client
        if "agent" in data:
            data["agent"] = _without_memory_context(data["agent"])
        agent = data.get("agent")
        if isinstance(agent, dict) and _openhands_shaped(agent):
            data["agent"] = agent_from_openhands(agent)
            # Kept: only what cowconv's own JSON of the agent would not say again.
            residue = _residue(mask_secrets(agent), agent_to_openhands(data["agent"]))
            data["openhands_agent"] = residue or None
        workspace = data.get("workspace")
        if isinstance(workspace, dict) and "kind" in workspace:
            if workspace["kind"] != "LocalWorkspace":
                raise unsupported(
                    "workspace.kind", "a server-side conversation runs in a LocalWorkspace"
                )
            data["workspace"] = {k: v for k, v in workspace.items() if k != "kind"}
        for key in ("agent_settings", "agent_profile_id"):
            if data.get(key) is not None and agent is None:
                raise unsupported(key, "cowconv needs the agent itself in 'agent'")
        return data

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
        return Workspace.coerce(workspace)

    @property
    def kept(self) -> dict[str, Any]:
        """The request's fields cowconv does not implement, as sent (shown again by ``GET``)."""
        return dict(self.model_extra or {})


def _residue(sent: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """The part of an agent's JSON as sent that ``ours`` (cowconv's JSON of it) does not repeat.

    >>> _residue({"kind": "Agent", "llm": {"model": "m", "stream": True}, "critic": None},
    ...          {"kind": "Agent", "llm": {"model": "m"}})
    {'llm': {'stream': True}, 'critic': None}
    """
    residue: dict[str, Any] = {}
    for key, value in sent.items():
        if key == "llm" and isinstance(value, dict) and isinstance(ours.get("llm"), dict):
            llm = {k: v for k, v in value.items() if k not in ours["llm"]}
            if llm:
                residue["llm"] = llm
        elif key not in ours or ours[key] != value:
            residue[key] = value
    return residue


def _openhands_shaped(agent: dict[str, Any]) -> bool:
    """Whether an agent's JSON is OpenHands' (a ``kind``, or a field cowconv's Agent lacks).

    >>> _openhands_shaped({"llm": {"model": "m"}, "tools": [{"name": "terminal"}]})
    False
    >>> _openhands_shaped({"llm": [], "tools": True})  # malformed: cowconv's Agent says why
    False
    """
    if not isinstance(agent.get("tools") or [], list):
        return False
    return (
        "kind" in agent
        or any(key not in Agent.model_fields for key in agent)
        or any(
            isinstance(llm, dict) and any(key not in LLM_FIELDS for key in llm)
            for llm in (agent.get("llm"),)
        )
        or any(
            isinstance(tool, dict) and tool.get("name") not in (None, *TOOL_NAMES)
            for tool in agent.get("tools") or ()
        )
    )


class ForkConversationRequest(_Request):
    """Fork a conversation: every field is optional.

    ``id`` names the fork (a new UUID when left out), ``title`` becomes
    ``tags["title"]``, ``reset_metrics`` starts the fork's stats at zero and
    ``from_event_id`` forks the history up to and including that event.
    ``workspace`` is cowconv's own: ``"copy"`` gives the fork its own copy of
    the files at the fork point (``None`` or ``"shared"``: OpenHands' behaviour).
    ``agent``, cowconv's own too, gives the fork another agent (model, system
    prompt, tools), as the create request takes it (cowconv's or OpenHands'
    ``Agent`` JSON); left out, the fork keeps the source's.

    >>> sorted(ForkConversationRequest().model_dump().items())  # doctest: +NORMALIZE_WHITESPACE
    [('agent', None), ('from_event_id', None), ('id', None), ('reset_metrics', True),
     ('tags', None), ('title', None), ('workspace', None)]
    >>> ForkConversationRequest(agent={"llm": {"model": "openai/gpt-4o-mini"}}).agent.llm.model
    'openai/gpt-4o-mini'
    >>> ForkConversationRequest(workspace="copy").workspace
    'copy'
    """

    id: ConversationId | None = _ID
    title: str | None = None
    tags: dict[str, str] | None = None
    reset_metrics: bool = True
    from_event_id: str | None = None
    workspace: Literal["shared", "copy"] | None = None
    agent: Annotated[Agent, _AgentOrOpenHandsAgent()] | None = None

    @field_validator("agent", mode="before")
    @classmethod
    def _agent_from_openhands(cls, agent: Any) -> Any:
        agent = _without_memory_context(agent)
        if isinstance(agent, dict) and _openhands_shaped(agent):
            return agent_from_openhands(agent)
        return agent


def _without_memory_context(agent: Any) -> Any:
    """``agent``'s JSON without ``agent_context.memory_context``: the conversation builds it from
    its workspace (``load_memory``) and never stores it, so a value sent is not kept (taken,
    it would make the stored state differ from the one sent: a 422 for a valid body).

    >>> _without_memory_context({"agent_context": {"memory_context": "", "skills": []}})
    {'agent_context': {'skills': []}}
    """
    if not isinstance(agent, dict):
        return agent
    context = agent.get("agent_context")
    if not isinstance(context, dict) or "memory_context" not in context:
        return agent
    context = {key: value for key, value in context.items() if key != "memory_context"}
    return {**agent, "agent_context": context}


class NavigateConversationRequest(_Request):
    """Move a conversation's active branch to end at ``event_id`` (``null``: empty).

    OpenHands' SDK's body for ``POST /api/conversations/{id}/navigate``.

    >>> NavigateConversationRequest(event_id="e1").event_id
    'e1'
    """

    event_id: str | None = None


CreateConversationRequest = StartConversationRequest
"""cowconv's earlier name of :class:`StartConversationRequest`."""
ForkRequest = ForkConversationRequest
"""cowconv's earlier name of :class:`ForkConversationRequest`."""
NavigateRequest = NavigateConversationRequest
"""cowconv's earlier name of :class:`NavigateConversationRequest`."""


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


def _send_message_schema(schema: dict[str, Any]) -> None:
    """The schema of what the server takes: a user message as text or as text parts, not both."""
    part = {
        "type": "object",
        # TextContent's fields, as OpenHands' client sends them (enable_truncation: its older
        # clients; dropped).
        "properties": {
            "type": {"const": "text"},
            "text": {"type": "string"},
            "cache_prompt": {"type": "boolean"},
            "enable_truncation": {"type": "boolean"},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    schema.clear()
    schema.update(
        {
            "title": "SendMessageRequest",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "role": {
                    "const": "user",
                    "default": "user",
                    "description": "only user messages can be sent",
                },
                "content": {"type": "array", "items": part},
                "text": {"type": "string"},
                "run": {"type": "boolean", "default": False},
                "sender": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "oneOf": [
                {"required": ["text"], "not": {"required": ["content"]}},
                {"required": ["content"], "not": {"required": ["text"]}},
            ],
        }
    )


class SendMessageRequest(BaseModel):
    """A message: OpenHands' body (``role``, ``content`` parts, ``run``) or cowconv's ``text``.

    ``run`` starts a run after recording it (as OpenHands' server does);
    ``sender`` is kept on the event. The body takes OpenHands' roles; the
    server records user messages only (another role is a 422 from the
    conversation, see :class:`~cowconv.agent_server.event_service.EventService`).
    Only text parts can be sent.

    >>> SendMessageRequest.model_validate({"role": "user", "content": [{"type": "text",
    ...     "text": "Run `ls`."}], "run": False}).message_text()
    'Run `ls`.'
    >>> SendMessageRequest(text="hi").create_message().text
    'hi'
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=False, json_schema_extra=_send_message_schema
    )

    role: Literal["user", "system", "assistant", "tool"] = "user"
    content: list[TextContent | ImageContent] | None = None
    text: str | None = None
    run: bool = False
    sender: str | None = None

    @model_validator(mode="after")
    def _one_text(self) -> SendMessageRequest:
        # JSON can carry lone surrogates ("\\ud800"): refused here (422), not by the event
        # built from this body later (a 500).
        for name in ("text", "sender"):
            value = getattr(self, name)
            if isinstance(value, str):
                check_text(value, name)
        if (self.text is None) == (self.content is None):
            raise InvalidValueError("give the message as content parts or as text, not both")
        for part in self.content or ():
            if not isinstance(part, TextContent):
                raise unsupported("content", "cowconv sends text parts only")
        return self

    def message_text(self) -> str:
        """The message's text (its text parts joined)."""
        if self.text is not None:
            return self.text
        return "".join(part.text for part in self.content or () if isinstance(part, TextContent))

    def create_message(self) -> Message:
        """The message as an LLM message (OpenHands' method of the same name)."""
        content = self.content if self.content is not None else self.text or ""
        return Message(role=self.role, content=content)


class Success(BaseModel):
    """OpenHands' answer to an action route (``/run``, ``/pause``, ``DELETE``, a message...).

    >>> Success().model_dump()
    {'success': True}
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    success: bool = True


class ConversationInfo(ConversationSummary):
    """A conversation as shown: OpenHands' ``ConversationInfo`` plus cowconv's summary.

    The fields OpenHands' ``RemoteConversation`` reads are all here; ``agent``
    is OpenHands' ``Agent`` JSON (api keys shown as ``"**********"``; an
    :class:`~cowconv.Agent` is taken and shown so); fields of the creating
    request cowconv does not implement come back as sent (``stuck_detection``,
    ``client_tools``...). ``stats`` keeps cowconv's shape (OpenHands' client
    reads it as empty stats).

    >>> from datetime import UTC, datetime
    >>> from cowconv import LLM, Agent, Workspace
    >>> now = datetime(2026, 1, 1, tzinfo=UTC)
    >>> info = ConversationInfo(id="c1", agent=Agent(llm=LLM(model="m", api_key="sk-1")),
    ...     workspace=Workspace(working_dir="/tmp"), execution_status="idle",
    ...     created_at=now, updated_at=now)
    >>> info.agent["llm"]["api_key"], info.workspace, info.max_iterations
    ('**********', {'kind': 'LocalWorkspace', 'working_dir': '/tmp'}, 500)
    """

    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True)

    agent: dict[str, Any]
    workspace: dict[str, Any]
    persistence_dir: str | None = None
    max_iterations: int = Field(default=500, gt=0)
    stuck_detection: bool = True
    confirmation_policy: PolicyJSON = Field(default_factory=lambda: {"kind": _NEVER_CONFIRM})
    security_analyzer: AnalyzerJSON | None = None
    hook_config: dict[str, Any] | None = None
    activated_knowledge_skills: list[str] = []
    invoked_skills: list[str] = []
    blocked_actions: dict[str, str] = {}
    blocked_messages: dict[str, str] = {}
    head_is_empty: bool = False
    agent_state: dict[str, Any] = {}
    client_tools: list[Any] = []
    tool_module_qualnames: dict[str, str] = {}

    @field_validator("agent", mode="before")
    @classmethod
    def _agent_json(cls, agent: Any) -> Any:
        if isinstance(agent, Agent):
            return mask_secrets(agent_to_openhands(agent.model_dump(mode="json")))
        return agent

    @field_validator("workspace", mode="before")
    @classmethod
    def _workspace_json(cls, workspace: Any) -> Any:
        if isinstance(workspace, Workspace):
            return {"kind": "LocalWorkspace", "working_dir": workspace.working_dir}
        return workspace


ConversationResponse = ConversationInfo
"""cowconv's earlier name of :class:`ConversationInfo`."""


SERVER_FIELDS = frozenset(
    {"id", "title", "metrics", "created_at", "updated_at"}
    | {"forked_from_conversation_id", "forked_from_event_id"}
)
"""The fields of a :class:`StoredConversation` the server sets, never taken from a request."""


class StoredConversation(BaseModel):
    """What the server stores about a conversation beside its snapshot (OpenHands' ``meta.json``).

    The start request's settings without the agent (the agent and the
    history are the conversation's snapshot, in cowconv's store), plus the
    server's fields: id, title, times, fork lineage. A request's fields
    cowconv does not act on are kept as sent (``model_extra``) and shown
    again in :class:`ConversationInfo`. An
    :class:`~cowconv.agent_server.event_service.EventService` serves one
    conversation by its ``stored``; a server over a directory writes it to
    ``<dir>/<id hex>/meta.json``.

    >>> stored = StoredConversation(id="c1", workspace={"working_dir": "/tmp"},
    ...                             stuck_detection=False)
    >>> stored.max_iterations, stored.secrets, stored.confirmation_policy.kind, stored.model_extra
    (500, {}, 'NeverConfirm', {'stuck_detection': False})
    """

    model_config = ConfigDict(frozen=True, extra="allow", defer_build=True)

    id: ConversationIDField
    workspace: Workspace
    confirmation_policy: SerializeAsAny[ConfirmationPolicyBase] = Field(
        default_factory=NeverConfirm
    )
    security_analyzer: SerializeAsAny[SecurityAnalyzerBase] | None = None
    hook_config: HookConfig | None = None
    initial_message: SendMessageRequest | None = None
    max_iterations: int = Field(default=500, gt=0)
    secrets: dict[str, Any] = Field(
        default_factory=dict,
        description="OpenHands' conversation secrets: cowconv injects none, so this is empty",
    )
    tags: dict[str, str] = Field(default_factory=dict)
    title: str | None = None
    metrics: dict[str, Any] | None = None
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    forked_from_conversation_id: ConversationIDField | None = None
    forked_from_event_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_openhands(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        # A start request's JSON (OpenHands' names): its id and iteration bound are ours.
        if data.get("id") is None and data.get("conversation_id") is not None:
            data["id"] = data["conversation_id"]
        data.pop("conversation_id", None)
        if data.get("max_iterations") is None:
            data.pop("max_iterations", None)
        if data.get("tags") is None:
            data.pop("tags", None)
        workspace = data.get("workspace")
        if isinstance(workspace, dict) and "kind" in workspace:
            data["workspace"] = {k: v for k, v in workspace.items() if k != "kind"}
        return data

    @field_validator("secrets")
    @classmethod
    def _no_secrets(cls, secrets: dict[str, Any]) -> dict[str, Any]:
        if secrets:
            raise unsupported("secrets", "cowconv does not inject or mask conversation secrets")
        return secrets

    @property
    def kept(self) -> dict[str, Any]:
        """The request's fields cowconv does not act on, as sent."""
        return dict(self.model_extra or {})


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


class ConversationListPage(BaseModel):
    """A page of ``GET /api/conversations`` without ``ids``: summaries, oldest first.

    cowconv's listing (tag filters, offsets); OpenHands' search is :class:`ConversationPage`.

    >>> ConversationListPage(items=[], next_offset=None).items
    []
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[ConversationSummary]
    next_offset: int | None = None
    unreadable: list[str] = []
    """Ids of the stored conversations this page covers that cannot be read (damaged rows),
    left out of ``items``; ``DELETE`` removes them."""
    next_cursor: str | None = None
    """Give it as ``cursor`` for the next page (read off an index; ``None`` after the last)."""


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


class SentMessage(Success):
    """The answer to ``POST /events``: OpenHands' ``{"success": true}`` and the recorded message.

    >>> SentMessage(event={"kind": "PauseEvent"}).success
    True
    """

    event: AnyEvent


class RunStarted(Success):
    """The answer to ``POST /run``: OpenHands' ``{"success": true}`` and where the run starts.

    >>> RunStarted(event_count=3).model_dump()
    {'success': True, 'event_count': 3}
    """

    event_count: int = Field(ge=0)


class OpenHandsEventPage(BaseModel):
    """A page of ``GET /events/search``: events in OpenHands' JSON shapes, ``next_page_id``.

    >>> OpenHandsEventPage(items=[]).next_page_id is None
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[dict[str, Any]]
    next_page_id: str | None = None


class ConversationPage(BaseModel):
    """A page of ``GET /api/conversations/search`` (OpenHands' ``ConversationPage``).

    >>> ConversationPage(items=[]).next_page_id is None
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: list[ConversationInfo]
    next_page_id: str | None = None


ConversationSearchPage = ConversationPage
"""cowconv's earlier name of :class:`ConversationPage`."""


class ConversationSortOrder(StrEnum):
    """How OpenHands' conversation search sorts (``sort_order``).

    >>> ConversationSortOrder("UPDATED_AT_DESC").descending
    True
    """

    CREATED_AT = "CREATED_AT"
    UPDATED_AT = "UPDATED_AT"
    CREATED_AT_DESC = "CREATED_AT_DESC"
    UPDATED_AT_DESC = "UPDATED_AT_DESC"

    @property
    def field(self) -> str:
        """The :class:`ConversationInfo` field sorted on."""
        return "updated_at" if self.value.startswith("UPDATED_AT") else "created_at"

    @property
    def descending(self) -> bool:
        """Whether the newest comes first."""
        return self.value.endswith("_DESC")


class EventSortOrder(StrEnum):
    """How OpenHands' event search sorts (``sort_order``).

    >>> EventSortOrder.TIMESTAMP_DESC.value
    'TIMESTAMP_DESC'
    """

    TIMESTAMP = "TIMESTAMP"
    TIMESTAMP_DESC = "TIMESTAMP_DESC"


def _no_secrets_schema(schema: dict[str, Any]) -> None:
    """What the server takes: no secrets (cowconv injects none; a secret is a 422)."""
    schema["properties"]["secrets"] = {
        "type": "object",
        "maxProperties": 0,
        "description": "cowconv injects no secrets into a conversation: only {} is taken",
    }


class UpdateSecretsRequest(_Request):
    """OpenHands' ``POST /{id}/secrets`` body: secret name to a value or a secret source's JSON.

    The body takes OpenHands' shapes; the server takes an empty map only
    (cowconv injects no secrets: one given is a 422 naming ``secrets``), and
    its schema says so.

    >>> sorted(UpdateSecretsRequest(secrets={"A": "x", "B": {"kind": "StaticSecret"}}).secrets)
    ['A', 'B']
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=False, json_schema_extra=_no_secrets_schema
    )

    secrets: dict[str, str | dict[str, Any]]


class SetConfirmationPolicyRequest(_Request):
    """OpenHands' ``POST /{id}/confirmation_policy`` body: the policy's JSON (its ``kind``).

    >>> SetConfirmationPolicyRequest(policy={"kind": "NeverConfirm"}).policy["kind"]
    'NeverConfirm'
    """

    policy: PolicyJSON


class SetSecurityAnalyzerRequest(_Request):
    """OpenHands' ``POST /{id}/security_analyzer`` body: the analyzer's JSON, or ``null``.

    >>> SetSecurityAnalyzerRequest(security_analyzer=None).security_analyzer is None
    True
    """

    security_analyzer: AnalyzerJSON | None


class ConfirmationResponseRequest(_Request):
    """OpenHands' ``POST /{id}/events/respond_to_confirmation`` body: run or reject what waits.

    >>> ConfirmationResponseRequest(accept=False).reason
    'User rejected the action.'
    """

    accept: bool
    reason: str = "User rejected the action."


class UpdateConversationRequest(_Request):
    """OpenHands' ``PATCH /api/conversations/{id}``: a new title, tags to set.

    >>> UpdateConversationRequest(title="Report").title
    'Report'
    """

    title: str | None = Field(default=None, min_length=1, max_length=200)
    tags: dict[str, str | None] | None = None
