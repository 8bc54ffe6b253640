"""OpenHands' SDK's Python API on cowconv: TestLLM, switch_llm, what issue 20 needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    AgentErrorEvent,
    Conversation,
    EventNotFoundError,
    Message,
    MessageToolCall,
    Metrics,
    SQLiteStore,
    Tool,
    Usage,
)
from cowconv.testing import ScriptedResponse, TestLLM, TestLLMExhaustedError


def answer(text: str) -> Message:
    return Message(role="assistant", content=text)


class TestTestLLM:
    @given(texts=st.lists(st.text(max_size=20), max_size=5))
    def test_answers_the_script_in_order_then_is_exhausted(self, texts):
        """Each call takes the next scripted message; one call more raises, naming the count."""
        llm = TestLLM.from_messages([answer(text) for text in texts])
        got = [llm.completion([]).content for _ in texts]
        assert got == texts
        assert (llm.call_count, llm.remaining_responses) == (len(texts), 0)
        with pytest.raises(TestLLMExhaustedError, match=f"after {len(texts)} calls"):
            llm.completion([])

    def test_scripted_exception_is_raised_and_counted(self):
        """An exception in the script is raised by its call, and the script goes on."""
        llm = TestLLM.from_messages([RuntimeError("boom"), answer("after")])
        with pytest.raises(RuntimeError, match="boom"):
            llm.completion([])
        assert llm.completion([]).content == "after"
        assert llm.call_count == 2

    def test_tool_calls_become_the_response_tool_calls(self):
        """A scripted message's tool calls are the answer's, with the message kept."""
        call = MessageToolCall(id="c1", name="terminal", arguments='{"command": "ls"}')
        message = Message(role="assistant", content="", tool_calls=[call])
        response = TestLLM.from_messages([message]).completion([])
        assert isinstance(response, ScriptedResponse)
        assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
            ("c1", "terminal", '{"command": "ls"}')
        ]
        assert response.message is message
        assert (response.cost, response.prompt_tokens) == (0.0, 0)

    def test_drives_a_run_with_a_real_tool(self, tmp_path):
        """A run takes its LLM steps from the script: a terminal call, its output, an answer."""
        call = MessageToolCall(
            id="c1", name="terminal", arguments='{"command": "echo scripted-output"}'
        )
        llm = TestLLM.from_messages(
            [Message(role="assistant", content="", tool_calls=[call]), answer("Done.")]
        )
        agent = Agent(llm=llm, tools=[Tool(name="terminal")])
        conversation = Conversation(agent=agent, workspace=tmp_path)
        conversation.send_message("Echo something.")
        conversation.run()
        state = conversation.state
        kinds = [event.kind for event in state.events]
        assert kinds == [
            "SystemPromptEvent",
            "MessageEvent",
            "ActionEvent",
            "ObservationEvent",
            "MessageEvent",
        ]
        assert "scripted-output" in state.events[3].output
        assert state.events[-1].text == "Done."
        assert state.execution_status.value == "finished"
        assert llm.remaining_responses == 0

    def test_an_exhausted_script_ends_the_run_in_error(self, tmp_path):
        """Past the script, a run ends ``error`` with the reason recorded, as a failed LLM call."""
        conversation = Conversation(agent=Agent(llm=TestLLM()), workspace=tmp_path)
        conversation.send_message("Anyone there?")
        conversation.run()
        state = conversation.state
        assert state.execution_status.value == "error"
        assert isinstance(state.events[-1], AgentErrorEvent)
        assert "no more scripted responses" in state.events[-1].error

    def test_copies_share_the_script(self):
        """``with_metrics`` and ``model_copy`` copies answer from the same script."""
        llm = TestLLM.from_messages([answer("one"), answer("two")])
        copy = llm.model_copy()
        assert copy.completion([]).content == "one"
        assert llm.completion([]).content == "two"
        assert llm.call_count == copy.call_count == 2

    def test_stored_as_an_llm_of_the_same_settings(self, tmp_path):
        """A stored conversation keeps the TestLLM's settings; it resumes with a plain LLM."""
        llm = TestLLM.from_messages([answer("kept")], usage_id="scripted", model="openai/gpt-4o")
        conversation = Conversation(
            agent=Agent(llm=llm), workspace=tmp_path, persistence_dir=tmp_path
        )
        conversation.send_message("hi")
        resumed = Conversation.resume(tmp_path, conversation.id)
        assert type(resumed.state.agent.llm) is LLM
        assert resumed.state.agent.llm == llm
        assert (resumed.state.agent.llm.model, resumed.state.agent.llm.usage_id) == (
            "openai/gpt-4o",
            "scripted",
        )


