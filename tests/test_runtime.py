"""Conversation.run() / pause(): the agent loop end to end, through litellm to the stub."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from cowconv import (
    LLM,
    ActionEvent,
    Agent,
    AgentErrorEvent,
    Conversation,
    ConversationRunError,
    ExecutionStatus,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    SystemPromptEvent,
    Tool,
    ToolDefinition,
    ToolResult,
    register_tool,
)
from cowconv.agent.runtime import build_messages
from cowconv.testing import StubLLMServer, StubReply


class CrashParams(BaseModel):
    reason: str = "boom"


@register_tool
class CrashTool(ToolDefinition[CrashParams]):
    """A tool that always raises (for tests)."""

    name = "test-crash"
    Params = CrashParams

    def execute(self, params: CrashParams) -> ToolResult:
        raise RuntimeError(params.reason)


def kinds(conversation: Conversation) -> list[str]:
    return [event.kind for event in conversation.state.events]


def wait_until(condition, what: str) -> None:
    """Poll for a condition another thread will make true (bounded, not a speed check)."""
    for _ in range(2000):
        if condition():
            return
        time.sleep(0.005)
    raise AssertionError(f"gave up waiting until {what}")


@pytest.fixture
def conversation(stub_agent: Agent, tmp_path: Path) -> Conversation:
    return Conversation(agent=stub_agent, workspace=tmp_path)


def start_run(conversation: Conversation) -> threading.Thread:
    thread = threading.Thread(target=conversation.run)
    thread.start()
    return thread


class TestToolLoop:
    def test_tool_call_observation_answer(self, conversation, stub, tmp_path):
        """A tool call runs in the workspace, its output reaches the model, the answer ends it."""
        (tmp_path / "report.txt").write_text("sales\n")
        conversation.send_message("Run `cat report.txt` please.")
        conversation.run()
        assert kinds(conversation) == [
            "SystemPromptEvent",
            "MessageEvent",
            "ActionEvent",
            "ObservationEvent",
            "MessageEvent",
        ]
        observation = conversation.state.events[3]
        assert isinstance(observation, ObservationEvent)
        assert (observation.output, observation.exit_code) == ("sales\n", 0)
        assert conversation.state.events[-1].text.startswith("The terminal printed:\nsales")
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        second = stub.requests[1].messages
        assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
        assert second[3]["content"] == "sales\n\n[exit code: 0]"
        assert second[3]["tool_call_id"] == second[2]["tool_calls"][0]["id"]

    def test_parallel_tool_calls(self, conversation, stub):
        """Several calls in one answer all run, share llm_response_id, form one message."""
        conversation.send_message("Run `echo one` and `echo two`.")
        conversation.run()
        actions = [e for e in conversation.state.events if isinstance(e, ActionEvent)]
        outputs = [e.output for e in conversation.state.events if isinstance(e, ObservationEvent)]
        assert [a.arguments["command"] for a in actions] == ["echo one", "echo two"]
        assert len({a.llm_response_id for a in actions}) == 1
        assert outputs == ["one\n", "two\n"]
        second = stub.requests[1].messages
        assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
        call_ids = [call["id"] for call in second[2]["tool_calls"]]
        assert [m["tool_call_id"] for m in second[3:]] == call_ids

    def test_system_prompt_comes_first_and_once(self, conversation, stub):
        """The system prompt is recorded once and is the first message of every call."""
        conversation.send_message("Hello")
        conversation.run()
        conversation.send_message("Again")
        conversation.run()
        prompts = [e for e in conversation.state.events if isinstance(e, SystemPromptEvent)]
        assert len(prompts) == 1
        assert prompts[0].tools[0]["function"]["name"] == "terminal"
        for request in stub.requests:
            assert request.messages[0] == {
                "role": "system",
                "content": conversation.agent.system_prompt,
            }
            assert request.body["tools"][0]["function"]["name"] == "terminal"

    def test_a_new_agent_records_its_prompt(self, conversation, stub, stub_llm):
        """A fork with another system prompt records it, and the model sees the new one."""
        conversation.send_message("Hello")
        conversation.run()
        other = Agent(llm=stub_llm, system_prompt="Answer in French.")
        fork = conversation.fork(agent=other)
        fork.send_message("Bonjour")
        fork.run()
        assert [e.system_prompt for e in fork.state.events if isinstance(e, SystemPromptEvent)] == [
            conversation.agent.system_prompt,
            "Answer in French.",
        ]
        assert stub.requests[-1].messages[0]["content"] == "Answer in French."
        assert "tools" not in stub.requests[-1].body

    def test_nothing_to_answer_makes_no_call(self, conversation, stub):
        """run() on an answered conversation finishes without calling the model."""
        conversation.send_message("Hello")
        conversation.run()
        before = conversation.state.events
        conversation.run()
        assert conversation.state.events == before
        assert len(stub.requests) == 1
        assert conversation.state.execution_status is ExecutionStatus.FINISHED

    def test_status_is_running_while_running(self, stub_agent, tmp_path):
        """Callbacks during a run see status running."""
        seen = []
        conversation = Conversation(
            agent=stub_agent,
            workspace=tmp_path,
            callbacks=[lambda event: seen.append(conversation.state.execution_status)],
        )
        conversation.send_message("Run `true`.")
        conversation.run()
        assert ExecutionStatus.RUNNING in seen
        assert conversation.state.execution_status is ExecutionStatus.FINISHED

    def test_one_commit_per_step(self, stub_agent, tmp_path):
        """Each step's events are saved together: no tool call is ever saved without its result."""
        saves = []

        class RecordingSink:
            def save(self, previous, current):
                before = 0 if previous is None else len(previous.events)
                saves.append([e.kind for e in list(current.events)[before:]])

        conversation = Conversation(agent=stub_agent, workspace=tmp_path, store=RecordingSink())
        conversation.send_message("Run `echo a` and `echo b`.")
        conversation.run()
        assert saves == [
            [],
            ["SystemPromptEvent", "MessageEvent"],  # send_message: the prompt first, one save
            [],  # the run starts
            ["ActionEvent", "ActionEvent", "ObservationEvent", "ObservationEvent"],
            ["MessageEvent"],
            [],
        ]

    def test_concurrent_run_is_refused(self, conversation, stub):
        """A second run() while one is in flight raises RuntimeError."""
        stub.script(StubReply.text("slow", delay=1.0))
        conversation.send_message("Hello")
        thread = start_run(conversation)
        wait_until(lambda: stub.requests, "the model is called")
        with pytest.raises(RuntimeError, match="already running"):
            conversation.run()
        thread.join()
        assert conversation.state.execution_status is ExecutionStatus.FINISHED


