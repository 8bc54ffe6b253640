"""Conversation callbacks: OpenHands' AsyncCallbackWrapper, callback type and BaseConversation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import cowconv
from cowconv import AsyncCallbackWrapper, BaseConversation, Conversation, Message, MessageEvent
from cowconv.core.events import Event
from cowconv.testing import TestLLM


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, stopped and closed after the test."""
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(timeout=60)
    running.close()


class TestAsyncCallbackWrapper:
    def test_a_conversation_feeds_an_async_callback_every_event_in_order(
        self, loop: asyncio.AbstractEventLoop, tmp_path: Path
    ):
        """Each event a run records reaches the coroutine, on the loop's thread, in order."""
        seen: list[str] = []
        threads: set[int] = set()

        async def record(event: Event) -> None:
            threads.add(threading.get_ident())
            seen.append(event.id)

        wrapper = AsyncCallbackWrapper(record, loop)
        llm = TestLLM.from_messages([Message(role="assistant", content="Done.")])
        conversation = Conversation(
            agent=cowconv.Agent(llm=llm), workspace=tmp_path, callbacks=[wrapper]
        )
        conversation.send_message("hi")
        conversation.run()
        wrapper.wait_for_pending(timeout=60)
        assert seen == [event.id for event in conversation.state.events]
        assert threads and threading.get_ident() not in threads

    def test_waiting_past_the_timeout_raises(self, loop: asyncio.AbstractEventLoop):
        """A callback still running after ``timeout`` makes wait_for_pending raise TimeoutError."""
        release = threading.Event()

        async def slow(event: Event) -> None:
            while not release.is_set():
                await asyncio.sleep(0.01)

        wrapper = AsyncCallbackWrapper(slow, loop)
        wrapper(MessageEvent(role="user", content="x"))
        with pytest.raises(TimeoutError):
            wrapper.wait_for_pending(timeout=0.05)
        release.set()
        wrapper.wait_for_pending(timeout=60)

    def test_a_failing_callback_does_not_reach_the_caller(self, loop: asyncio.AbstractEventLoop):
        """An exception in the coroutine stays in its future: the caller and the wait go on."""

        async def broken(event: Event) -> None:
            raise RuntimeError("callback failed")

        wrapper = AsyncCallbackWrapper(broken, loop)
        wrapper(MessageEvent(role="user", content="x"))
        wrapper.wait_for_pending(timeout=60)

    def test_nothing_is_scheduled_on_a_loop_that_is_not_running(self):
        """As in OpenHands' SDK, an event arriving while the loop is stopped is dropped."""
        calls: list[Event] = []

        async def record(event: Event) -> None:
            calls.append(event)

        stopped = asyncio.new_event_loop()
        try:
            wrapper = AsyncCallbackWrapper(record, stopped)
            wrapper(MessageEvent(role="user", content="x"))
            wrapper.wait_for_pending(timeout=1)
        finally:
            stopped.close()
        assert calls == []


class TestNames:
    def test_base_conversation_is_the_conversation_class(self, tmp_path: Path):
        """Code annotated or checked with OpenHands' BaseConversation takes cowconv's."""
        conversation = Conversation(
            agent=cowconv.Agent(llm=cowconv.LLM(model="openai/gpt-4o")), workspace=tmp_path
        )
        assert isinstance(conversation, BaseConversation)
        assert isinstance(conversation.fork(), BaseConversation)

    def test_conversation_callback_type_is_the_event_callback(self):
        """ConversationCallbackType is cowconv's EventCallback (one event in, nothing out)."""
        assert cowconv.ConversationCallbackType == cowconv.EventCallback
