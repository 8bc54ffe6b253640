"""Hypothesis strategies shared by the test suite."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from cowconv import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    ImageContent,
    Message,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    SystemPromptEvent,
    TextContent,
)

texts = st.text(max_size=20)
keys = st.text(min_size=1, max_size=8)


# A named function, not a lambda: hypothesis describes ``extend`` in a message when a draw
# passes max_leaves, and for a lambda that means ast.parse of this file, which CPython 3.11.7
# can fail with "SystemError: AST constructor recursion depth mismatch" after a test met a
# RecursionError (a fresh-clone CI run failed test_remote on it).
def json_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists and objects of ``children`` (``extend`` of :data:`json_values`)."""
    return st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=3)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    json_containers,
    max_leaves=8,
)
json_objects = st.dictionaries(keys, json_values, max_size=4)

# What a model may send as a tool call's arguments: JSON of any shape (objects that fit a
# {"name": str, "times": int} tool or not), JSON's NaN, escapes of lone surrogates, or any text.
tool_argument_texts = st.one_of(
    st.builds(json.dumps, json_values),
    st.builds(
        json.dumps,
        st.fixed_dictionaries(
            {"name": texts | st.integers()}, optional={"times": st.integers(-1, 3) | texts}
        ),
    ),
    st.sampled_from(["", "  ", "NaN", '{"name": NaN}', '{"name": "\\ud800"}', '{"name": "a"} x']),
    st.text(max_size=30),
)
str_maps = st.dictionaries(keys, texts, max_size=4)

contents = st.lists(
    st.builds(TextContent, text=texts)
    | st.builds(ImageContent, image_urls=st.lists(texts, max_size=2).map(tuple)),
    max_size=3,
).map(tuple)


def _message(source: str, role: str, content: tuple[TextContent | ImageContent, ...]) -> Event:
    return MessageEvent(source=source, llm_message=Message(role=role, content=content))


message_events = st.builds(
    _message,
    source=st.sampled_from(["user", "agent", "environment", "hook"]),
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=contents,
)

events: st.SearchStrategy[Event] = st.one_of(
    message_events,
    st.builds(SystemPromptEvent, system_prompt=texts, tools=st.lists(json_objects, max_size=2)),
    st.builds(
        ActionEvent,
        tool_name=keys,
        tool_call_id=keys,
        arguments=json_objects,
        thought=texts,
        llm_response_id=st.none() | keys,
    ),
    st.builds(
        ObservationEvent,
        tool_name=keys,
        tool_call_id=keys,
        output=texts,
        exit_code=st.none() | st.integers(-255, 255),
        extra=json_values,
    ),
    st.builds(AgentErrorEvent, error=texts, tool_call_id=st.none() | keys),
    st.builds(PauseEvent),
)

# Events whose tool calls and results pair up often: few ids, few response ids.
_call_ids = st.sampled_from(["c1", "c2", "c3"])
_response_ids = st.none() | st.sampled_from(["r1", "r2"])

paired_events: st.SearchStrategy[Event] = st.one_of(
    st.builds(
        _message,
        source=st.just("user"),
        role=st.sampled_from(["user", "assistant", "system", "tool"]),
        content=contents,
    ),
    st.builds(SystemPromptEvent, system_prompt=texts),
    st.builds(
        ActionEvent,
        tool_name=st.just("terminal"),
        tool_call_id=_call_ids,
        arguments=st.sampled_from([{}, {"command": "ls"}, {"__invalid_json__": "{x"}]),
        thought=st.sampled_from(["", "hmm"]),
        llm_response_id=_response_ids,
    ),
    st.builds(
        ObservationEvent,
        tool_name=st.just("terminal"),
        tool_call_id=_call_ids,
        output=texts,
        exit_code=st.none() | st.integers(0, 2),
    ),
    st.builds(AgentErrorEvent, error=texts, tool_call_id=st.none() | _call_ids),
    st.builds(PauseEvent),
)
"""Events of histories where calls, results and response groups interleave in every way."""


@st.composite
def agent_steps(draw: st.DrawFn) -> list[Event]:
    """One step of a real run: a user message, or one LLM response's calls and their results.

    Results follow their calls, possibly after a pause; a call may stay unanswered.
    """
    if draw(st.booleans()):
        return [MessageEvent(source="user", role="user", content=draw(texts))]
    calls = [
        ActionEvent(tool_name="t", tool_call_id=f"c{i}", arguments={}, llm_response_id="r")
        for i in range(draw(st.integers(1, 3)))
    ]
    results: list[Event] = [
        ObservationEvent(tool_name="t", tool_call_id=call.tool_call_id, output=f"out {i}")
        for i, call in enumerate(calls)
        if draw(st.booleans()) or i == 0
    ]
    middle: list[Event] = [PauseEvent()] if draw(st.booleans()) else []
    return [*calls, *middle, *results]


# An agent's MCP servers as JSON (OpenHands' mcp_config): local processes and remote URLs,
# with secrets, credentials and switched-off servers.
mcp_credentials = st.one_of(
    st.fixed_dictionaries({"strategy": st.just("bearer"), "value": texts}),
    st.fixed_dictionaries({"strategy": st.just("basic"), "username": texts, "password": texts}),
    st.fixed_dictionaries({"strategy": st.just("header"), "headers": str_maps}),
    st.fixed_dictionaries({"strategy": st.just("oauth2")}),
)
mcp_server_json = st.one_of(
    st.fixed_dictionaries(
        {"command": keys},
        optional={"args": st.lists(texts, max_size=3), "env": str_maps, "enabled": st.booleans()},
    ),
    st.fixed_dictionaries(
        {"url": keys.map(lambda path: f"http://127.0.0.1/{path}")},
        optional={
            "transport": st.sampled_from(["http", "streamable-http", "sse"]),
            "auth": mcp_credentials,
            "timeout": st.floats(min_value=0.1, max_value=600),
        },
    ),
)
mcp_configs = st.dictionaries(keys, mcp_server_json, max_size=3)