class TestBadToolCalls:
    @pytest.mark.parametrize(
        ("reply", "says"),
        [
            (StubReply.tool_call("no-such-tool", x=1), "there is no tool 'no-such-tool'"),
            (StubReply.tool_calls_of([("terminal", "{oops")]), "not valid JSON"),
            (StubReply.tool_call("terminal", cmd="ls"), "command: Field required"),
        ],
    )
    def test_become_observations_the_model_reads(self, conversation, stub, reply, says):
        """Unknown tools and invalid arguments are observations; the run goes on to finish."""
        stub.script(reply, StubReply.text("I see my mistake."))
        conversation.send_message("Do something.")
        conversation.run()
        observation = next(e for e in conversation.state.events if isinstance(e, ObservationEvent))
        assert observation.output.startswith("Error: ") and says in observation.output
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        tool_message = stub.requests[1].messages[-1]
        assert tool_message["role"] == "tool" and says in tool_message["content"]

    def test_invalid_json_is_kept_for_the_record(self, conversation, stub):
        """The model's unparsable arguments are kept; providers get valid JSON back."""
        stub.script(StubReply.tool_calls_of([("terminal", "{oops")]), StubReply.text("ok"))
        conversation.send_message("Do something.")
        conversation.run()
        action = next(e for e in conversation.state.events if isinstance(e, ActionEvent))
        assert action.arguments == {"__invalid_json__": "{oops"}
        assert stub.requests[1].messages[2]["tool_calls"][0]["function"]["arguments"] == "{}"


