"""Tests for cowconv.conversation: Conversation on every backend, and fork's isolation.

The isolation machine and most tests run three times, from the ``backend``
fixture (tests/conftest.py): in memory, on a SQLite file, on an agent server.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pydantic
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from cowconv import (
    LLM,
    ROOT_PARENT_ID,
    Agent,
    Conversation,
    ConversationExistsError,
    ConversationState,
    EventNotFoundError,
    ExecutionStatus,
    MessageEvent,
    SQLiteStore,
    SystemPromptEvent,
    Tool,
    Workspace,
    resolve_tool,
    thaw,
)
from cowconv.testing import StubLLMServer
from tests.conftest import BACKENDS, Backend, message_texts, open_backend
from tests.strategies import events, json_objects, keys, str_maps, texts

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-test"), tools=[Tool(name="terminal")])
ALT_AGENT = Agent(llm=LLM(model="openai/gpt-4o-mini", usage_id="alt"))


def new_conversation(**kwargs) -> Conversation:
    return Conversation(agent=AGENT, workspace="/tmp", **kwargs)


@pytest.fixture
def agents(stub: StubLLMServer) -> tuple[Agent, Agent]:
    """Two agents thinking through the stub LLM (no tools: every run is one answer)."""
    settings_ = {**stub.llm_settings(), "retry_min_wait": 0, "retry_max_wait": 0}
    return Agent(llm=LLM(**settings_)), Agent(llm=LLM(**settings_, usage_id="alt"))


# -- the isolation property -------------------------------------------------------------


@dataclass
class Model:
    """What a conversation should look like, kept in plain lists and dicts."""

    id: str
    agent: Agent
    events: list = field(default_factory=list)
    tags: dict = field(default_factory=dict)
    agent_state: dict = field(default_factory=dict)
    skills: list = field(default_factory=list)
    cost: float = 0.0
    tokens: int = 0
    status: ExecutionStatus = ExecutionStatus.IDLE
    forked_from: str | None = None
    seen_ids: set = field(default_factory=set)  # on any branch: ids an append must avoid
    # Every history the conversation's active branch ever was (as event ids): its
    # branches must be exactly the ones no other contains.
    # (A dict: insertion order keeps hypothesis's draws reproducible.)
    seen: dict = field(default_factory=lambda: {(): None})

    def record(self) -> None:
        self.seen.setdefault(tuple(e.id for e in self.events), None)

    def leaves(self) -> set:
        return {h for h in self.seen if not any(o[: len(h)] == h and o != h for o in self.seen)}

    def next_parent_id(self) -> str | None:
        """OpenHands' rule: the last event of the branch; a new root after navigate_to(None)."""
        if self.events:
            return self.events[-1].id
        return ROOT_PARENT_ID if any(self.seen) else None

    def stamped(self, event):
        """``event`` as the conversation records it next: with its parent_id."""
        parent = self.next_parent_id()
        return event if parent is None else event.model_copy(update={"parent_id": parent})


def assert_parent_chains(state: ConversationState) -> None:
    """On every branch, each event's parent is the event before it; a root has none."""
    for branch in (*state.branches, state.branch):
        for position, event in enumerate(branch):
            if position == 0:
                assert event.parent_id in (None, ROOT_PARENT_ID)
            else:
                assert event.parent_id == branch[position - 1].id


def path_to_root(state: ConversationState, event_id: str) -> list[str]:
    """The ids from the root to ``event_id``, following parent_id over every branch."""
    by_id = {event.id: event for branch in state.branches for event in branch}
    path = []
    current = by_id[event_id]
    while True:
        path.append(current.id)
        if current.parent_id in (None, ROOT_PARENT_ID):
            return path[::-1]
        current = by_id[current.parent_id]


