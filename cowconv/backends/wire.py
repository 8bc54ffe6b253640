"""The HTTP API between a remote backend and the agent server: header names and change routes.

Both sides read this module: the server declares its change routes with
these paths, and :class:`~cowconv.backends.remote.RemoteBackend` sends each
named change (:mod:`cowconv.core.changes`) through :data:`CHANGE_ROUTES`,
one request per change.

>>> from cowconv.core.changes import SetTag
>>> route = CHANGE_ROUTES[SetTag]
>>> route.method, route.path, route.body(SetTag("owner", "ci"))
('PATCH', '/tags', {'owner': 'ci'})
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.agent.tools import registered_tools
from cowconv.core.changes import ActivateSkill, AppendEvent, NavigateTo, SetTag, UpdateAgentState
from cowconv.core.error_classification import FailureKind
from cowconv.core.frozen import decode_json, thaw
from cowconv.core.mcp import coerce_mcp_config
from cowconv.core.workspace import SESSION_API_KEY_HEADER

__all__ = [
    "CHANGE_ROUTES",
    "LLM_FIELDS",
    "MASK",
    "SECRET_KEYS",
    "SERVER_HEADER",
    "SESSION_API_KEY_HEADER",
    "SYSTEM_PROMPT_AT_HEADER",
    "TOOL_NAMES",
    "ChangeRoute",
    "agent_from_openhands",
    "agent_to_openhands",
    "event_from_openhands",
    "event_to_openhands",
    "mask_secrets",
    "tool_from_openhands",
    "tool_to_openhands",
    "unsupported",
]

SYSTEM_PROMPT_AT_HEADER = "X-Cowconv-System-Prompt-At"
"""Set on a ``POST /messages`` answer when the server recorded the system prompt first:
its position in the history (the message follows it)."""


@dataclass(frozen=True)
class ChangeRoute:
    """Where a named change goes: ``method`` on the conversation's ``path``, with ``body``.

    >>> ChangeRoute("POST", "/skills", lambda change: {"name": change.name}).method
    'POST'
    """

    method: str
    path: str
    """Below ``/api/conversations/{id}``."""
    body: Callable[[Any], Any]
    """The JSON body of the request, from the change."""


CHANGE_ROUTES: Mapping[type, ChangeRoute] = {
    AppendEvent: ChangeRoute("POST", "/events/append", lambda c: c.event.model_dump(mode="json")),
    SetTag: ChangeRoute("PATCH", "/tags", lambda c: {c.key: c.value}),
    UpdateAgentState: ChangeRoute("PATCH", "/agent_state", lambda c: thaw(c.changes)),
    NavigateTo: ChangeRoute("POST", "/navigate", lambda c: {"event_id": c.event_id}),
    ActivateSkill: ChangeRoute("POST", "/skills", lambda c: {"name": c.name}),
}
"""Every change a remote conversation can make, by type (the server has a route for each)."""


# -- OpenHands' agent-server JSON -------------------------------------------------------------
# The REST protocol is OpenHands' agent-server protocol. The functions below translate what
# differs in shape between cowconv's models and OpenHands' (agents, events); both the server
# (cowconv.agent_server) and the client (cowconv.backends.remote) use them.

SERVER_HEADER = "X-Cowconv-Server"
"""Set on every answer of a cowconv agent server (its version): a client then knows it may use
cowconv's additions to the protocol (``/state``, the SSE stream, ``/branches``)."""

MASK = "**********"
"""How a secret is shown in an answer (OpenHands' SDK writes the same)."""