class TestSwitchLLM:
    def test_the_next_run_uses_the_new_llm(self, tmp_path):
        """After switch_llm, the agent's steps are answered by the given LLM."""
        first = TestLLM.from_messages([answer("from the first")])
        second = TestLLM.from_messages([answer("from the second")], usage_id="second")
        conversation = Conversation(agent=Agent(llm=first), workspace=tmp_path)
        conversation.send_message("one")
        conversation.run()
        conversation.switch_llm(second)
        conversation.send_message("two")
        conversation.run()
        assert [e.text for e in conversation.state.events if e.kind == "MessageEvent"] == [
            "one",
            "from the first",
            "two",
            "from the second",
        ]
        assert conversation.agent.llm.usage_id == "second"
        assert (first.call_count, second.call_count) == (1, 1)

    def test_is_stored(self, tmp_path):
        """A resumed conversation runs with the LLM it was switched to."""
        conversation = Conversation(
            agent=Agent(llm=LLM(model="openai/gpt-4o")),
            workspace=tmp_path,
            persistence_dir=tmp_path,
        )
        conversation.switch_llm(LLM(model="anthropic/claude-sonnet-4-5", usage_id="alt"))
        resumed = Conversation.resume(tmp_path, conversation.id)
        assert resumed.state.agent.llm.usage_id == "alt"

    def test_a_fork_keeps_the_source_llm(self, tmp_path):
        """Switching the source's LLM after a fork leaves the fork's agent as it was."""
        source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=tmp_path)
        fork = source.fork()
        source.switch_llm(LLM(model="openai/gpt-4o-mini", usage_id="cheap"))
        assert fork.state.agent.llm.model == "openai/gpt-4o"

    def test_refuses_what_is_not_an_llm(self, tmp_path):
        """switch_llm takes a cowconv LLM."""
        conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=tmp_path)
        with pytest.raises(TypeError):
            conversation.switch_llm("openai/gpt-4o")  # type: ignore[arg-type]


class TestToolConcurrencyLimit:
    def test_accepted_and_kept_at_least_one(self):
        """Agent(tool_concurrency_limit=n) keeps n; below 1 is refused."""
        assert Agent(llm=LLM(model="m"), tool_concurrency_limit=4).tool_concurrency_limit == 4
        with pytest.raises(ValueError):
            Agent(llm=LLM(model="m"), tool_concurrency_limit=0)


class TestUnknownEventMessages:
    def test_navigate_and_fork_name_the_argument(self, tmp_path):
        """An unknown id names ``event_id`` (navigate_to) or ``from_event_id`` (fork)."""
        conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=tmp_path)
        with pytest.raises(EventNotFoundError, match="event_id 'nope'"):
            conversation.navigate_to("nope")
        with pytest.raises(EventNotFoundError, match="from_event_id 'nope'"):
            conversation.fork(from_event_id="nope")


class TestPersistenceDir:
    def test_a_fork_dir_is_a_sibling_named_for_its_id(self, tmp_path):
        """``base/<id hex>`` for the source and its fork alike (never nested, never doubled)."""
        agent = Agent(llm=LLM(model="m"))
        source = Conversation(agent=agent, workspace=tmp_path, persistence_dir=tmp_path)
        fork = source.fork()
        assert source.persistence_dir == str(tmp_path / source.id.hex)
        assert fork.persistence_dir == str(tmp_path / fork.id.hex)
        assert source.state.persistence_dir == source.persistence_dir

    def test_a_string_id_names_its_dir(self, tmp_path):
        """An id that is not a UUID names the directory as it is."""
        agent = Agent(llm=LLM(model="m"))
        conversation = Conversation(
            agent=agent, workspace=tmp_path, persistence_dir=tmp_path, conversation_id="my-run"
        )
        assert conversation.persistence_dir == str(tmp_path / "my-run")

    def test_none_without_a_directory(self, tmp_path):
        """In memory, or in an in-memory store, there is no directory."""
        agent = Agent(llm=LLM(model="m"))
        assert Conversation(agent=agent, workspace=tmp_path).persistence_dir is None
        in_memory = Conversation(agent=agent, workspace=tmp_path, store=SQLiteStore(":memory:"))
        assert in_memory.persistence_dir is None
        assert in_memory.state.persistence_dir is None


class TestLiveStatsAccounts:
    @given(
        writes=st.lists(
            st.tuples(
                st.sampled_from(["agent", "condenser", "judge"]),
                st.floats(min_value=0, max_value=100, allow_nan=False),
            ),
            max_size=6,
        )
    )
    def test_assignments_replace_accounts_and_totals_follow(self, writes):
        """``_state.stats.usage_to_metrics[id] = m`` works as a dict: the last write per id
        is the account, and the totals are the sum of the accounts."""
        conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=".")
        model: dict[str, float] = {}
        for usage_id, cost in writes:
            metrics = Metrics()
            metrics.accumulated_cost = cost
            conversation._state.stats.usage_to_metrics[usage_id] = metrics
            model[usage_id] = cost
        stats = conversation.state.stats
        assert {k: v.accumulated_cost for k, v in stats.by_usage_id.items()} == model
        assert stats.accumulated_cost == pytest.approx(sum(model.values()))
        assert dict(conversation._state.stats.usage_to_metrics) == dict(stats.by_usage_id)

    def test_snapshots_taken_before_stay_as_they_were(self, tmp_path):
        """A write through ``_state`` changes the conversation, never a snapshot held."""
        conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=tmp_path)
        before = conversation.state
        conversation._state.stats.usage_to_metrics["agent"] = Usage(accumulated_cost=1.5)
        assert before.stats.accumulated_cost == 0.0
        assert conversation.state.stats.accumulated_cost == 1.5
        with pytest.raises(TypeError):
            conversation.state.stats.usage_to_metrics["agent"] = Usage()  # type: ignore[index]

    def test_a_fork_keeps_them_only_when_asked(self, tmp_path):
        """fork(reset_metrics=False) carries the accounts; the default fork starts at zero."""
        conversation = Conversation(
            agent=Agent(llm=LLM(model="m")), workspace=tmp_path, persistence_dir=tmp_path
        )
        conversation._state.stats.usage_to_metrics["agent"] = Usage(accumulated_cost=1.5)
        assert conversation.fork(reset_metrics=False).state.stats.accumulated_cost == 1.5
        assert conversation.fork().state.stats.accumulated_cost == 0.0
        resumed = Conversation.resume(tmp_path, conversation.id)
        assert resumed.state.stats.by_usage_id["agent"].accumulated_cost == 1.5
