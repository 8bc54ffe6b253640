"""Incremental rendering: equal to a from-scratch rendering on every history, forks included."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    ActionEvent,
    Agent,
    AgentErrorEvent,
    Conversation,
    Event,
    EventLog,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
    Tool,
)
from cowconv.agent.messages import (
    _assistant_message,
    _tool_message,
    build_messages,
    render,
)
from cowconv.core.changes import last_system_prompt
from cowconv.core.message import chat_content
from tests.strategies import paired_events


def reference_messages(history: list[Event]) -> list[dict[str, Any]]:
    """The rendering rules applied to a whole history at once (0.1.0's algorithm)."""
    results: dict[str, collections.deque[Event]] = {}
    for event in history:
        if isinstance(event, ObservationEvent) or (
            isinstance(event, AgentErrorEvent) and event.tool_call_id is not None
        ):
            results.setdefault(event.tool_call_id, collections.deque()).append(event)  # type: ignore[arg-type]
    prompts = [e for e in history if isinstance(e, SystemPromptEvent)]
    prompt = prompts[-1].system_prompt if prompts else None
    messages: list[dict[str, Any]] = [{"role": "system", "content": prompt}] if prompt else []
    position = 0
    while position < len(history):
        event = history[position]
        position += 1
        if isinstance(event, MessageEvent) and event.role != "tool":
            messages.append({"role": event.role, "content": chat_content(event.content)})
        elif isinstance(event, ActionEvent):
            group = [event]
            while (
                event.llm_response_id is not None
                and position < len(history)
                and isinstance(history[position], ActionEvent)
                and history[position].llm_response_id == event.llm_response_id  # type: ignore[attr-defined]
            ):
                group.append(history[position])  # type: ignore[arg-type]
                position += 1
            messages.append(_assistant_message(group))
            for action in group:
                queue = results.get(action.tool_call_id)
                answer = queue.popleft() if queue else None
                messages.append(_tool_message(action.tool_call_id, answer))
    return messages


# A history is grown by steps; each step appends events to one of the logs made so far
# (a fork when that log was already extended), or takes a prefix of one (fork from event).
steps = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.lists(paired_events, max_size=4)),
    max_size=12,
)


def grown(plan: list[tuple[int, int, list[Event]]], tag: str) -> Iterator[EventLog]:
    """Each log of a random tree: a prefix of an earlier log, or an earlier log plus new events."""
    logs = [EventLog()]
    for pick, cut, new in plan:
        base = logs[pick % len(logs)]
        if not new:
            log = base.take(cut % (len(base) + 1))
        else:
            log = base.extend(
                event.model_copy(update={"id": f"{tag}{len(logs)}-{i}"})
                for i, event in enumerate(new)
            )
        logs.append(log)
        yield log


class TestRender:
    @settings(max_examples=300, deadline=None)
    @given(steps)
    def test_equals_a_full_rendering_on_every_branch(
        self, plan: list[tuple[int, int, list[Event]]]
    ) -> None:
        """Every log of a random tree of appends, forks and prefixes renders as from scratch."""
        logs = [EventLog()]
        for log in grown(plan, "e"):
            logs.append(log)
            # Render in the order a suite would: each new log right away, so prefixes are cached.
            assert build_messages(log) == reference_messages(list(log))
        for log in logs:
            assert build_messages(log) == reference_messages(list(log))

    @settings(max_examples=200, deadline=None)
    @given(steps)
    def test_the_last_system_prompt_is_found_on_every_branch(
        self, plan: list[tuple[int, int, list[Event]]]
    ) -> None:
        """The runner's cached lookup of the current system prompt equals a full scan."""
        logs = [EventLog()]
        for log in grown(plan, "p"):
            logs.append(log)
            prompts = [e for e in log if isinstance(e, SystemPromptEvent)]
            assert last_system_prompt(log) == (prompts[-1] if prompts else None)
        for log in logs:
            prompts = [e for e in log if isinstance(e, SystemPromptEvent)]
            assert last_system_prompt(log) == (prompts[-1] if prompts else None)

    def test_a_fork_continues_from_its_source_rendering(self) -> None:
        """A fork's first render reuses the source's: only the new event is rendered."""
        source = EventLog(
            MessageEvent(source="user", role="user", content=str(i)) for i in range(100)
        )
        before = render(source)
        fork = source.append(MessageEvent(source="user", role="user", content="new"))
        after = render(fork)
        assert after.length == 101
        # Structure shared: the source's messages are a prefix of the fork's, same objects.
        assert all(a is b for a, b in zip(before.messages, after.messages, strict=False))
        other = source.append(MessageEvent(source="user", role="user", content="other"))
        assert render(other).messages[-1]["content"] == "other"
        assert render(fork).messages[-1]["content"] == "new"

    def test_a_result_recorded_later_replaces_the_interrupted_message(self) -> None:
        """A call rendered before its result gets the result once it is recorded."""
        call = ActionEvent(tool_name="t", tool_call_id="c1", arguments={}, llm_response_id="r")
        log = EventLog([call])
        assert render(log).messages[-1]["content"].startswith("Error: this tool call")
        done = log.append(ObservationEvent(tool_name="t", tool_call_id="c1", output="ok"))
        assert render(done).messages[-1]["content"] == "ok"
        assert render(log).messages[-1]["content"].startswith("Error: this tool call")


class TestSharedMessagesStayUnchanged:
    @pytest.mark.parametrize("model", ["openai/stub-model", "anthropic/claude-sonnet-4-5-20250929"])
    def test_litellm_does_not_change_the_messages_it_is_handed(
        self, caching_stub, tmp_path, model
    ) -> None:
        """After real calls (tool calls, cache marks) the cached rendering is still exact."""
        llm = LLM(model=model, base_url=caching_stub.base_url, api_key="k")
        with Conversation(
            agent=Agent(llm=llm, tools=[Tool(name="terminal")]), workspace=tmp_path
        ) as conversation:
            conversation.send_message("Run `echo hi` and `ls` please.")
            conversation.run()
            conversation.send_message("again")
            conversation.run()
            events = conversation.state.events
            assert render(events).to_list() == reference_messages(list(events))