#: cowconv tool name -> OpenHands' tool name, for the tools both have (OpenHands' SDK 1.58
#: registers its ``TerminalTool`` as ``"terminal"``, cowconv's name).
TOOL_NAMES: Mapping[str, str] = {
    "terminal": "terminal",
    "file_editor": "file_editor",
    "task_tracker": "task_tracker",
    # The sub-agent tools: they run the sub-agents registered in the server's process.
    "task_tool_set": "task_tool_set",
    "workflow_tool_set": "workflow_tool_set",
    "glob": "glob",
    "grep": "grep",
    "planning_file_editor": "planning_file_editor",
}
#: Other names OpenHands' agents have used for those tools (its class names, older releases).
_TOOL_ALIASES = {
    "TerminalTool": "terminal",
    "BashTool": "terminal",
    "FileEditorTool": "file_editor",
    "str_replace_editor": "file_editor",
    "TaskTrackerTool": "task_tracker",
    "GlobTool": "glob",
    "GrepTool": "grep",
    "PlanningFileEditorTool": "planning_file_editor",
}
_TOOLS_BACK = {**_TOOL_ALIASES, **{theirs: ours for ours, theirs in TOOL_NAMES.items()}}

#: Fields of OpenHands' ``LLM`` that cowconv's :class:`~cowconv.LLM` honours (same names).
LLM_FIELDS = (
    "model",
    "api_key",
    "base_url",
    "usage_id",
    "temperature",
    "max_output_tokens",
    "timeout",
    "num_retries",
    "retry_min_wait",
    "retry_max_wait",
    "caching_prompt",
)
#: Secret-holding keys of OpenHands' agent JSON: masked wherever an agent is shown or kept.
SECRET_KEYS = frozenset(
    {"api_key", "aws_access_key_id", "aws_secret_access_key", "aws_session_token"}
)