class TestErrors:
    def test_unauthorised_fails_fast_with_clear_error(self, conversation, stub):
        """A 401 stops the run at once: an AgentErrorEvent, status error, one request; run()
        raises ConversationRunError saying why."""
        stub.script(StubReply.error(401, "invalid api key"))
        conversation.send_message("Hello")
        with pytest.raises(ConversationRunError, match="ended in error: .*401") as caught:
            conversation.run()
        assert caught.value.conversation_id == conversation.id
        assert caught.value.conversation_error is None  # an AgentErrorEvent, not OpenHands' kind
        error = conversation.state.events[-1]
        assert isinstance(error, AgentErrorEvent)
        assert "401" in error.error and "Check the API key" in error.error
        assert conversation.state.execution_status is ExecutionStatus.ERROR
        assert len(stub.requests) == 1

    def test_unreachable_llm_ends_the_run_in_error(self, tmp_path, caplog):
        """With nothing listening on the LLM's port, each retry is logged as a connection
        failure (not an HTTP status), and run() ends with status error, its cause recorded."""
        with StubLLMServer() as gone:
            base_url = gone.base_url  # a real port, closed once the server stops
        llm = LLM(model="openai/stub-model", base_url=base_url, api_key="k", num_retries=2)
        llm = llm.model_copy(update={"retry_min_wait": 0.0, "retry_max_wait": 0.0})
        conversation = Conversation(agent=Agent(llm=llm), workspace=tmp_path)
        conversation.send_message("Hello")
        with (
            caplog.at_level(logging.WARNING, logger="cowconv"),
            pytest.raises(ConversationRunError, match="cannot connect"),
        ):
            conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.ERROR
        error = conversation.state.events[-1]
        assert isinstance(error, AgentErrorEvent)
        assert f"cannot connect to {base_url}" in error.error and "HTTP" not in error.error
        retries = [r.getMessage() for r in caplog.records if "Retrying" in r.getMessage()]
        assert len(retries) == 2 and all("cannot connect" in line for line in retries)
        assert not any("HTTP 500" in line for line in retries)

    def test_error_then_resume(self, conversation, stub):
        """After an LLM error, run() again retries from the same history and finishes."""
        stub.script(StubReply.error(401))
        conversation.send_message("Hello")
        with pytest.raises(ConversationRunError):
            conversation.run()
        conversation.run()
        assert kinds(conversation) == [
            "SystemPromptEvent",
            "MessageEvent",
            "AgentErrorEvent",
            "MessageEvent",
        ]
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        assert stub.requests[0].messages == stub.requests[1].messages

    def test_error_then_fork(self, conversation, stub):
        """A conversation that errored forks, and the fork runs."""
        stub.script(StubReply.error(400, "bad"))
        conversation.send_message("Hello")
        with pytest.raises(ConversationRunError):
            conversation.run()
        fork = conversation.fork()
        fork.run()
        assert fork.state.execution_status is ExecutionStatus.FINISHED
        assert conversation.state.execution_status is ExecutionStatus.ERROR

    def test_transient_errors_are_retried_inside_a_run(self, conversation, stub):
        """429 and 500 during a run are retried; the run finishes and records no error."""
        stub.script(StubReply.error(429), StubReply.error(500))
        conversation.send_message("Hello")
        conversation.run()
        assert kinds(conversation) == ["SystemPromptEvent", "MessageEvent", "MessageEvent"]
        assert len(stub.requests) == 3
        assert conversation.state.execution_status is ExecutionStatus.FINISHED

    def test_tool_crash(self, stub, stub_llm, tmp_path):
        """A crashing tool: an AgentErrorEvent answering its call, status error; resumable."""
        agent = Agent(llm=stub_llm, tools=[Tool(name="test-crash"), Tool(name="terminal")])
        conversation = Conversation(agent=agent, workspace=tmp_path)
        stub.script(
            StubReply.tool_calls_of(
                [("test-crash", {"reason": "disk on fire"}), ("terminal", {"command": "true"})]
            )
        )
        conversation.send_message("Go")
        with pytest.raises(ConversationRunError):
            conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.ERROR
        crash, skipped = list(conversation.state.events)[-2:]
        assert isinstance(crash, AgentErrorEvent) and isinstance(skipped, AgentErrorEvent)
        assert "disk on fire" in crash.error and "earlier tool call" in skipped.error
        assert crash.tool_call_id is not None and skipped.tool_call_id is not None
        conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        tool_messages = [m for m in stub.requests[1].messages if m["role"] == "tool"]
        assert [m["content"][:7] for m in tool_messages] == ["Error: ", "Error: "]
        assert "RuntimeError: disk on fire" in tool_messages[0]["content"]

    def test_unknown_agent_tool_is_an_error(self, stub, stub_llm, tmp_path):
        """An agent listing an unregistered tool ends the run with a clear error, no call."""
        agent = Agent(llm=stub_llm, tools=[Tool(name="not-registered")])
        conversation = Conversation(agent=agent, workspace=tmp_path)
        conversation.send_message("Go")
        with pytest.raises(ConversationRunError, match="unknown tool"):
            conversation.run()
        error = conversation.state.events[-1]
        assert isinstance(error, AgentErrorEvent) and "unknown tool 'not-registered'" in error.error
        assert conversation.state.execution_status is ExecutionStatus.ERROR
        assert stub.requests == []

    def test_max_iterations_makes_it_stuck(self, stub, stub_agent, tmp_path):
        """Hitting max_iteration_per_run ends as stuck (raised as ConversationRunError); run()
        again grants as many more steps."""
        conversation = Conversation(agent=stub_agent, workspace=tmp_path, max_iteration_per_run=3)
        stub.brain = lambda request: StubReply.tool_call("terminal", command="true")
        conversation.send_message("Loop forever.")
        with pytest.raises(ConversationRunError, match="ended stuck: .*max_iteration_per_run"):
            conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.STUCK
        assert "max_iteration_per_run=3" in conversation.state.events[-1].error
        assert len(stub.requests) == 3
        fork = conversation.fork()
        with pytest.raises(ConversationRunError):
            conversation.run()
        assert len(stub.requests) == 6
        with pytest.raises(ConversationRunError):
            fork.run()
        assert len(stub.requests) == 9
        assert fork.state.execution_status is ExecutionStatus.STUCK

    def test_bad_max_iterations(self, stub_agent, tmp_path):
        """max_iteration_per_run must be a positive int."""
        with pytest.raises(ValueError, match="at least 1"):
            Conversation(agent=stub_agent, workspace=tmp_path, max_iteration_per_run=0)
        with pytest.raises(TypeError, match="must be an int"):
            Conversation(agent=stub_agent, workspace=tmp_path, max_iteration_per_run=2.5)