def check(state: ConversationState, model: Model) -> None:
    """``state`` shows exactly what ``model`` holds."""
    assert state.id == model.id
    assert list(state.branch) == model.events
    assert state.active_branch() == model.events
    assert len(state.branch) == len(model.events)
    # state.events: every event of every branch, each once (OpenHands' SDK keeps left branches).
    every_id = {event_id for history in model.seen for event_id in history}
    assert [e.id for e in state.events].__len__() == len(state.events) == len(every_id)
    assert {e.id for e in state.events} == every_id
    assert all(event_id in state.events for event_id in every_id)
    assert dict(state.tags) == model.tags
    assert thaw(state.agent_state) == model.agent_state
    assert list(state.activated_knowledge_skills) == model.skills
    # Compared as JSON, which masks the api key: a client attached by id sees it hidden.
    assert state.agent.model_dump(mode="json") == model.agent.model_dump(mode="json")
    assert state.stats.accumulated_cost == pytest.approx(model.cost)
    assert state.stats.prompt_tokens == model.tokens
    assert state.forked_from_conversation_id == model.forked_from
    assert state.execution_status is model.status
    assert {tuple(e.id for e in branch) for branch in state.branches} == model.leaves()
    assert state.leaf_event_id == (model.events[-1].id if model.events else None)
    assert state.head_is_empty == (not model.events and any(model.seen))
    assert_parent_chains(state)


