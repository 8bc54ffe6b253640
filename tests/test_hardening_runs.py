"""Callback order under reentrancy and navigate during a run, on every backend.

Real parts: the stub LLM server behind litellm's HTTP path, real terminal
commands, a SQLite file read back by another process, an agent server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from cowconv import (
    Agent,
    Conversation,
    ConversationConflictError,
    CowconvError,
    Event,
    ExecutionStatus,
    MessageEvent,
    ObservationEvent,
)
from cowconv.testing import StubLLMServer, StubReply
from tests.conftest import Backend


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class TestCallbackOrderUnderReentrancy:
    def test_callbacks_that_record_more_see_history_order(
        self, backend: Backend, stub_agent: Agent
    ) -> None:
        """A callback that sends messages from inside callbacks (two levels deep): every
        callback sees each event once, in history order, the nested ones after their cause."""
        seen: dict[str, list[str]] = {"first": [], "second": []}
        conversation: Conversation
        replies = {"one": "two", "two": "three"}

        def answer(event: Event) -> None:
            seen["first"].append(event.id)
            if isinstance(event, MessageEvent) and event.text in replies:
                conversation.send_message(replies[event.text])

        def record(event: Event) -> None:
            seen["second"].append(event.id)

        conversation = backend.new(stub_agent, callbacks=[answer, record])
        conversation.send_message("one")
        history = [event.id for event in conversation.state.events]
        texts = [e.text for e in conversation.state.events if isinstance(e, MessageEvent)]
        assert texts == ["one", "two", "three"]
        assert seen["first"] == history and seen["second"] == history
        assert [e.id for e in backend.reload(conversation).events] == history

    def test_a_callback_that_sends_during_a_run(
        self, backend: Backend, stub: StubLLMServer, stub_agent: Agent
    ) -> None:
        """During run(), a callback that sends a message when it sees an observation: the
        message is recorded after that observation, seen in history order by every callback,
        and the run's next step sees it."""
        stub.script(
            StubReply.tool_call("terminal", command="echo hi"),
            StubReply.text("answered"),
        )
        seen: list[str] = []
        conversation: Conversation

        def react(event: Event) -> None:
            if isinstance(event, ObservationEvent):
                conversation.send_message("and also this")

        def record(event: Event) -> None:
            seen.append(event.id)

        conversation = backend.new(stub_agent, callbacks=[react, record])
        conversation.send_message("go")
        conversation.run()
        events = conversation.state.events
        kinds = [type(event).__name__ for event in events]
        observation = kinds.index("ObservationEvent")
        sent = next(
            position
            for position, event in enumerate(events)
            if isinstance(event, MessageEvent) and event.text == "and also this"
        )
        if backend.kind == "remote":
            # The callback runs in the client while the server's run goes on: the message
            # lands after the observation, wherever the run then is.
            assert sent > observation
        else:
            assert sent == observation + 1
            assert "and also this" in str(stub.requests[-1].messages)
        assert seen == [event.id for event in events]  # each event once, in history order


class TestNavigateDuringARun:
    def test_navigate_while_running_is_refused_and_changes_nothing(
        self, backend: Backend, stub: StubLLMServer, stub_agent: Agent
    ) -> None:
        """navigate_to during a run: a CowconvError (a conflict), the run goes on undisturbed,
        and after it navigate_to works."""
        stub.script(StubReply.text("slow answer", delay=3.0))
        conversation = backend.new(stub_agent)
        first = conversation.send_message("one")
        conversation.send_message("two")
        failures: list[BaseException] = []

        def run() -> None:
            try:
                conversation.run()
            except BaseException as error:  # pragma: no cover - reported below
                failures.append(error)

        runner = threading.Thread(target=run)
        runner.start()
        wait_for(
            lambda: conversation.state.execution_status is ExecutionStatus.RUNNING,
            "the run to start",
        )
        before = [event.id for event in conversation.state.events]
        with pytest.raises(CowconvError) as raised:
            conversation.navigate_to(first.id)
        assert isinstance(raised.value, ConversationConflictError) or "409" in str(raised.value)
        assert [event.id for event in conversation.state.events][: len(before)] == before
        runner.join(60)
        assert not runner.is_alive() and failures == []
        last = conversation.state.events[-1]
        assert isinstance(last, MessageEvent) and last.text == "slow answer"
        conversation.navigate_to(first.id)
        assert conversation.state.branch[-1].id == first.id
        assert backend.reload(conversation).branch[-1].id == first.id
