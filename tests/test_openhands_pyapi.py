"""OpenHands' SDK's Python API on cowconv: TestLLM, switch_llm."""

from __future__ import annotations

import copy
import pickle
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    ROOT_PARENT_ID,
    Agent,
    AgentErrorEvent,
    Conversation,
    ConversationErrorEvent,
    ConversationRunError,
    ConversationStateUpdateEvent,
    EventNotFoundError,
    InvalidValueError,
    Message,
    MessageEvent,
    MessageToolCall,
    Metrics,
    PauseEvent,
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
        """Past the script, a run ends ``error`` with the reason recorded (and raised), as a
        failed LLM call."""
        conversation = Conversation(agent=Agent(llm=TestLLM()), workspace=tmp_path)
        conversation.send_message("Anyone there?")
        with pytest.raises(ConversationRunError, match="no more scripted responses"):
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

    @settings(max_examples=40, deadline=None)
    @given(name=st.text(min_size=1, max_size=12).filter(str.strip))
    @example(name="..").via("discovered failure")
    @example(name="a/b").via("discovered failure")
    def test_any_id_names_one_dir_under_the_base(self, name):
        """Whatever the id (``..``, ``a/b``, unicode), its directory is one child of the base."""
        with tempfile.TemporaryDirectory() as root:
            base = Path(root)
            try:
                conversation = Conversation(
                    agent=Agent(llm=LLM(model="m")),
                    workspace=base,
                    persistence_dir=base,
                    conversation_id=name,
                )
            except InvalidValueError:  # an id the door refuses (lone surrogates, ...)
                return
            directory = Path(str(conversation.persistence_dir))
            assert directory.parent == base and directory.name not in ("", ".", "..")

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


def _legacy(text: str) -> MessageEvent:
    return MessageEvent(source="user", role="user", content=text)


class TestEventsAppendAsGiven:
    def test_nothing_is_stamped_and_the_leaf_reads_unset(self, tmp_path):
        """``state.events.append`` records events as given; a history of them has no set leaf
        (OpenHands' legacy shape), is all one active branch, and resumes so."""
        conversation = Conversation(
            agent=Agent(llm=LLM(model="m")), workspace=tmp_path, persistence_dir=tmp_path
        )
        legacy = [_legacy(f"legacy-{i}") for i in range(3)]
        for event in legacy:
            conversation.state.events.append(event)
        resumed = Conversation.resume(tmp_path, conversation.id)
        for state in (conversation.state, resumed.state):
            assert [e.parent_id for e in state.events] == [None, None, None]
            assert state.leaf_event_id is None
            assert state._resolve_active_leaf() == legacy[-1].id
            assert [e.id for e in state.view.events] == [e.id for e in legacy]

    def test_the_next_stamped_event_continues_the_history(self, tmp_path):
        """After appends as given, append_event chains onto the last of them and sets the leaf."""
        conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=tmp_path)
        legacy = [_legacy("a"), _legacy("b")]
        conversation.state.events.extend(legacy)
        new = conversation.append_event(_legacy("c"))
        assert new.parent_id == legacy[-1].id
        assert conversation.state.leaf_event_id == new.id
        assert [e.id for e in conversation.state.events.path_to_root(new.id)] == [
            *(e.id for e in legacy),
            new.id,
        ]

    @given(
        tail=st.lists(st.sampled_from(["state-update", "error", "pause"]), min_size=1, max_size=4)
    )
    def test_a_tail_of_non_tree_events_never_orphans_the_history(self, tail):
        """State updates and conversation errors appended onto the history stay off the active
        branch; whatever the tail, the next event keeps every earlier real event reachable."""
        conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=".")
        legacy = [_legacy(f"l{i}") for i in range(3)]
        conversation.state.events.extend(legacy)
        real = [e.id for e in legacy]
        for kind in tail:
            parent = legacy[-1].id
            if kind == "state-update":
                event = ConversationStateUpdateEvent(parent_id=parent, key="k", value="v")
            elif kind == "error":
                event = ConversationErrorEvent(
                    source="environment", parent_id=parent, code="E", detail="d"
                )
            else:
                event = PauseEvent(parent_id=conversation.state.branch.last_id)
                real.append(event.id)
            conversation.state.events.append(event)
        new = conversation.append_event(_legacy("after"))
        reachable = [e.id for e in conversation.state.events.path_to_root(new.id)]
        assert reachable == [*real, new.id]
        held = {e.id for e in conversation.state.events}
        assert held >= set(real) and len(held) == len(legacy) + len(tail) + 1

    def test_an_id_already_held_is_refused(self, tmp_path):
        """Appending an event whose id the conversation holds is a ValueError."""
        conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=tmp_path)
        event = _legacy("a")
        conversation.state.events.append(event)
        with pytest.raises(ValueError, match="already"):
            conversation.state.events.append(event)

    def test_a_root_starts_the_tree_or_a_branch_beside_it(self, tmp_path):
        """An event naming ROOT_PARENT_ID is the first event of a new conversation, and a new
        root beside the active branch of one that has events."""
        conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=tmp_path)
        first = _legacy("first").model_copy(update={"parent_id": ROOT_PARENT_ID})
        conversation.state.events.append(first)
        assert [e.id for e in conversation.state.branch] == [first.id]
        second = _legacy("second").model_copy(update={"parent_id": ROOT_PARENT_ID})
        conversation.state.events.append(second)
        assert [e.id for e in conversation.state.branch] == [first.id]
        assert [[e.id for e in b] for b in conversation.state.other_branches] == [[second.id]]


class TestTestLLMCopies:
    def test_deep_copies_and_pickles_answer_on_their_own(self):
        """copy.deepcopy and pickle give a TestLLM whose script goes on independently."""
        llm = TestLLM.from_messages([answer("one"), answer("two")])
        assert llm.completion([]).content == "one"
        for twin in (copy.deepcopy(llm), pickle.loads(pickle.dumps(llm))):
            assert twin.call_count == 1 and twin.completion([]).content == "two"
            assert twin.remaining_responses == 0
        assert llm.remaining_responses == 1