class ForkIsolation(RuleBasedStateMachine):
    """A fork behaves exactly like a deep copy, on every backend.

    Random operations run over a growing tree of conversations and over a
    reference model of plain lists and dicts in which fork is
    ``copy.deepcopy``. After every step, every conversation's observable
    state must equal its model; ``reload`` reads a conversation back from
    where its backend keeps it (another process reading the SQLite file, a
    new connection to the server) and checks that too.
    """

    backend: Backend
    agents: tuple[Agent, Agent]

    conversations = Bundle("conversations")

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[tuple[Conversation, Model]] = []

    def _add(self, conversation: Conversation, model: Model) -> tuple[Conversation, Model]:
        self.pairs.append((conversation, model))
        return conversation, model

    @rule(target=conversations, tags=str_maps)
    def create(self, tags):
        agent = self.agents[0]
        conversation = self.backend.new(agent, tags=tags)
        return self._add(conversation, Model(id=conversation.id, agent=agent, tags=dict(tags)))

    @rule(pair=conversations, text=texts)
    def send_message(self, pair, text):
        conversation, model = pair
        # The agent's prompt goes first unless the last one recorded is the agent's (these
        # agents have no tools); random appends may have recorded other prompts.
        prompts = [e for e in model.events if isinstance(e, SystemPromptEvent)]
        current = (model.agent.system_prompt, ())
        stale = not prompts or (prompts[-1].system_prompt, prompts[-1].tools) != current
        expected_parent = model.next_parent_id()
        event = conversation.send_message(text)
        assert event.text == text and event.source == "user"
        added = list(conversation.state.branch)[len(model.events) :]
        assert added[0].parent_id == expected_parent
        if stale:
            prompt = added[0]
            assert isinstance(prompt, SystemPromptEvent)
            assert (prompt.system_prompt, prompt.tools) == current
            assert added == [prompt, event]
            assert event.parent_id == prompt.id
        else:
            assert added == [event]
        model.events.extend(added)
        model.seen_ids.update(e.id for e in added)
        model.record()

    @rule(pair=conversations, event=events)
    def append_event(self, pair, event):
        conversation, model = pair
        if event.id in model.seen_ids:
            return
        expected = model.stamped(event)
        assert conversation.append_event(event) == expected
        model.events.append(expected)
        model.seen_ids.add(event.id)
        model.record()

    @rule(pair=conversations, key=keys, value=st.none() | texts)
    def set_tag(self, pair, key, value):
        conversation, model = pair
        conversation.set_tag(key, value)
        if value is None:
            model.tags.pop(key, None)
        else:
            model.tags[key] = value

    @rule(pair=conversations, changes=json_objects)
    def update_agent_state(self, pair, changes):
        conversation, model = pair
        conversation.update_agent_state(changes)
        model.agent_state.update(copy.deepcopy(changes))

    @rule(pair=conversations, name=keys)
    def activate_skill(self, pair, name):
        conversation, model = pair
        conversation.activate_skill(name)
        if name not in model.skills:
            model.skills.append(name)

    @rule(pair=conversations)
    def run(self, pair):
        """The agent answers through the stub LLM: its events and cost are the run's own."""
        conversation, model = pair
        conversation.run()
        state = conversation.state
        assert list(state.branch)[: len(model.events)] == model.events
        added = list(state.branch)[len(model.events) :]
        if added:
            assert isinstance(added[-1], MessageEvent) and added[-1].source == "agent"
        model.events.extend(added)
        model.seen_ids.update(e.id for e in added)
        model.record()
        assert state.stats.prompt_tokens >= model.tokens
        model.cost, model.tokens = state.stats.accumulated_cost, state.stats.prompt_tokens
        model.status = ExecutionStatus.FINISHED

    @rule(pair=conversations, data=st.data())
    def navigate(self, pair, data):
        """Move the active branch back to an event of it (or to empty): a new branch starts."""
        conversation, model = pair
        at = data.draw(st.none() | st.integers(0, max(len(model.events) - 1, 0)), label="at")
        if at is not None and not model.events:
            at = None
        conversation.navigate_to(None if at is None else model.events[at].id)
        model.events = [] if at is None else model.events[: at + 1]
        model.record()

    @rule(pair=conversations)
    def reload(self, pair):
        """Read back from where the backend keeps it: the same conversation."""
        conversation, model = pair
        check(self.backend.reload(conversation), model)

    @rule(
        target=conversations,
        pair=conversations,
        title=st.none() | texts,
        tags=st.none() | str_maps,
        reset_metrics=st.booleans(),
        swap_agent=st.booleans(),
        data=st.data(),
    )
    def fork(self, pair, title, tags, reset_metrics, swap_agent, data):
        conversation, model = pair
        at = None
        if model.events and data.draw(st.booleans(), label="from_event"):
            at = data.draw(st.integers(0, len(model.events) - 1), label="at")
        options = dict(
            title=title,
            tags=tags,
            reset_metrics=reset_metrics,
            from_event_id=None if at is None else model.events[at].id,
        )
        if swap_agent and self.backend.kind == "remote":
            with pytest.raises(NotImplementedError, match="not supported"):
                conversation.fork(agent=self.agents[1], **options)
            swap_agent = False
        fork = conversation.fork(agent=self.agents[1] if swap_agent else None, **options)
        self.backend.opened.append(fork)
        if at is not None:  # OpenHands' slice: the path from the root to that event
            path = path_to_root(conversation.state, model.events[at].id)
            assert [e.id for e in fork.state.events] == path
        copied = copy.deepcopy(model)
        copied.id = fork.id
        if at is not None:
            copied.events = copied.events[: at + 1]
            copied.seen = {(): None}  # a fork from an event takes that one history only
            copied.record()
        copied.tags = dict(tags or {})
        if title is not None:
            copied.tags["title"] = title
        if swap_agent:
            copied.agent = self.agents[1]
        if reset_metrics:
            copied.cost, copied.tokens = 0.0, 0
        copied.status = ExecutionStatus.IDLE
        copied.forked_from = model.id
        return self._add(fork, copied)

    @rule(pair=conversations, data=st.data())
    def try_to_mutate(self, pair, data):
        conversation, _ = pair
        state = conversation.state
        attempts = [lambda: setattr(state, "tags", {}), lambda: state.tags.__setitem__("k", "v")]
        attempts.append(lambda: state.agent_state.__setitem__("k", 1))
        attempts.append(lambda: setattr(state.agent, "tools", ()))
        if state.events:
            event = data.draw(st.sampled_from(list(state.events)))
            attempts.append(lambda: setattr(event, "id", "x"))
            if isinstance(event, MessageEvent) and event.content:
                attempts.append(lambda: setattr(event.content[0], "type", "x"))
        attempt = data.draw(st.sampled_from(attempts))
        with pytest.raises((TypeError, AttributeError, pydantic.ValidationError)):
            attempt()

    @invariant()
    def every_conversation_matches_its_model(self):
        for conversation, model in self.pairs:
            check(conversation.state, model)


