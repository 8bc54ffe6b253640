"""Conversation methods OpenHands' examples call: ``arun``, ``ask_agent``, ``stuck_detector``.

Real parts: the stub LLM over litellm's HTTP path, real shell commands in the
terminal tool, the scripted :class:`cowconv.testing.TestLLM` in process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cowconv import (
    Conversation,
    ConversationRunError,
    ExecutionStatus,
    InvalidTypeError,
    ObservationEvent,
    PauseEvent,
)
from cowconv.testing import StubReply


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


async def wait_async(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def long_command(marker: Path) -> StubReply:
    """A tool call that says it started, then would take a minute."""
    return StubReply.tool_call("terminal", command=f"touch {marker}; sleep 60; echo never")


class TestArun:
    def test_arun_runs_to_the_answer(self, stub, stub_agent, tmp_path):
        """arun() runs the agent's steps (a real command, then the answer) and finishes."""
        stub.script(
            StubReply.tool_call("terminal", command="echo hello-from-arun"),
            StubReply.text("all done"),
        )
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("go")
        asyncio.run(asyncio.wait_for(conversation.arun(), 120))
        state = conversation.state
        assert state.execution_status is ExecutionStatus.FINISHED
        observation = next(e for e in state.events if isinstance(e, ObservationEvent))
        assert "hello-from-arun" in observation.output
        assert state.events[-1].text == "all done"

    def test_the_loop_stays_free_while_arun_runs(self, stub, stub_agent, tmp_path):
        """Another task runs while arun() waits on a command, then interrupt() ends the run."""
        marker = tmp_path / "started"
        stub.script(long_command(marker), StubReply.text("not asked"))
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("go")
        ticks: list[int] = []

        async def main() -> None:
            run = asyncio.create_task(conversation.arun())
            await wait_async(marker.exists, "the command to start")
            for tick in range(3):  # the loop is not blocked by the run
                ticks.append(tick)
                await asyncio.sleep(0)
            conversation.interrupt()
            await asyncio.wait_for(run, 60)

        asyncio.run(main())
        assert ticks == [0, 1, 2]
        state = conversation.state
        assert state.execution_status is ExecutionStatus.PAUSED
        assert isinstance(state.events[-1], PauseEvent)
        assert stub.pending == 1  # no LLM call after the interrupt

    def test_cancelling_the_task_interrupts_the_run(self, stub, stub_agent, tmp_path):
        """Cancelling the task awaiting arun() kills the command and leaves the run paused."""
        marker = tmp_path / "started"
        stub.script(long_command(marker), StubReply.text("not asked"))
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("go")

        async def main() -> bool:
            run = asyncio.create_task(conversation.arun())
            await wait_async(marker.exists, "the command to start")
            run.cancel()
            await asyncio.wait_for(run, 60)  # absorbed, as OpenHands' SDK: returns
            return run.cancelled()

        assert asyncio.run(main()) is False
        state = conversation.state
        assert state.execution_status is ExecutionStatus.PAUSED
        observation = next(e for e in state.events if isinstance(e, ObservationEvent))
        assert "never" not in observation.output and observation.exit_code != 0
        assert stub.pending == 1
        # resumable: the next run answers from the history
        conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.FINISHED

    def test_cancelled_before_the_run_starts(self, stub, stub_agent, tmp_path):
        """A task cancelled at once still stops the run: it never runs the command to its end."""
        marker = tmp_path / "started"
        stub.script(long_command(marker), StubReply.text("not asked"))
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("go")

        async def main() -> None:
            run = asyncio.create_task(conversation.arun())
            await asyncio.sleep(0)  # let it start its thread
            run.cancel()
            await asyncio.wait_for(run, 60)

        asyncio.run(main())
        state = conversation.state
        assert state.execution_status in (ExecutionStatus.PAUSED, ExecutionStatus.IDLE)
        assert not any("never" in e.output for e in state.events if isinstance(e, ObservationEvent))

    def test_a_failed_run_raises(self, stub, stub_agent, tmp_path):
        """A run that ends in error raises ConversationRunError from arun(), as from run()."""
        stub.script(*[StubReply.error(400, "bad request")] * 5)
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("go")
        with pytest.raises(ConversationRunError):
            asyncio.run(asyncio.wait_for(conversation.arun(), 120))
        assert conversation.state.execution_status is ExecutionStatus.ERROR


class TestAskAgent:
    def test_answers_over_the_history_and_records_nothing(self, stub, stub_agent, tmp_path):
        """ask_agent() sends the history plus the question; no event or status changes."""
        stub.script(StubReply.text("first answer"), StubReply.text("the summary"))
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("say something")
        conversation.run()
        before = conversation.state
        assert conversation.ask_agent("Summarize the activity so far.") == "the summary"
        assert conversation.state is before  # nothing recorded
        sent = stub.requests[-1].messages
        assert any("say something" in str(m["content"]) for m in sent)
        assert any("first answer" in str(m["content"]) for m in sent)
        assert "Summarize the activity so far." in str(sent[-1]["content"])

    def test_while_a_run_goes_in_another_thread(self, stub, stub_agent, tmp_path):
        """ask_agent() answers during a run in a thread; the run's history is untouched."""
        marker = tmp_path / "started"
        stub.script(
            StubReply.tool_call("terminal", command=f"touch {marker}; sleep 2; echo slept"),
            StubReply.text("side answer"),
            StubReply.text("run done"),
        )
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("go")
        runner = threading.Thread(target=conversation.run)
        runner.start()
        wait_for(marker.exists, "the command to start")
        assert conversation.ask_agent("How is it going?") == "side answer"
        runner.join(60)
        assert not runner.is_alive()
        state = conversation.state
        assert state.execution_status is ExecutionStatus.FINISHED
        assert state.events[-1].text == "run done"
        assert not any("How is it going?" in str(getattr(e, "text", "")) for e in state.events)

    def test_bad_question(self, stub_agent, tmp_path):
        """A question that is not a str is an InvalidTypeError, before any call."""
        conversation = Conversation(stub_agent, tmp_path)
        with pytest.raises(InvalidTypeError):
            conversation.ask_agent(42)  # type: ignore[arg-type]
