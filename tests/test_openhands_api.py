"""OpenHands' Python API on a conversation in this process: the tree, the view, and the calls
code written for OpenHands' SDK makes.

The first test makes the calls of OpenHands' fork example
(``examples/01_standalone_sdk/48_conversation_fork.py`` of OpenHands'
software-agent-sdk) in order, written here with cowconv's imports, against the
stub LLM; nothing is fetched or copied. The others pin each piece of the API
the way OpenHands' SDK defines it, on memory and SQLite.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    ROOT_PARENT_ID,
    Action,
    ActionEvent,
    Agent,
    Condensation,
    Conversation,
    ConversationNotFoundError,
    ConversationRunningError,
    ConversationState,
    EventLog,
    EventNotFoundError,
    ExecutionStatus,
    ImageContent,
    InvalidTypeError,
    InvalidValueError,
    Message,
    MessageEvent,
    MessageToolCall,
    Observation,
    ObservationEvent,
    PauseEvent,
    RemoteConversation,
    SQLiteStore,
    TextContent,
    Tool,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.core.view import CondensationSummaryEvent, View, view_of
from cowconv.testing import StubLLMServer, StubReply, default_brain
from cowconv.tools.terminal import TerminalTool
from tests.strategies import paired_events

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-test"))


def _message(text: str, source: str = "user") -> MessageEvent:
    role = "user" if source == "user" else "assistant"
    return MessageEvent(
        source=source, llm_message=Message(role=role, content=[TextContent(text=text)])
    )


def _view_ids(conversation: Conversation) -> list[str]:
    return [event.id for event in conversation.state.view.events]


@pytest.fixture(params=["memory", "sqlite"])
def make(request, tmp_path) -> Iterator[Any]:
    """Conversations as OpenHands' tests build them, in memory or persisted (SQLite)."""
    made: list[Conversation] = []

    def build(**kwargs: Any) -> Conversation:
        if request.param == "sqlite":
            kwargs.setdefault("persistence_dir", tmp_path / "store")
        conversation = Conversation(agent=AGENT, workspace=str(tmp_path), visualizer=None, **kwargs)
        made.append(conversation)
        return conversation

    yield build
    for conversation in made:
        conversation.close()


# -- OpenHands' fork example, call by call ---------------------------------------------------


def test_the_fork_example_runs_with_its_imports_renamed(stub: StubLLMServer, tmp_path, monkeypatch):
    """OpenHands' ``48_conversation_fork.py``: every call it makes and every assert it holds."""
    monkeypatch.chdir(tmp_path)
    for name, value in stub.environment().items():  # the LLM_* variables the example reads
        monkeypatch.setenv(name, value)

    llm = LLM(
        model=os.getenv("LLM_MODEL", "gpt-5.5"),
        api_key=os.getenv("LLM_API_KEY"),
        base_url=os.getenv("LLM_BASE_URL", None),
    )
    agent = Agent(llm=llm, tools=[Tool(name=TerminalTool.name)])
    cwd = os.getcwd()

    # 1. the source conversation
    source = Conversation(agent=agent, workspace=cwd)
    source.send_message("Run `echo hello-from-source` in the terminal.")
    source.run()
    assert len(source.state.events) > 0

    # 2. fork and continue independently
    fork = source.fork(title="Follow-up fork")
    source_event_count = len(source.state.events)
    assert fork.state.tags.get("title") == "Follow-up fork"
    assert fork.id != source.id
    assert len(fork.state.events) == source_event_count
    fork.send_message("Now run `echo hello-from-fork` in the terminal.")
    fork.run()
    assert len(source.state.events) == source_event_count
    assert len(fork.state.events) > source_event_count

    # 3. fork with a different agent
    alt_llm = LLM(
        model=os.getenv("LLM_MODEL", "gpt-5.5"),
        api_key=os.getenv("LLM_API_KEY"),
        base_url=os.getenv("LLM_BASE_URL", None),
        usage_id="alt",
    )
    alt_agent = Agent(llm=alt_llm, tools=[Tool(name=TerminalTool.name)])
    fork_alt = source.fork(
        agent=alt_agent, title="Tool-change experiment", tags={"purpose": "a/b-test"}
    )
    assert dict(fork_alt.state.tags) == {"title": "Tool-change experiment", "purpose": "a/b-test"}
    fork_alt.send_message("What command did you run earlier? Just tell me, no tools.")
    fork_alt.run()
    assert "echo hello-from-source" in fork_alt.state.events[-1].text

    # 4. branch-slice fork from the first user message
    cut_event_id = next(
        e.id for e in source.state.events if isinstance(e, MessageEvent) and e.source == "user"
    )
    fork_slice = source.fork(from_event_id=cut_event_id, title="Branch from first turn")
    assert len(fork_slice.state.events) <= len(source.state.events)
    assert fork_slice.state.leaf_event_id == cut_event_id
    fork_slice.send_message("Run `echo sliced-branch` in the terminal.")
    fork_slice.run()
    assert any("sliced-branch" in str(e) for e in fork_slice.state.events)

    # 5. navigation inside the conversation: a sibling branch
    events_before_nav = len(source.state.events)
    source.navigate_to(cut_event_id)
    assert source.state.leaf_event_id == cut_event_id
    assert [e.id for e in source.state.view.events][-1] == cut_event_id
    assert len(source.state.view.events) == 2  # the system prompt and the first message
    source.send_message("Actually, instead run `echo sibling-branch`.")
    source.run()
    # What OpenHands prints as "old branch retained": here the other branch of state.branches.
    old, new = source.state.branches
    assert len(old) == events_before_nav and new[-1].text.startswith("The terminal printed")
    assert old[1].id == new[1].id == cut_event_id

    cost = llm.metrics.accumulated_cost + alt_llm.metrics.accumulated_cost
    assert cost >= 0
    for conversation in (source, fork, fork_alt, fork_slice):
        conversation.close()