@pytest.mark.slow
@pytest.mark.parametrize("kind", BACKENDS)
def test_fork_isolation(kind, agents, request, tmp_path: Path):
    """Fork is deep-copy isolation on every backend (100 random programs each)."""
    server = request.getfixturevalue("in_process_server") if kind == "remote" else None
    # One reader process for every program: it opens each program's store file afresh.
    reader = request.getfixturevalue("store_reader") if kind == "sqlite" else None

    class Machine(ForkIsolation):
        def __init__(self) -> None:
            super().__init__()
            # One backend per program: a fresh store file, conversations of this program only.
            directory = tmp_path / uuid.uuid4().hex
            directory.mkdir()
            self.backend = open_backend(kind, directory, server, reader)
            self.agents = agents

        def teardown(self) -> None:
            self.backend.close()

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=100,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )


# -- fork, rule by rule (OpenHands' SDK's table) -----------------------------------------------


class TestFork:
    def test_same_events_new_id(self, backend, agents):
        """The fork has the source's events and its own new uuid."""
        source = backend.new(agents[0])
        source.send_message("Analyse the sales report.")
        fork = source.fork()
        assert fork.id != source.id and isinstance(fork.id, uuid.UUID) and fork.id.version == 4
        assert list(fork.state.events) == list(source.state.events)

    def test_shares_instead_of_copying(self):
        """Events, agent state and the agent are shared objects, not copies (in memory)."""
        source = new_conversation()
        source.send_message("hi")
        source.update_agent_state({"plan": ["a", "b"]})
        fork = source.fork()
        # Each conversation's .state guards its own view of the same structures.
        assert fork.state.events._chunks is source.state.events._chunks
        assert fork.backend.snapshot().agent_state is source.backend.snapshot().agent_state
        assert fork.state.agent is source.state.agent  # .agent is a view with its own metrics

    def test_source_stays_unchanged(self, backend, agents):
        """Anything done on the fork never touches the source (OpenHands' SDK example)."""
        source = backend.new(agents[0])
        source.send_message("one")
        before = len(source.state.events)
        fork = source.fork()
        fork.send_message("Extra question")
        fork.set_tag("x", "y")
        fork.update_agent_state({"k": 1})
        fork.activate_skill("git")
        state = source.state
        assert len(state.events) == before
        assert dict(state.tags) == {} and dict(state.agent_state) == {}
        assert state.activated_knowledge_skills == ()

    def test_explicit_id(self, backend, agents):
        """conversation_id sets the fork's id."""
        assert backend.new(agents[0]).fork(conversation_id="fork-1").id == "fork-1"

    def test_taken_id_rejected(self, backend, agents):
        """The source's id, or another conversation's in the same store, is refused."""
        source = backend.new(agents[0])
        with pytest.raises(ConversationExistsError, match="already exists"):
            source.fork(conversation_id=source.id)
        if backend.kind != "memory":  # in memory, conversations share no store to clash in
            other = source.fork()
            with pytest.raises(ConversationExistsError, match="already exists"):
                source.fork(conversation_id=other.id)

    @pytest.mark.parametrize("bad", ["", "   ", 5])
    def test_bad_id_rejected(self, backend, agents, bad):
        """An empty or non-string id is a ValueError."""
        with pytest.raises(ValueError):
            backend.new(agents[0]).fork(conversation_id=bad)

    def test_title_and_tags(self, backend, agents):
        """title becomes tags['title']; tags are fresh, not inherited."""
        source = backend.new(agents[0], tags={"owner": "ci"})
        fork = source.fork(
            title="Debug investigation",
            tags={"purpose": "debugging", "triggered_by": "ci-pipeline"},
        )
        assert dict(fork.state.tags) == {
            "title": "Debug investigation",
            "purpose": "debugging",
            "triggered_by": "ci-pipeline",
        }
        assert fork.state.title == "Debug investigation"
        assert dict(source.fork().state.tags) == {}

    def test_bad_tags_rejected(self, backend, agents):
        """Tags must map str to str."""
        with pytest.raises(TypeError):
            backend.new(agents[0]).fork(tags={"n": 1})  # type: ignore[dict-item]

    def test_agent_replaced(self, backend, agents):
        """agent= swaps the agent on the fork only; an agent server does not support it."""
        source = backend.new(agents[0])
        with pytest.raises(TypeError):
            source.fork(agent="gpt-4o")  # type: ignore[arg-type]
        if backend.kind == "remote":  # documented in docs/remote.md, as in OpenHands' SDK
            with pytest.raises(NotImplementedError, match="not supported"):
                source.fork(agent=agents[1])
            return
        fork = source.fork(agent=agents[1])
        assert fork.agent == agents[1] and source.agent == agents[0]

    def test_workspace_shared(self, backend, agents):
        """The fork works in the same workspace."""
        source = backend.new(agents[0])
        assert source.fork().workspace == source.workspace == backend.workspace

    def test_metrics_reset_by_default(self, backend, agents):
        """Stats start at zero unless reset_metrics=False."""
        source = backend.new(agents[0])
        source.send_message("hi")
        source.run()
        spent = source.state.stats
        assert spent.prompt_tokens > 0
        assert source.fork().state.stats.prompt_tokens == 0
        assert source.fork(reset_metrics=False).state.stats == spent

    def test_skills_and_agent_state_carried(self, backend, agents):
        """Activated skills and agent state come along."""
        source = backend.new(agents[0])
        source.activate_skill("git")
        source.update_agent_state({"step": 3})
        fork = source.fork()
        assert fork.state.activated_knowledge_skills == ("git",)
        assert fork.state.agent_state["step"] == 3

    def test_status_always_idle(self, backend, agents):
        """The fork starts idle whatever the source's status."""
        source = backend.new(agents[0])
        source.run()
        assert source.state.execution_status is ExecutionStatus.FINISHED
        assert source.fork().state.execution_status is ExecutionStatus.IDLE

    def test_lineage(self, backend, agents):
        """The fork records its source and the event it was forked at."""
        source = backend.new(agents[0])
        first = source.send_message("one")
        last = source.send_message("two")
        tip = source.fork()
        early = source.fork(from_event_id=first.id)
        assert tip.state.forked_from_conversation_id == source.id
        # As OpenHands' SDK: a whole-conversation fork names no event; the count says where.
        assert tip.state.forked_from_event_id is None
        assert tip.state.forked_from_event_count == 3 and tip.state.events[-1] == last  # + prompt
        assert early.state.forked_from_event_id == first.id
        assert early.state.forked_from_event_count == 2  # the system prompt, "one"
        assert backend.new(agents[0]).fork().state.forked_from_event_count == 0

    def test_from_event_id(self, backend, agents):
        """from_event_id keeps the history up to and including that event."""
        source = backend.new(agents[0])
        first = source.send_message("one")
        source.send_message("two")
        early = source.fork(from_event_id=first.id)
        assert message_texts(early.state.events) == ["one"]
        early.send_message("other two")
        assert message_texts(source.state.events) == ["one", "two"]

    def test_unknown_from_event_id(self, backend, agents):
        """An unknown from_event_id is the same EventNotFoundError (a KeyError) everywhere."""
        with pytest.raises(EventNotFoundError, match="no-such-event") as raised:
            backend.new(agents[0]).fork(from_event_id="no-such-event")
        assert isinstance(raised.value, KeyError)

    def test_callbacks_are_the_forks_own(self, backend, agents):
        """fork(callbacks=...) gives the fork its callbacks; the source's stay with the source."""
        seen_by_source, seen_by_fork = [], []
        source = backend.new(agents[0], callbacks=[seen_by_source.append])
        fork = source.fork(callbacks=[seen_by_fork.append])
        on_fork = fork.send_message("fork only")
        on_source = source.send_message("source only")
        assert seen_by_fork == list(fork.state.events) and seen_by_fork[-1] == on_fork
        assert seen_by_source == list(source.state.events) and seen_by_source[-1] == on_source
        assert seen_by_fork[0] != seen_by_source[0]  # each records its own system prompt

    def test_fork_of_fork(self, backend, agents):
        """Forks of forks stay independent of every ancestor."""
        a = backend.new(agents[0])
        a.send_message("a")
        b = a.fork()
        b.send_message("b")
        c = b.fork()
        c.send_message("c")
        assert [message_texts(x.state.events) for x in (a, b, c)] == [
            ["a"],
            ["a", "b"],
            list("abc"),
        ]
        assert [len(x.state.events) for x in (a, b, c)] == [2, 3, 4]  # a's prompt, shared