def mask_secrets(data: Any) -> Any:
    """``data`` (JSON) with every non-null value under a :data:`SECRET_KEYS` key masked.

    >>> mask_secrets({"llm": {"api_key": "sk-1", "model": "m"}, "x": [{"aws_session_token": None}]})
    {'llm': {'api_key': '**********', 'model': 'm'}, 'x': [{'aws_session_token': None}]}
    """
    if isinstance(data, dict):
        return {
            key: (MASK if key in SECRET_KEYS and value is not None else mask_secrets(value))
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [mask_secrets(item) for item in data]
    return data


def tool_to_openhands(name: str) -> str:
    """OpenHands' name of a cowconv tool (unchanged when OpenHands has no such tool).

    >>> tool_to_openhands("terminal"), tool_to_openhands("BrowserToolSet")
    ('terminal', 'BrowserToolSet')
    """
    return TOOL_NAMES.get(name, name)


def tool_from_openhands(name: str) -> str | None:
    """cowconv's name of an OpenHands tool, ``None`` when cowconv has none (or has not
    registered it: a tool of this table whose module is not part of this cowconv).

    >>> [tool_from_openhands(name) for name in ("TerminalTool", "task_tracker", "X")]
    ['terminal', 'task_tracker', None]
    """
    ours = _TOOLS_BACK.get(name)
    return ours if ours is not None and ours in registered_tools() else None


def _llm_to_openhands(llm: dict[str, Any]) -> dict[str, Any]:
    return {key: llm[key] for key in LLM_FIELDS if key in llm}


def agent_to_openhands(agent_json: Mapping[str, Any]) -> dict[str, Any]:
    """OpenHands' ``Agent`` JSON for cowconv's agent JSON (an ``Agent.model_dump(mode="json")``).

    Secrets are written as they are in ``agent_json`` (dump with
    ``context={"expose_secrets": True}`` to send them).

    >>> agent_to_openhands({"llm": {"model": "openai/gpt-4o", "api_key": "sk-1"},
    ...                     "tools": [{"name": "terminal", "params": {}}], "system_prompt": "Hi",
    ...                     "condenser": None})["tools"]
    [{'name': 'terminal', 'params': {}}]
    """
    data: dict[str, Any] = {
        "kind": "Agent",
        "llm": _llm_to_openhands(dict(agent_json["llm"])),
        "tools": [
            {"name": tool_to_openhands(tool["name"]), "params": dict(tool.get("params") or {})}
            for tool in agent_json.get("tools") or ()
        ],
    }
    if agent_json.get("system_prompt") is not None:
        data["system_prompt"] = agent_json["system_prompt"]
    if agent_json.get("agent_context") is not None:
        data["agent_context"] = agent_json["agent_context"]  # the same JSON in both
    # The same JSON in both SDKs (a server's secrets as agent_json has them).
    for key in ("mcp_config", "filter_tools_regex"):
        if agent_json.get(key):
            data[key] = agent_json[key]
    condenser = agent_json.get("condenser")
    if condenser is not None:
        data["condenser"] = {
            "kind": "LLMSummarizingCondenser",
            "llm": _llm_to_openhands(dict(condenser["llm"])),
            "max_size": condenser.get("max_size", 120),
            "keep_first": condenser.get("keep_first", 4),
        }
    return data


def unsupported(field: str, reason: str) -> InvalidValueError:
    """The error for a field of OpenHands' JSON that cowconv cannot honour (a 422 on the server).

    >>> str(unsupported("hook_config", "hooks are not run"))
    'hook_config: hooks are not run'
    """
    return InvalidValueError(f"{field}: {reason}")


def _matches(pattern: str | None, name: str) -> bool:
    return pattern is None or re.fullmatch(pattern, name) is not None


def agent_from_openhands(data: Mapping[str, Any]) -> dict[str, Any]:
    """cowconv's agent JSON for an agent as OpenHands' SDK writes it (or as cowconv writes it).

    Honoured: ``llm`` (the :data:`LLM_FIELDS`), ``tools`` that cowconv has
    (others are left out: the agent gets fewer tools, never more),
    ``filter_tools_regex``, ``system_prompt``, ``agent_context``, ``mcp_config`` (its servers'
    tools are run), an ``LLMSummarizingCondenser``.
    Everything else is the caller's to keep. Raises :class:`Unsupported`
    (an :class:`~cowconv.InvalidValueError`) for another kind of agent.

    >>> agent_from_openhands({"kind": "Agent", "llm": {"model": "m", "stream": False},
    ...     "tools": [{"name": "TerminalTool"}, {"name": "BrowserToolSet"}], "system_prompt": None})
    {'llm': {'model': 'm'}, 'tools': [{'name': 'terminal', 'params': {}}]}
    >>> agent_from_openhands({"kind": "ACPAgent", "llm": {"model": "m"}})
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: agent.kind: cowconv runs OpenHands' 'Agent' only, ...
    """
    kind = data.get("kind", "Agent")
    if kind != "Agent":
        raise unsupported("agent.kind", f"cowconv runs OpenHands' 'Agent' only, not {kind!r}")
    llm = data.get("llm")
    if not isinstance(llm, Mapping):
        raise unsupported("agent.llm", "an agent needs an llm object")
    pattern = data.get("filter_tools_regex")
    if pattern is not None and not isinstance(pattern, str):
        raise unsupported("agent.filter_tools_regex", "must be a string")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as error:
            raise unsupported(
                "agent.filter_tools_regex", f"not a regular expression: {error}"
            ) from None
    agent: dict[str, Any] = {"llm": _llm_to_openhands(dict(llm))}
    tools = []
    if not isinstance(data.get("tools", []), list | None):
        raise unsupported("agent.tools", "a list of tools")
    for tool in data.get("tools") or ():
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise unsupported("agent.tools", "each tool is an object with a name")
        if not isinstance(tool.get("params", {}), Mapping | None):
            raise unsupported("agent.tools", "a tool's params are an object")
        ours = tool_from_openhands(tool["name"])
        if ours is not None and _matches(pattern, tool_to_openhands(ours)):
            tools.append({"name": ours, "params": dict(tool.get("params") or {})})
    agent["tools"] = tools
    if data.get("system_prompt") is not None:
        agent["system_prompt"] = data["system_prompt"]
    if data.get("agent_context") is not None:
        agent["agent_context"] = data["agent_context"]
    if data.get("mcp_config"):
        try:
            coerce_mcp_config(data["mcp_config"])
        except (InvalidTypeError, InvalidValueError) as error:
            raise unsupported("agent.mcp_config", str(error)) from None
        agent["mcp_config"] = data["mcp_config"]
    if pattern is not None:
        agent["filter_tools_regex"] = pattern
    condenser = data.get("condenser")
    if isinstance(condenser, Mapping) and condenser.get("kind", "LLMSummarizingCondenser") == (
        "LLMSummarizingCondenser"
    ):
        if not isinstance(condenser.get("llm"), Mapping):
            raise unsupported("agent.condenser.llm", "a condenser needs an llm object")
        agent["condenser"] = {
            "llm": _llm_to_openhands(dict(condenser["llm"])),
            **{key: condenser[key] for key in ("max_size", "keep_first") if key in condenser},
        }
    return agent


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _texts(parts: Any, what: str) -> str:
    """The text of OpenHands' content ``parts`` (text, a part, a list of parts, or null)."""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, Mapping):
        parts = [parts]
    if not isinstance(parts, list | None):
        raise InvalidValueError(f"{what}: text or a list of parts, not {type(parts).__name__}")
    return "".join(str(part.get("text", "")) for part in parts or () if isinstance(part, Mapping))