# -- parent_id, the leaf, the view ---------------------------------------------------------------


class TestTree:
    def test_parent_id_stamped_and_leaf_advances(self, make):
        conversation = make()
        e0, e1, e2 = (conversation.append_event(_message(t)) for t in ("first", "second", "third"))
        stored = {e.id: e for e in conversation.state.events}
        assert stored[e0.id].parent_id is None
        assert stored[e1.id].parent_id == e0.id
        assert stored[e2.id].parent_id == e1.id
        assert conversation.state.leaf_event_id == e2.id

    def test_send_message_and_run_stamp_too(self, stub, tmp_path):
        agent = Agent(llm=LLM(**stub.llm_settings()), tools=[Tool(name="terminal")])
        conversation = Conversation(agent=agent, workspace=str(tmp_path), visualizer=None)
        conversation.send_message("Run `echo hi`.")
        conversation.run()
        events = conversation.state.events
        assert [e.kind for e in events] == [
            "SystemPromptEvent",
            "MessageEvent",
            "ActionEvent",
            "ObservationEvent",
            "MessageEvent",
        ]
        assert events[0].parent_id is None
        assert all(events[i].parent_id == events[i - 1].id for i in range(1, len(events)))

    def test_navigate_then_append_makes_a_sibling(self, make):
        conversation = make()
        e0, e1, e2 = (conversation.append_event(_message(t)) for t in ("root", "a1", "a2"))
        conversation.navigate_to(e0.id)
        assert _view_ids(conversation) == [e0.id]
        e3 = conversation.append_event(_message("b1"))
        assert e3.parent_id == e0.id
        assert _view_ids(conversation) == [e0.id, e3.id]
        # The abandoned branch is kept (in state.branches; OpenHands keeps it in state.events).
        assert [[e.id for e in b] for b in conversation.state.branches] == [
            [e0.id, e1.id, e2.id],
            [e0.id, e3.id],
        ]

    def test_navigate_to_none_starts_a_fresh_root(self, make):
        conversation = make()
        conversation.append_event(_message("only"))
        conversation.navigate_to(None)
        assert conversation.state.leaf_event_id is None
        assert conversation.state.head_is_empty is True
        assert _view_ids(conversation) == []
        fresh = conversation.append_event(_message("fresh"))
        assert fresh.parent_id == ROOT_PARENT_ID
        assert conversation.state.head_is_empty is False
        assert _view_ids(conversation) == [fresh.id]

    def test_a_new_conversation_is_not_an_emptied_head(self, make):
        conversation = make()
        assert conversation.state.head_is_empty is False
        assert conversation.append_event(_message("first")).parent_id is None

    def test_head_is_empty_survives_reload_and_full_fork(self, tmp_path):
        store = SQLiteStore(tmp_path / "store")
        conversation = Conversation(agent=AGENT, workspace=".", store=store, visualizer=None)
        conversation.append_event(_message("only"))
        conversation.navigate_to(None)
        resumed = Conversation.resume(store, conversation.id)
        assert resumed.state.head_is_empty and resumed.state.leaf_event_id is None
        assert resumed.fork().state.head_is_empty
        assert resumed.append_event(_message("fresh")).parent_id == ROOT_PARENT_ID

    def test_an_event_naming_another_parent_is_refused(self, make):
        conversation = make()
        e0 = conversation.append_event(_message("root"))
        conversation.append_event(_message("a1"))
        stray = _message("stray").model_copy(update={"parent_id": e0.id})
        with pytest.raises(InvalidValueError, match="navigate_to"):
            conversation.append_event(stray)
        assert len(conversation.state.events) == 2  # nothing recorded
        conversation.navigate_to(e0.id)
        assert conversation.append_event(stray) == stray  # now it follows its parent

    def test_active_branch_and_its_limit(self, make):
        conversation = make()
        e0 = conversation.append_event(_message("root"))
        conversation.append_event(_message("a1"))
        conversation.navigate_to(e0.id)
        e2 = conversation.append_event(_message("b1"))
        assert [e.id for e in conversation.state.active_branch()] == [e0.id, e2.id]
        assert [e.id for e in conversation.state.active_branch(limit=1)] == [e2.id]
        assert conversation.state.active_branch(limit=0) == []
        with pytest.raises(InvalidValueError):
            conversation.state.active_branch(limit=-1)

    def test_fork_from_an_event_slices_the_branch(self, make):
        conversation = make()
        e0, e1, _ = (conversation.append_event(_message(t)) for t in ("root", "a", "b"))
        fork = conversation.fork(from_event_id=e1.id)
        assert [e.id for e in fork.state.events] == [e0.id, e1.id]
        assert fork.state.leaf_event_id == e1.id and _view_ids(fork) == [e0.id, e1.id]
        assert len(conversation.state.events) == 3
        assert fork.append_event(_message("c")).parent_id == e1.id

    def test_fork_from_an_unknown_event_is_a_value_error(self, make):
        conversation = make()
        conversation.append_event(_message("root"))
        for operation in (conversation.navigate_to, lambda e: conversation.fork(from_event_id=e)):
            with pytest.raises(ValueError, match="nope"):
                operation("nope")
            with pytest.raises(EventNotFoundError):
                operation("nope")