class TestPause:
    def test_pause_from_another_thread_then_resume(self, conversation, stub):
        """pause() stops after the current step (PauseEvent, paused); run() resumes."""
        stub.script(StubReply.tool_call("terminal", command="echo step", delay=0.5))
        conversation.send_message("Start")
        thread = start_run(conversation)
        wait_until(lambda: stub.requests, "the model is called")
        conversation.pause()
        thread.join()
        assert kinds(conversation)[-3:] == ["ActionEvent", "ObservationEvent", "PauseEvent"]
        assert conversation.state.execution_status is ExecutionStatus.PAUSED
        assert len(stub.requests) == 1
        conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        assert stub.requests[1].messages[-1]["content"] == "step\n\n[exit code: 0]"

    def test_pause_when_idle_does_nothing(self, conversation):
        """Pausing a conversation that is not running records nothing."""
        conversation.pause()
        assert len(conversation.state.events) == 0
        assert conversation.state.execution_status is ExecutionStatus.IDLE

    def test_pause_is_forgotten_by_the_next_run(self, conversation, stub):
        """A pause ends one run only: the next run goes to the end."""
        stub.script(
            StubReply.tool_call("terminal", command="true", delay=0.3),
            StubReply.tool_call("terminal", command="true"),
        )
        conversation.send_message("Start")
        thread = start_run(conversation)
        wait_until(lambda: stub.requests, "the model is called")
        conversation.pause()
        thread.join()
        conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        assert [e for e in conversation.state.events if isinstance(e, PauseEvent)]

    def test_send_message_and_fork_during_a_step(self, conversation, stub):
        """send_message() and fork() work while the model thinks; the message gets answered."""
        stub.script(StubReply.text("first answer", delay=1.0))
        conversation.send_message("First")
        thread = start_run(conversation)
        wait_until(lambda: stub.requests, "the model is called")
        conversation.send_message("Second")
        fork = conversation.fork()
        assert thread.is_alive()  # neither waited for the step
        thread.join()
        texts = [e.text for e in conversation.state.events if isinstance(e, MessageEvent)]
        assert texts == ["First", "Second", "first answer", "You said: Second"]
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        assert [e.text for e in fork.state.events if isinstance(e, MessageEvent)] == [
            "First",
            "Second",
        ]
        assert fork.state.execution_status is ExecutionStatus.IDLE

    def test_close_stops_a_running_command(self, conversation, stub):
        """close() kills the command a run is waiting for, and the run ends after that step."""
        stub.script(StubReply.tool_call("terminal", command="sleep 60"))
        conversation.send_message("Start")
        thread = start_run(conversation)
        wait_until(
            lambda: any(t._running for t in conversation.backend.runner._tools.values()),
            "the command runs",
        )
        conversation.close()
        thread.join()
        observation = next(e for e in conversation.state.events if isinstance(e, ObservationEvent))
        assert observation.exit_code == -9
        assert conversation.state.execution_status is ExecutionStatus.PAUSED