class TestConversation:
    def test_workspace_from_path(self):
        """A path string becomes a Workspace."""
        assert new_conversation().workspace == Workspace(working_dir="/tmp")

    @pytest.mark.parametrize("kind", ["missing", "file"])
    def test_rejects_a_workspace_that_is_not_a_directory(self, tmp_path, kind):
        """A missing workspace directory (or a file) is refused at Conversation(), unsaved."""
        from cowconv import InvalidValueError, SQLiteStore

        workspace = tmp_path / "workspace"
        if kind == "file":
            workspace.write_text("not a directory")
        with pytest.raises(InvalidValueError, match="workspace directory") as raised:
            Conversation(agent=AGENT, workspace=workspace, persistence_dir=tmp_path / "data")
        assert isinstance(raised.value, ValueError)
        assert (
            not (tmp_path / "data").exists()
            or SQLiteStore(tmp_path / "data" / "cowconv.db").list() == []
        )

    def test_rejects_non_agent(self, backend):
        """agent must be an Agent."""
        with pytest.raises(TypeError):
            backend.new("gpt")  # type: ignore[arg-type]

    def test_send_message_rejects_non_str(self, backend, agents):
        """send_message takes text."""
        with pytest.raises(TypeError):
            backend.new(agents[0]).send_message(42)  # type: ignore[arg-type]

    def test_state_snapshots_never_change(self, backend, agents):
        """A snapshot read earlier stays as it was."""
        conversation = backend.new(agents[0])
        before = conversation.state
        conversation.send_message("hi")
        assert len(before.events) == 0 and len(conversation.state.events) == 2  # prompt, "hi"
        assert isinstance(before, ConversationState)

    def test_every_method_changes_the_state(self, backend, agents):
        """append_event, set_tag, update_agent_state, activate_skill, run: each is seen."""
        conversation = backend.new(agents[0], tags={"a": "1"})
        event = conversation.append_event(MessageEvent(source="user", role="user", content="hi"))
        conversation.set_tag("b", "2")
        conversation.set_tag("a", None)
        conversation.update_agent_state({"plan": [1, 2]})
        conversation.activate_skill("sql")
        conversation.activate_skill("sql")
        conversation.run()
        state = conversation.state
        assert state.events[0] == event and state.events[-1].source == "agent"
        assert dict(state.tags) == {"b": "2"}
        assert thaw(state.agent_state) == {"plan": [1, 2]}
        assert state.activated_knowledge_skills == ("sql",)
        assert state.execution_status is ExecutionStatus.FINISHED
        assert backend.reload(conversation).events == state.events

    def test_callbacks_see_every_event_in_order(self, backend, agents):
        """Callbacks get each new event once, in order; a failing one does not stop the others."""
        seen = []

        def broken(event):
            raise RuntimeError("visualiser crashed")

        conversation = backend.new(agents[0], callbacks=[broken, seen.append])
        a = conversation.send_message("a")
        b = conversation.send_message("b")
        conversation.run()
        assert seen[1:3] == [a, b] and seen == list(conversation.state.events)

    def test_failed_save_keeps_previous_state(self):
        """If the sink refuses a change, the conversation keeps its previous state."""

        class RefusingSink:
            def save(self, previous, current):
                if previous is not None:
                    raise OSError("disk full")

        conversation = Conversation(AGENT, ".", store=RefusingSink())
        with pytest.raises(OSError):
            conversation.send_message("lost?")
        assert len(conversation.state.events) == 0