class TestView:
    def test_condensation_applies_as_in_openhands(self, make):
        conversation = make()
        e0, e1, e2 = (conversation.append_event(_message(f"m{i}")) for i in range(3))
        condensation = conversation.append_event(
            Condensation(forgotten_event_ids=[e0.id], summary="dropped m0", llm_response_id="r1")
        )
        assert _view_ids(conversation) == [e1.id, e2.id]  # no offset: no summary in the view
        fork = conversation.fork(from_event_id=condensation.id)
        assert len(fork.state.events) == 4 and _view_ids(fork) == [e1.id, e2.id]
        with_summary = conversation.append_event(
            Condensation(forgotten_event_ids=[e1.id], summary="dropped m1", summary_offset=0)
        )
        view = conversation.state.view
        assert [e.id for e in view.events] == [f"{with_summary.id}-summary", e2.id]
        assert isinstance(view[0], CondensationSummaryEvent) and view[0].summary == "dropped m1"
        assert view[0].to_llm_message().text == "dropped m1"

    def test_events_the_model_never_sees_are_left_out(self, make):
        conversation = make()
        e0 = conversation.append_event(_message("hi"))
        conversation.append_event(PauseEvent())
        e2 = conversation.append_event(_message("answer", source="agent"))
        assert _view_ids(conversation) == [e0.id, e2.id]
        assert len(conversation.state.view) == 2 and conversation.state.view[-1].id == e2.id

    def test_incremental_view_equals_a_fresh_one_across_branch_switches(self, make):
        conversation = make()

        def fresh() -> list[str]:
            return [e.id for e in View.from_events(conversation.state.active_branch()).events]

        e0 = conversation.append_event(_message("root"))
        assert _view_ids(conversation) == fresh()
        conversation.append_event(_message("a1"))
        e2 = conversation.append_event(_message("a2"))
        assert _view_ids(conversation) == fresh()
        conversation.navigate_to(e0.id)
        assert _view_ids(conversation) == fresh() == [e0.id]
        conversation.append_event(_message("b1"))
        assert _view_ids(conversation) == fresh()
        conversation.navigate_to(e2.id)
        assert _view_ids(conversation) == fresh() and len(fresh()) == 3

    def test_a_view_is_read_only(self, make):
        conversation = make()
        conversation.append_event(_message("hi"))
        view = conversation.state.view
        with pytest.raises(AttributeError):
            view.events.append(_message("x"))  # type: ignore[attr-defined]
        assert conversation.state.view == view


