"""The conversations the suite forks: realistic agent events, built once per run.

A history cycles through four kinds of event, like an agent working on a
repository: a user message, a tool call (``ActionEvent`` with arguments), its
observation (~500 bytes of output) and an assistant message. Every event has
its own content (no shared strings or containers), so a deep copy cannot get
cheaper by memoising shared parts. One JSON event is ~300–530 bytes.

The longest history is built once; shorter ones are its prefixes, and each
size's ``EventLog`` is built once from that list (not by ``n`` appends).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cowconv import (
    LLM,
    ActionEvent,
    Agent,
    Conversation,
    Event,
    EventLog,
    MessageEvent,
    ObservationEvent,
    Tool,
)
from cowconv.stores import Store

EVENT_MIX = (
    "user MessageEvent, ActionEvent (terminal command, 2 arguments, a thought), "
    "ObservationEvent (~430 characters of output), assistant MessageEvent — repeated"
)


def make_event(position: int) -> Event:
    """The event at ``position`` of a benchmark history."""
    kind = position % 4
    if kind == 0:
        return MessageEvent(
            source="user",
            role="user",
            content=f"Please look at src/module_{position}.py and fix failing test {position}.",
        )
    if kind == 1:
        return ActionEvent(
            tool_name="terminal",
            tool_call_id=f"call_{position}",
            arguments={"command": f"pytest -q tests/test_{position}.py", "timeout": 60},
            thought=f"Let me run the tests for module {position} first.",
        )
    if kind == 2:
        return ObservationEvent(
            tool_name="terminal",
            tool_call_id=f"call_{position - 1}",
            output=f"FAILED tests/test_{position}.py::test_case - AssertionError\n" * 8,
            exit_code=1,
        )
    return MessageEvent(
        source="agent",
        role="assistant",
        content=f"The test fails because of an off-by-one error at line {position}; fixing it.",
    )


def make_agent() -> Agent:
    return Agent(
        llm=LLM(model="openai/gpt-4o", api_key="sk-benchmark", usage_id="main"),
        tools=(Tool(name="terminal"),),
    )


class Workload:
    """Events, logs and conversations of each size, built on first use and cached."""

    def __init__(self, workspace: str | os.PathLike[str] = ".") -> None:
        self._events: list[Event] = []
        self._logs: dict[int, EventLog] = {}
        self._workspace = os.fspath(workspace)
        self._agent = make_agent()
        self.build_seconds: dict[str, float] = {}

    @property
    def agent(self) -> Agent:
        return self._agent

    def events(self, size: int, on_progress: Callable[[int], None] | None = None) -> list[Event]:
        """The first ``size`` events (a new list; the events are shared)."""
        events = self._events
        if len(events) < size:
            step = max(1, size // 50)
            for position in range(len(events), size):
                events.append(make_event(position))
                if on_progress is not None and position % step == 0:
                    on_progress(position)
        return events[:size]

    def log(self, size: int) -> EventLog:
        log = self._logs.get(size)
        if log is None:
            log = self._logs[size] = EventLog(self.events(size))
        return log

    def conversation(self, size: int, **options: Any) -> Conversation:
        """A conversation whose history is the ``size``-event log, without ``size`` appends."""
        conversation = Conversation(agent=self._agent, workspace=self._workspace, **options)
        log = self.log(size)
        conversation._commit(lambda state: state._replace(events=log))
        return conversation

    def saved_conversation(self, size: int, store: Store) -> Conversation:
        """The ``size``-event conversation saved into ``store`` (its history written once)."""
        conversation = Conversation(agent=self._agent, workspace=self._workspace, store=store)
        log = self.log(size)
        conversation._commit(lambda state: state._replace(events=log))
        return conversation

    def drop(self, size: int) -> None:
        """Forget the log of ``size`` (the events stay) to bound memory."""
        self._logs.pop(size, None)