class TestConcurrency:
    @pytest.mark.slow
    def test_fork_while_appending_sees_consistent_prefixes(self):
        """Forks taken while another thread appends are prefixes of the final history."""
        source = new_conversation()
        done = threading.Event()

        def writer():
            for i in range(3000):
                source.send_message(str(i))
            done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        forks = []
        while not done.is_set():
            forks.append(source.fork())
        thread.join()
        final = list(source.state.events)
        lengths = [len(f.state.events) for f in forks]
        assert lengths == sorted(lengths)
        # Forks are cheap, so thousands share a length: the first of each length is checked
        # event by event, every other one is compared with it (a list comparison, in C).
        checked: dict[int, list[object]] = {}
        for fork in forks:
            fork_events = list(fork.state.events)
            known = checked.get(len(fork_events))
            if known is not None:
                assert fork_events == known
                continue
            assert all(a is b for a, b in zip(fork_events, final, strict=False))
            assert message_texts(fork_events) == [str(i) for i in range(len(fork_events) - 1)]
            checked[len(fork_events)] = fork_events

    def test_concurrent_writers_lose_nothing(self):
        """Messages sent from several threads are all recorded exactly once."""
        conversation = new_conversation()

        def writer(name):
            for i in range(500):
                conversation.send_message(f"{name}-{i}")

        threads = [threading.Thread(target=writer, args=(n,)) for n in "abcd"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        texts_seen = sorted(message_texts(conversation.state.events))
        assert texts_seen == sorted(f"{n}-{i}" for n in "abcd" for i in range(500))
        # The first messages raced: one system prompt went in, before all of them.
        assert [e.kind for e in conversation.state.events].count("SystemPromptEvent") == 1
        assert conversation.state.events[0].kind == "SystemPromptEvent"


# -- the system prompt: recorded before the first message, as OpenHands' SDK does --------------


def kinds(state: ConversationState) -> list[str]:
    return [event.kind for event in state.events]


class TestSystemPrompt:
    def test_recorded_just_before_the_first_message(self, backend, agents):
        """A new conversation is empty; send_message() records the prompt, then the message."""
        conversation = backend.new(agents[0])
        assert kinds(conversation.state) == []
        first = conversation.send_message("one")
        prompt = conversation.state.events[0]
        assert isinstance(prompt, SystemPromptEvent)
        assert prompt.system_prompt == agents[0].system_prompt and prompt.tools == ()
        assert list(conversation.state.events) == [prompt, first]
        conversation.send_message("two")
        conversation.run()
        assert kinds(conversation.state) == [
            "SystemPromptEvent",
            "MessageEvent",
            "MessageEvent",
            "MessageEvent",
        ]
        assert backend.reload(conversation).events == conversation.state.events

    def test_the_prompt_carries_the_tools_specs(self, backend, stub_agent):
        """The recorded prompt holds each tool's spec, as the model is sent them."""
        conversation = backend.new(stub_agent)
        conversation.send_message("hi")
        (prompt,) = [e for e in conversation.state.events if isinstance(e, SystemPromptEvent)]
        assert [spec["function"]["name"] for spec in prompt.tools] == ["terminal"]
        assert thaw(prompt.tools[0]) == resolve_tool("terminal").spec()

    def test_callbacks_see_the_prompt_first(self, backend, agents):
        """Callbacks get the prompt, then the message: the order of the history."""
        seen: list = []
        conversation = backend.new(agents[0], callbacks=[seen.append])
        message = conversation.send_message("hi")
        assert [e.kind for e in seen] == ["SystemPromptEvent", "MessageEvent"] and seen[
            1
        ] == message
        assert seen == list(conversation.state.events)

    def test_raw_appends_add_no_prompt(self, backend, agents):
        """append_event() records the event as given; a run then records the prompt it needs."""
        conversation = backend.new(agents[0])
        event = conversation.append_event(MessageEvent(source="user", role="user", content="hi"))
        assert list(conversation.state.events) == [event]
        conversation.run()
        assert kinds(conversation.state) == ["MessageEvent", "SystemPromptEvent", "MessageEvent"]

    def test_a_fork_then_a_message_keeps_one_prompt(self, backend, agents):
        """A fork shares its source's prompt; its next message records none."""
        source = backend.new(agents[0])
        source.send_message("one")
        fork = source.fork()
        backend.opened.append(fork)
        fork.send_message("two")
        assert kinds(fork.state) == ["SystemPromptEvent", "MessageEvent", "MessageEvent"]
        assert fork.state.events[0] == source.state.events[0]
        assert kinds(source.state) == ["SystemPromptEvent", "MessageEvent"]
        assert backend.reload(fork).events == fork.state.events

    def test_a_fork_of_an_empty_conversation_records_its_own(self, backend, agents):
        """Forks of an empty conversation stay empty until their first message."""
        source = backend.new(agents[0])
        fork = source.fork()
        backend.opened.append(fork)
        assert kinds(fork.state) == []
        fork.send_message("hi")
        assert (
            kinds(fork.state) == ["SystemPromptEvent", "MessageEvent"] and kinds(source.state) == []
        )

    def test_another_prompt_is_recorded_before_the_forks_next_message(self, backend, stub_llm):
        """fork(agent=...) with another prompt: the new prompt goes just before the next message."""
        english = Agent(llm=stub_llm, system_prompt="Answer in English.")
        french = Agent(llm=stub_llm, system_prompt="Answer in French.")
        source = backend.new(english)
        source.send_message("Hello")
        if backend.kind == "remote":  # fork(agent=...) is local only (docs/remote.md)
            with pytest.raises(NotImplementedError):
                source.fork(agent=french)
            return
        fork = source.fork(agent=french)
        backend.opened.append(fork)
        assert kinds(fork.state) == ["SystemPromptEvent", "MessageEvent"]  # nothing recorded yet
        fork.send_message("Bonjour")
        prompts = [e.system_prompt for e in fork.state.events if isinstance(e, SystemPromptEvent)]
        assert prompts == ["Answer in English.", "Answer in French."]
        assert kinds(fork.state) == [
            "SystemPromptEvent",
            "MessageEvent",
            "SystemPromptEvent",
            "MessageEvent",
        ]
        fork.send_message("Encore")
        assert kinds(fork.state)[-1] == "MessageEvent" and len(fork.state.events) == 5
        assert backend.reload(fork).events == fork.state.events

    def test_other_tools_are_a_new_prompt(self, tmp_path, stub_agent):
        """Same prompt, other tools: the fork records a prompt with its own tool specs."""
        source = Conversation(agent=stub_agent, workspace=tmp_path)
        source.send_message("one")
        source.send_message("two")  # the recorded prompt was found current
        fork = source.fork(agent=stub_agent.model_copy(update={"tools": ()}))
        fork.send_message("three")
        prompts = [e for e in fork.state.events if isinstance(e, SystemPromptEvent)]
        assert [len(prompt.tools) for prompt in prompts] == [1, 0]
        assert kinds(fork.state)[-2:] == ["SystemPromptEvent", "MessageEvent"]
        source.send_message("four")
        assert kinds(source.state).count("SystemPromptEvent") == 1

    def test_resuming_from_sqlite_records_no_second_prompt(self, tmp_path, agents):
        """Reopened (same process or a new one), a stored conversation keeps its one prompt."""
        store = SQLiteStore(tmp_path)
        conversation = Conversation(
            agent=agents[0], workspace=tmp_path, store=store, conversation_id="c1"
        )
        conversation.send_message("one")
        conversation.close()
        again = Conversation(agent=agents[0], workspace=tmp_path, store=store, conversation_id="c1")
        again.send_message("two")
        Conversation.resume(store, "c1").send_message("three")
        store.close()
        script = (
            "import sys; from cowconv import Conversation\n"
            "Conversation.resume(sys.argv[1], 'c1').send_message('four')\n"
            "print([e.kind for e in Conversation.resume(sys.argv[1], 'c1').state.events])\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            check=True,
        )
        assert result.stdout.strip() == str(["SystemPromptEvent"] + ["MessageEvent"] * 4)