# -- send_message(Message), run(blocking=False), delete_on_close -------------------------------


class TestSendMessage:
    def test_a_message_object_with_text_and_images(self, make):
        conversation = make()
        message = Message(
            role="user",
            content=[
                TextContent(text="What is this?"),
                ImageContent(image_urls=["https://x/a.png"]),
            ],
        )
        event = conversation.send_message(message, sender="reviewer")
        assert event.llm_message == message and event.sender == "reviewer"
        assert conversation.state.events[-1] == event
        assert event.parent_id == conversation.state.events[-2].id  # the system prompt

    def test_only_user_messages(self, make):
        conversation = make()
        with pytest.raises(InvalidValueError, match="user"):
            conversation.send_message(Message(role="assistant", content="no"))
        with pytest.raises(InvalidTypeError):
            conversation.send_message(42)  # type: ignore[arg-type]
        assert len(conversation.state.events) == 0

    def test_message_events_in_openhands_shape_everywhere(self, tmp_path):
        """``MessageEvent(llm_message=...)`` in memory, in a store and through an agent server."""
        with BackgroundServer(create_app(data_dir=tmp_path / "data")) as server:
            conversations = [
                Conversation(agent=AGENT, workspace=".", visualizer=None),
                Conversation(agent=AGENT, workspace=".", persistence_dir=tmp_path / "db"),
                Conversation(agent=AGENT, workspace=Workspace(host=server.url, working_dir=".")),
            ]
            for conversation in conversations:
                first = conversation.append_event(_message("hello"))
                second = conversation.append_event(_message("hi", source="agent"))
                assert second.parent_id == first.id
                again = conversation.state.events
                assert [e.llm_message.text for e in again] == ["hello", "hi"]
                assert conversation.fork().state.events[-1] == second
                conversation.close()


def _gated_brain(gate: threading.Event):
    def brain(request: Mapping[str, Any]) -> StubReply:
        gate.wait(timeout=60)
        return default_brain(request)

    return brain