class TestForkAndRun:
    def test_fork_continues_with_the_source_history(self, conversation, stub):
        """A fork's run sends the model everything the source's model saw, then the new message."""
        conversation.send_message("Run `echo hello-from-source` in the terminal.")
        conversation.run()
        source_view = build_messages(conversation.state.events)
        fork = conversation.fork(title="Follow-up fork")
        fork.send_message("What command did you run earlier? Just tell me, no tools.")
        fork.run()
        sent = stub.requests[-1].messages
        assert sent[:-1] == source_view
        assert sent[-1] == {
            "role": "user",
            "content": "What command did you run earlier? Just tell me, no tools.",
        }
        assert fork.state.events[-1].text == "Earlier I ran: `echo hello-from-source`"
        assert fork.state.tags["title"] == "Follow-up fork"

    def test_fork_mid_history_then_run(self, conversation, stub):
        """Forked at the observation, the fork's model sees the source's prefix only."""
        conversation.send_message("Run `echo early` in the terminal.")
        conversation.run()
        observation = next(e for e in conversation.state.events if isinstance(e, ObservationEvent))
        before = len(conversation.state.events)
        fork = conversation.fork(from_event_id=observation.id)
        expected = build_messages(fork.state.events)
        fork.run()
        assert stub.requests[-1].messages == expected
        assert stub.requests[-1].messages == stub.requests[1].messages
        assert len(conversation.state.events) == before
        assert fork.state.events[-1].text == conversation.state.events[-1].text


class TestStats:
    def test_stats_add_up_by_usage_id(self, conversation, stub_llm):
        """state.stats holds every call's tokens, under the LLM's usage_id, as metrics do."""
        conversation.send_message("Run `echo a`.")
        conversation.run()
        stats = conversation.state.stats
        assert stats.prompt_tokens == stub_llm.metrics.prompt_tokens > 0
        assert stats.completion_tokens == stub_llm.metrics.completion_tokens > 0
        assert stats.by_usage_id["default"].prompt_tokens == stats.prompt_tokens
        assert len(stub_llm.metrics.latencies) == 2

    def test_fork_stats_reset_or_carry(self, conversation, stub):
        """A fork's stats start at zero, or carry over with reset_metrics=False."""
        conversation.send_message("Hello")
        conversation.run()
        alt = Agent(llm=LLM(**stub.llm_settings(), usage_id="alt"))
        fresh = conversation.fork(agent=alt)
        carried = conversation.fork(agent=alt, reset_metrics=False)
        for fork in (fresh, carried):
            fork.send_message("More")
            fork.run()
        assert set(fresh.state.stats.by_usage_id) == {"alt"}
        assert set(carried.state.stats.by_usage_id) == {"default", "alt"}
        source_tokens = conversation.state.stats.prompt_tokens
        assert carried.state.stats.prompt_tokens == (
            source_tokens + carried.state.stats.by_usage_id["alt"].prompt_tokens
        )
        assert alt.llm.metrics.prompt_tokens == (
            fresh.state.stats.prompt_tokens + carried.state.stats.by_usage_id["alt"].prompt_tokens
        )