def _object(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]``, an object (``{}`` when absent or null); another type is refused."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        kind = data.get("kind")
        raise InvalidValueError(f"{kind}.{key}: an object, not {type(value).__name__}")
    return value


def event_to_openhands(data: Mapping[str, Any]) -> dict[str, Any]:
    """An event's JSON as OpenHands' SDK reads it (from cowconv's ``model_dump(mode="json")``).

    Message, pause and condensation events have the same shape; a system
    prompt's text becomes a text part (its tool specs are left out: OpenHands
    types them by its own tool classes); a tool call carries ``tool_call``
    and an ``MCPToolAction`` with the arguments; a tool result is the
    observation the tool recorded (an OpenHands-style tool's, such as
    ``FileEditorObservation`` or ``TaskTrackerObservation``), or else an
    ``MCPToolObservation`` holding the output as text.

    >>> event_to_openhands({"kind": "SystemPromptEvent", "id": "e1", "timestamp": "t",
    ...                     "source": "agent", "system_prompt": "Be brief.", "tools": []})
    {'kind': 'SystemPromptEvent', 'id': 'e1', 'timestamp': 't', 'source': 'agent', \
'system_prompt': {'type': 'text', 'text': 'Be brief.'}, 'tools': []}
    """
    event = {key: value for key, value in data.items() if value is not None}
    kind = event.get("kind")
    if kind == "SystemPromptEvent":
        event["system_prompt"] = _text_part(str(event.get("system_prompt", "")))
        event["tools"] = []
    elif kind == "ActionEvent":
        arguments = event.pop("arguments", {})
        thought = event.pop("thought", "")
        event["thought"] = [_text_part(thought)] if thought else []
        event["tool_call"] = {
            "id": event["tool_call_id"],
            "name": event["tool_name"],
            "arguments": json.dumps(arguments),
            "origin": "completion",
        }
        event["action"] = {"kind": "MCPToolAction", "data": arguments}
        event.setdefault("llm_response_id", "")
    elif kind == "ObservationEvent":
        output = str(event.pop("output", ""))
        exit_code = event.pop("exit_code", None)
        event.pop("extra", None)
        if not isinstance(event.get("observation"), Mapping):
            event["observation"] = {
                "kind": "MCPToolObservation",
                "content": [_text_part(output)],
                "is_error": exit_code not in (None, 0),
                "tool_name": event["tool_name"],
            }
        # An OpenHands-style tool's own observation (FileEditorObservation...) goes as it
        # was recorded, with the id of its action: OpenHands' client types it by its kind.
        event.setdefault("action_id", event["tool_call_id"])
    elif kind == "AgentErrorEvent":
        event.setdefault("tool_name", "")
        event.setdefault("tool_call_id", "")
    return event


_FAILURE_KINDS = frozenset(kind.value for kind in FailureKind)