class TestRunInTheBackground:
    def test_returns_at_once_and_a_later_run_waits(self, tmp_path):
        gate = threading.Event()
        with StubLLMServer(brain=_gated_brain(gate)) as stub:
            agent = Agent(llm=LLM(**stub.llm_settings()))
            conversation = Conversation(agent=agent, workspace=str(tmp_path), visualizer=None)
            conversation.send_message("Hello")
            conversation.run(blocking=False)  # the model has not answered: it waits on the gate
            assert conversation.state.events[-1].source == "user"
            conversation.run(blocking=False)  # while it goes: nothing more
            waiter = threading.Thread(target=conversation.run)  # a later run() waits for it
            waiter.start()
            waiter.join(timeout=0.5)
            assert waiter.is_alive()  # it cannot end: the background run waits for the model
            gate.set()
            waiter.join(timeout=60)
            assert not waiter.is_alive()
            conversation.run()
            assert conversation.state.execution_status is ExecutionStatus.FINISHED
            assert conversation.state.events[-1].text == "You said: Hello"
            assert len(stub.requests) == 1  # one run, one answer
            conversation.close()

    def test_close_stops_and_waits_for_it(self, tmp_path):
        gate = threading.Event()
        with StubLLMServer(brain=_gated_brain(gate)) as stub:
            agent = Agent(llm=LLM(**stub.llm_settings()))
            conversation = Conversation(agent=agent, workspace=str(tmp_path), visualizer=None)
            conversation.send_message("Hello")
            conversation.run(blocking=False)
            gate.set()
            conversation.close()
            assert conversation.state.execution_status is not ExecutionStatus.RUNNING

    def test_what_stopped_it_is_raised_by_the_run_that_waits(self, tmp_path):
        gate = threading.Event()
        with StubLLMServer(brain=_gated_brain(gate)) as stub:
            agent = Agent(llm=LLM(**stub.llm_settings()))
            conversation = Conversation(agent=agent, workspace=str(tmp_path), visualizer=None)
            conversation.send_message("Hello")
            foreground = threading.Thread(target=conversation.run)  # a blocking run elsewhere
            foreground.start()
            while not stub.requests:  # it is waiting for the model
                foreground.join(timeout=0.05)
            # A background run cannot start beside it: the background thread is refused ...
            conversation.run(blocking=False)
            gate.set()
            foreground.join(timeout=60)
            # ... and the run() that comes for it raises why, once.
            with pytest.raises(ConversationRunningError):
                conversation.run()
            conversation.run()
            assert conversation.state.execution_status is ExecutionStatus.FINISHED
            conversation.close()

    def test_blocking_must_be_a_bool(self, make):
        with pytest.raises(InvalidTypeError):
            make().run(blocking="no")  # type: ignore[arg-type]


class TestDeleteOnClose:
    def test_accepted_kept_inherited_and_nothing_deleted(self, tmp_path):
        store = tmp_path / "store"
        conversation = Conversation(
            agent=AGENT, workspace=".", persistence_dir=store, delete_on_close=False
        )
        assert conversation.delete_on_close is False
        assert conversation.fork().delete_on_close is False
        default = Conversation(agent=AGENT, workspace=".", persistence_dir=store)
        assert default.delete_on_close is True and default.fork().delete_on_close is True
        default.send_message("kept")
        default.close()  # OpenHands' local conversation deletes nothing on close either
        assert Conversation.resume(store, default.id).state.events[-1].text == "kept"

    def test_on_an_agent_server(self, tmp_path):
        with BackgroundServer(create_app(data_dir=tmp_path / "data")) as server:
            workspace = Workspace(host=server.url, working_dir=".")
            remote = Conversation(agent=AGENT, workspace=workspace)
            assert remote.delete_on_close is False
            remote.close()
            # As OpenHands' RemoteConversation: True deletes the conversation on the server.
            doomed = Conversation(agent=AGENT, workspace=workspace, delete_on_close=True)
            fork = doomed.fork()
            assert fork.delete_on_close is True
            doomed.close()
            assert RemoteConversation.attach(server.url, str(remote.id)).id == remote.id
            with pytest.raises(ConversationNotFoundError):
                RemoteConversation.attach(server.url, str(doomed.id))
            fork.close()
            with pytest.raises(ConversationNotFoundError):
                RemoteConversation.attach(server.url, str(fork.id))
        with pytest.raises(InvalidTypeError):
            Conversation(agent=AGENT, workspace=".", delete_on_close="yes")  # type: ignore[arg-type]


# -- the view, as a property -----------------------------------------------------------------


def _reference_view(events) -> list[str]:
    """OpenHands' View.from_events, stated plainly over event ids."""
    seen: list = []
    for event in events:
        if isinstance(event, Condensation):
            seen = [e for e in seen if e.id not in set(event.forgotten_event_ids)]
            if event.summary is not None and event.summary_offset is not None:
                seen.insert(
                    event.summary_offset,
                    CondensationSummaryEvent(id=f"{event.id}-summary", summary=event.summary),
                )
        elif not isinstance(event, PauseEvent):
            seen.append(event)
    return [e.id for e in seen]