class TestCallbacks:
    def test_callbacks_see_every_event_in_order(self, stub_agent, tmp_path):
        """Every recorded event reaches the callbacks once, in history order."""
        seen = []
        conversation = Conversation(agent=stub_agent, workspace=tmp_path, callbacks=[seen.append])
        conversation.send_message("Run `echo a` and `echo b`.")
        conversation.run()
        assert seen == list(conversation.state.events)

    def test_failing_callback_does_not_stop_the_run(self, stub_agent, tmp_path, caplog):
        """A callback that raises is logged; the run still finishes."""

        def broken(event):
            raise ValueError("printer jammed")

        conversation = Conversation(agent=stub_agent, workspace=tmp_path, callbacks=[broken])
        conversation.send_message("Hello")
        conversation.run()
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        assert "printer jammed" in caplog.text


# -- build_messages, property-based -------------------------------------------------------

step_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),  # tool calls in the step (0 = text answer)
        st.booleans(),  # whether results are recorded
        st.booleans(),  # whether a user message arrives before the results
    ),
    max_size=6,
)


def _history(steps):
    events = [MessageEvent(source="user", role="user", content="start")]
    counter = 0
    for step, (calls, answered, interleave) in enumerate(steps):
        if calls == 0:
            events.append(MessageEvent(source="agent", role="assistant", content=f"answer {step}"))
            continue
        actions = []
        for _ in range(calls):
            counter += 1
            actions.append(
                ActionEvent(
                    tool_name="terminal",
                    tool_call_id=f"call-{counter}",
                    arguments={"command": "true"},
                    llm_response_id=f"response-{step}",
                )
            )
        events.extend(actions)
        if interleave:
            events.append(MessageEvent(source="user", role="user", content=f"meanwhile {step}"))
        if answered:
            events.extend(
                ObservationEvent(tool_name="terminal", tool_call_id=a.tool_call_id, output="ok")
                for a in reversed(actions)
            )
    return events


class TestBuildMessages:
    @given(step_strategy)
    def test_every_tool_call_is_answered_right_after_it(self, steps):
        """Each assistant tool-call message is followed by one tool message per call, in order."""
        messages = build_messages(_history(steps), system_prompt="sys")
        assert messages[0] == {"role": "system", "content": "sys"}
        for index, message in enumerate(messages):
            calls = message.get("tool_calls")
            if calls:
                following = messages[index + 1 : index + 1 + len(calls)]
                assert [m["role"] for m in following] == ["tool"] * len(calls)
                assert [m["tool_call_id"] for m in following] == [c["id"] for c in calls]
        tool_messages = [m for m in messages if m["role"] == "tool"]
        assert len(tool_messages) == sum(calls for calls, _, _ in steps)

    @given(step_strategy)
    def test_one_assistant_message_per_response(self, steps):
        """Tool calls sharing llm_response_id form one assistant message."""
        messages = build_messages(_history(steps))
        assistant = [m for m in messages if m["role"] == "assistant"]
        assert len(assistant) == len(steps)

    def test_errors_and_pauses_are_not_shown(self):
        """Errors answering no call and pause events are not part of the model's view."""
        history = [
            MessageEvent(source="user", role="user", content="hi"),
            AgentErrorEvent(error="rate limited"),
            PauseEvent(),
        ]
        assert build_messages(history) == [{"role": "user", "content": "hi"}]

    def test_images_become_content_parts(self):
        """A message with images is sent as text and image_url parts."""
        from cowconv import ImageContent, TextContent

        event = MessageEvent(
            source="user",
            role="user",
            content=(TextContent(text="look"), ImageContent(image_urls=("data:x",))),
        )
        assert build_messages([event])[0]["content"] == [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:x"}},
        ]