def event_from_openhands(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """cowconv's JSON of an event OpenHands' SDK wrote, ``None`` for a kind cowconv lacks.

    The inverse of :func:`event_to_openhands` for the kinds cowconv has; other
    kinds (``ConversationStateUpdateEvent``, hook and token events) are not
    part of a cowconv history. A part of the wrong type (a ``tool_call`` or
    ``observation`` that is not an object, content that is not text or
    parts) is an :class:`~cowconv.InvalidValueError` naming it; arguments
    that are not JSON are kept as they came, under ``"arguments"``.

    >>> call = {"id": "c1", "name": "terminal", "arguments": '{"command": "ls"}'}
    >>> event_from_openhands({"kind": "ActionEvent", "id": "e2", "timestamp": "t",
    ...     "source": "agent", "thought": [{"type": "text", "text": "ok"}],
    ...     "tool_name": "terminal", "tool_call_id": "c1", "tool_call": call})["arguments"]
    {'command': 'ls'}
    >>> event_from_openhands({"kind": "TokenEvent", "id": "e3", "source": "agent"}) is None
    True
    """
    if not isinstance(data, Mapping):
        raise InvalidValueError(f"an event is an object, not {type(data).__name__}")
    kind = data.get("kind")
    common = {
        key: data[key]
        for key in ("kind", "id", "timestamp", "source", "parent_id")
        if data.get(key) is not None
    }
    if kind == "MessageEvent":
        keep = ("llm_message", "llm_response_id", "activated_skills", "extended_content", "sender")
        return {**common, **{key: data[key] for key in keep if data.get(key) is not None}}
    if kind == "SystemPromptEvent":
        system_prompt = _texts(data.get("system_prompt"), f"{kind}.system_prompt")
        if data.get("dynamic_context") is not None:
            # The agent context's part of the system message (OpenHands' second block).
            common["dynamic_context"] = data["dynamic_context"]
        return {**common, "system_prompt": system_prompt}
    if kind == "ActionEvent":
        call = _object(data, "tool_call")
        raw = call.get("arguments") or "{}"
        try:
            arguments = raw if isinstance(raw, Mapping) else decode_json(raw)
        except (ValueError, TypeError):  # kept as it came
            arguments = {"arguments": raw}
        if not isinstance(arguments, dict):
            arguments = {"arguments": arguments}
        return {
            **common,
            "tool_name": data.get("tool_name", call.get("name", "")),
            "tool_call_id": data.get("tool_call_id", call.get("id", "")),
            "arguments": arguments,
            "thought": _texts(data.get("thought"), f"{kind}.thought"),
            "llm_response_id": data.get("llm_response_id") or None,
        }
    if kind == "ObservationEvent":
        observation = _object(data, "observation")
        exit_code = observation.get("exit_code")
        return {
            **common,
            "tool_name": data.get("tool_name", ""),
            "tool_call_id": data.get("tool_call_id", ""),
            "output": _texts(observation.get("content"), f"{kind}.observation.content"),
            "exit_code": exit_code if isinstance(exit_code, int) else None,
        }
    if kind == "AgentErrorEvent":
        return {
            **common,
            "error": str(data.get("error", "")),
            "tool_name": data.get("tool_name") or None,
            "tool_call_id": data.get("tool_call_id") or None,
        }
    if kind == "PauseEvent":
        return common
    if kind == "ConversationErrorEvent":
        error = {**common, "code": str(data.get("code", "")), "detail": str(data.get("detail", ""))}
        classification = data.get("classification")
        # A kind this cowconv does not know is derived again from code and detail.
        if isinstance(classification, Mapping) and classification.get("kind") in _FAILURE_KINDS:
            error["classification"] = dict(classification)
        return error
    if kind == "Condensation":
        keep_condensation = ("forgotten_event_ids", "summary", "summary_offset", "llm_response_id")
        return {
            **common,
            **{key: data[key] for key in keep_condensation if data.get(key) is not None},
        }
    return None