@st.composite
def _histories(draw):
    history: list = []
    for _ in range(draw(st.integers(0, 30))):
        if history and draw(st.integers(0, 4)) == 0:
            ids = [e.id for e in history]
            forgotten = draw(st.lists(st.sampled_from(ids), max_size=len(ids), unique=True))
            offset = draw(st.none() | st.integers(0, 3))
            summary = draw(st.none() | st.just("summary"))
            history.append(
                Condensation(forgotten_event_ids=forgotten, summary=summary, summary_offset=offset)
            )
        else:
            history.append(draw(paired_events))
    return history


@settings(max_examples=100, deadline=None)
@given(history=_histories(), cut=st.integers(0, 30))
def test_the_incremental_view_is_openhands_view_of_the_branch(history, cut):
    """state.view, computed step by step (and for a fork after a cut), is OpenHands' view."""
    cut = min(cut, len(history))
    log = EventLog()
    for position, event in enumerate(history):
        log = log.append(event)
        if position < cut:  # read views along the way: later ones extend cached ones
            assert [e.id for e in view_of(log).events] == _reference_view(history[: position + 1])
    fork = log.take(cut).extend(history[cut:])  # another line, sharing the cached prefix
    assert [e.id for e in view_of(fork).events] == _reference_view(history)
    assert [e.id for e in View.from_events(history).events] == _reference_view(history)


class _GrepAction(Action):
    pattern: str
    paths: tuple[str, ...] = ()


class _GrepObservation(Observation):
    matches: int = 0


class TestOpenHandsShapes:
    def test_action_and_observation_events_round_trip_through_the_store(self, make):
        """OpenHands' ActionEvent(action=..., tool_call=..., thought=[...]) and
        ObservationEvent(observation=..., action_id=...), subclass fields and all."""
        conversation = make(delete_on_close=False)
        call = MessageToolCall(id="c1", name="grep", arguments='{"pattern": "fork"}')
        action = conversation.append_event(
            ActionEvent(
                thought=[TextContent(text="Look for it.")],
                action=_GrepAction(pattern="fork", paths=("a.py",)),
                tool_name="grep",
                tool_call_id="c1",
                tool_call=call,
            )
        )
        observation = conversation.append_event(
            ObservationEvent(
                observation=_GrepObservation.from_text("a.py:1", matches=1),
                action_id=action.id,
                tool_name="grep",
                tool_call_id="c1",
            )
        )
        assert action.thought == "Look for it." and action.arguments == {"pattern": "fork"}
        assert observation.output == "a.py:1"
        sink = conversation.backend.sink
        stored = (  # in memory: the snapshot itself; persisted: read back by a new conversation
            conversation.state.events
            if sink is None
            else Conversation.resume(sink, conversation.id).state.events
        )
        again_action, again_observation = stored[-2], stored[-1]
        assert again_action == action and again_observation == observation
        assert isinstance(again_action.action, _GrepAction)
        assert again_action.action.paths == ("a.py",)
        assert isinstance(again_observation.observation, _GrepObservation)
        assert again_observation.observation.matches == 1

    def test_pending_actions_are_read_on_the_active_branch(self, make):
        conversation = make()
        root = conversation.append_event(_message("root"))
        conversation.append_event(ActionEvent(tool_name="grep", tool_call_id="c1", arguments={}))
        conversation.navigate_to(root.id)
        every = ConversationState.get_unmatched_actions(conversation.state.events)
        assert [a.tool_call_id for a in every] == ["c1"]
        assert ConversationState.get_unmatched_actions(conversation.state.active_branch()) == []

    def test_private_state_handle(self, make):
        """conversation._state: OpenHands' private live state, as a thin handle."""
        conversation = make()
        with conversation._state:
            conversation._state.append_event(_message("hi"))
        conversation._on_event(_message("again"))
        assert [e.text for e in conversation.state.events] == ["hi", "again"]
        conversation._state.agent_state = {"step": 1}
        conversation._state.agent_state = {**conversation._state.agent_state, "more": True}
        assert dict(conversation.state.agent_state) == {"step": 1, "more": True}
        with pytest.raises(InvalidValueError, match="drop"):
            conversation._state.agent_state = {}
        with pytest.raises(InvalidTypeError, match="immutable snapshot"):
            conversation._state.tags = {}
        assert conversation._state.leaf_event_id == conversation.state.leaf_event_id
