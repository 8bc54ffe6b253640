"""Tests for cowconv._conversation: Conversation, and fork's deep-copy isolation."""

from __future__ import annotations

import copy
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pydantic
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationState,
    ExecutionStatus,
    MessageEvent,
    SQLiteStore,
    Tool,
    Usage,
    Workspace,
    thaw,
)
from tests.strategies import events, json_objects, keys, str_maps, texts

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-test"), tools=[Tool(name="terminal")])
ALT_AGENT = Agent(llm=LLM(model="openai/gpt-4o-mini", usage_id="alt"))


def new_conversation(**kwargs) -> Conversation:
    return Conversation(agent=AGENT, workspace="/tmp", **kwargs)


def spend(conversation: Conversation, usage_id: str, cost: float, tokens: int) -> None:
    # Stats change through LLM calls in run(); tests of fork's metrics rule need them directly.
    usage = Usage(accumulated_cost=cost, prompt_tokens=tokens, completion_tokens=tokens)
    conversation._commit(lambda s: s._replace(stats=s.stats.record(usage_id, usage)))


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
    forked_from: str | None = None
    # Every history the conversation's active branch ever was (as event ids): its
    # branches must be exactly the ones no other contains.
    # (A dict: insertion order keeps hypothesis's draws reproducible.)
    seen: dict = field(default_factory=lambda: {(): None})

    def record(self) -> None:
        self.seen.setdefault(tuple(e.id for e in self.events), None)

    def leaves(self) -> set:
        return {h for h in self.seen if not any(o[: len(h)] == h and o != h for o in self.seen)}


class ForkIsolation(RuleBasedStateMachine):
    """A fork behaves exactly like a deep copy.

    Random operations run over a growing tree of conversations and over a
    reference model of plain lists and dicts in which fork is
    ``copy.deepcopy``. After every step, every conversation's observable
    state must equal its model.
    """

    conversations = Bundle("conversations")

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[tuple[Conversation, Model]] = []
        self.every_event: dict = {}

    def _add(self, conversation: Conversation, model: Model) -> tuple[Conversation, Model]:
        self.pairs.append((conversation, model))
        return conversation, model

    @rule(target=conversations, tags=str_maps)
    def create(self, tags):
        conversation = self.new(tags=tags)
        return self._add(conversation, Model(id=conversation.id, agent=AGENT, tags=dict(tags)))

    @rule(pair=conversations, text=texts)
    def send_message(self, pair, text):
        conversation, model = pair
        event = conversation.send_message(text)
        assert event.text == text and event.source == "user"
        model.events.append(event)
        model.record()

    @rule(pair=conversations, event=events)
    def append_event(self, pair, event):
        conversation, model = pair
        if any(e.id == event.id for e in model.events):
            return
        conversation.append_event(event)
        model.events.append(event)
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

    @rule(pair=conversations, cost=st.floats(0, 10), tokens=st.integers(0, 100))
    def spend(self, pair, cost, tokens):
        conversation, model = pair
        spend(conversation, "default", cost, tokens)
        model.cost += cost
        model.tokens += tokens

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
        fork = conversation.fork(
            title=title,
            tags=tags,
            reset_metrics=reset_metrics,
            agent=ALT_AGENT if swap_agent else None,
            from_event_id=None if at is None else model.events[at].id,
        )
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
            copied.agent = ALT_AGENT
        if reset_metrics:
            copied.cost, copied.tokens = 0.0, 0
        copied.forked_from = model.id
        return self._add(fork, copied)

    @rule(pair=conversations, data=st.data())
    def navigate(self, pair, data):
        """Move the active branch to any event of any branch (or to empty)."""
        conversation, model = pair
        every = list(dict.fromkeys(event_id for history in model.seen for event_id in history))
        event_id = data.draw(st.none() | st.sampled_from(every) if every else st.none())
        conversation.navigate_to(event_id)
        if event_id is None:
            model.events = []
        else:
            history = next(h for h in model.seen if event_id in h)
            wanted = history[: history.index(event_id) + 1]
            by_id = {e.id: e for c, m in self.pairs for e in m.events}
            by_id.update(self.every_event)
            model.events = [by_id[i] for i in wanted]
        model.record()

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
            state = conversation.state
            for branch in state.branches:
                self.every_event.update((e.id, e) for e in branch)
            assert {tuple(e.id for e in b) for b in state.branches} == model.leaves()
            assert state.leaf_event_id == (model.events[-1].id if model.events else None)
            assert state.id == model.id
            assert list(state.events) == model.events
            assert len(state.events) == len(model.events)
            assert dict(state.tags) == model.tags
            assert thaw(state.agent_state) == model.agent_state
            assert list(state.activated_knowledge_skills) == model.skills
            assert state.agent == model.agent
            assert state.stats.accumulated_cost == pytest.approx(model.cost)
            assert state.stats.prompt_tokens == model.tokens
            assert state.forked_from_conversation_id == model.forked_from
            assert state.execution_status is ExecutionStatus.IDLE

    def new(self, **kwargs) -> Conversation:
        return new_conversation(**kwargs)


TestForkIsolation = ForkIsolation.TestCase
TestForkIsolation.settings = settings(max_examples=75, stateful_step_count=40, deadline=None)


class StoredForkIsolation(ForkIsolation):
    """The same machine on conversations written through an SQLite store (forks, branches)."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory()
        self.store = SQLiteStore(Path(self.directory.name) / "cowconv.db")

    def new(self, **kwargs) -> Conversation:
        return new_conversation(store=self.store, **kwargs)

    @invariant()
    def the_store_holds_what_each_conversation_shows(self):
        for conversation, _ in self.pairs:
            stored = self.store.load(conversation.id)
            assert list(stored.events) == list(conversation.state.events)
            assert [list(b) for b in stored.branches] == [
                list(b) for b in conversation.state.branches
            ]

    def teardown(self) -> None:
        self.store.close()
        self.directory.cleanup()


TestStoredForkIsolation = StoredForkIsolation.TestCase
TestStoredForkIsolation.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)


# -- fork, rule by rule (the seed's table) -----------------------------------------------


class TestFork:
    def test_same_events_new_id(self):
        """The fork has the source's events and its own new uuid."""
        source = new_conversation()
        source.send_message("Analyse the sales report.")
        fork = source.fork()
        assert fork.id != source.id and isinstance(fork.id, uuid.UUID) and fork.id.version == 4
        assert fork.state.events == source.state.events

    def test_shares_instead_of_copying(self):
        """Events, agent state and the agent are shared objects, not copies."""
        source = new_conversation()
        source.send_message("hi")
        source.update_agent_state({"plan": ["a", "b"]})
        fork = source.fork()
        # Each conversation's .state guards its own view of the same structures.
        assert fork.state.events._chunks is source.state.events._chunks
        assert fork.state.agent_state._buckets is source.state.agent_state._buckets
        assert fork.agent is source.agent

    def test_source_stays_unchanged(self):
        """Anything done on the fork never touches the source (seed example)."""
        source = new_conversation()
        source.send_message("one")
        before = len(source.state.events)
        fork = source.fork()
        fork.send_message("Extra question")
        fork.set_tag("x", "y")
        fork.update_agent_state({"k": 1})
        assert len(source.state.events) == before
        assert dict(source.state.tags) == {} and dict(source.state.agent_state) == {}

    def test_explicit_id(self):
        """conversation_id sets the fork's id."""
        assert new_conversation().fork(conversation_id="fork-1").id == "fork-1"

    def test_source_id_rejected(self):
        """Reusing the source's id is a ValueError."""
        source = new_conversation()
        with pytest.raises(ValueError, match="source"):
            source.fork(conversation_id=source.id)

    @pytest.mark.parametrize("bad", ["", "   ", 5])
    def test_bad_id_rejected(self, bad):
        """An empty or non-string id is a ValueError."""
        with pytest.raises(ValueError):
            new_conversation().fork(conversation_id=bad)

    def test_title_and_tags(self):
        """title becomes tags['title']; tags are fresh, not inherited."""
        source = new_conversation(tags={"owner": "ci"})
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

    def test_bad_tags_rejected(self):
        """Tags must map str to str."""
        with pytest.raises(TypeError):
            new_conversation().fork(tags={"n": 1})  # type: ignore[dict-item]

    def test_agent_replaced(self):
        """agent= swaps the agent on the fork only."""
        source = new_conversation()
        fork = source.fork(agent=ALT_AGENT)
        assert fork.agent is ALT_AGENT and source.agent is AGENT
        with pytest.raises(TypeError):
            source.fork(agent="gpt-4o")  # type: ignore[arg-type]

    def test_workspace_shared(self):
        """The fork works in the same workspace."""
        source = new_conversation()
        assert source.fork().workspace is source.workspace

    def test_metrics_reset_by_default(self):
        """Stats start at zero unless reset_metrics=False."""
        source = new_conversation()
        spend(source, "default", 1.5, 10)
        assert source.fork().state.stats.accumulated_cost == 0
        kept = source.fork(reset_metrics=False).state.stats
        assert kept.accumulated_cost == 1.5 and kept.by_usage_id["default"].prompt_tokens == 10

    def test_skills_and_agent_state_carried(self):
        """Activated skills and agent state come along."""
        source = new_conversation()
        source.activate_skill("git")
        source.update_agent_state({"step": 3})
        fork = source.fork()
        assert fork.state.activated_knowledge_skills == ("git",)
        assert fork.state.agent_state["step"] == 3

    def test_status_always_idle(self):
        """The fork starts idle whatever the source's status."""
        source = new_conversation()
        source._commit(lambda s: s._replace(execution_status=ExecutionStatus.FINISHED))
        assert source.fork().state.execution_status is ExecutionStatus.IDLE

    def test_lineage(self):
        """The fork records its source and the event it was forked at."""
        source = new_conversation()
        first = source.send_message("one")
        last = source.send_message("two")
        tip = source.fork()
        early = source.fork(from_event_id=first.id)
        assert tip.state.forked_from_conversation_id == source.id
        # As the seed: a whole-conversation fork names no event; the count says where.
        assert tip.state.forked_from_event_id is None
        assert tip.state.forked_from_event_count == 2 and tip.state.events[-1] == last
        assert early.state.forked_from_event_id == first.id
        assert early.state.forked_from_event_count == 1
        assert new_conversation().fork().state.forked_from_event_count == 0

    def test_from_event_id(self):
        """from_event_id keeps the history up to and including that event."""
        source = new_conversation()
        first = source.send_message("one")
        source.send_message("two")
        early = source.fork(from_event_id=first.id)
        assert [e.text for e in early.state.events] == ["one"]
        early.send_message("other two")
        assert [e.text for e in source.state.events] == ["one", "two"]

    def test_unknown_from_event_id(self):
        """An unknown from_event_id is a ValueError naming it."""
        with pytest.raises(ValueError, match="no-such-event"):
            new_conversation().fork(from_event_id="no-such-event")

    def test_callbacks_are_the_forks_own(self):
        """fork(callbacks=...) gives the fork its callbacks; the source's stay with the source."""
        seen_by_source, seen_by_fork = [], []
        source = new_conversation(callbacks=[seen_by_source.append])
        fork = source.fork(callbacks=[seen_by_fork.append])
        on_fork = fork.send_message("fork only")
        on_source = source.send_message("source only")
        assert seen_by_fork == [on_fork] and seen_by_source == [on_source]

    def test_fork_of_fork(self):
        """Forks of forks stay independent of every ancestor."""
        a = new_conversation()
        a.send_message("a")
        b = a.fork()
        b.send_message("b")
        c = b.fork()
        c.send_message("c")
        assert [len(x.state.events) for x in (a, b, c)] == [1, 2, 3]


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

    def test_rejects_non_agent(self):
        """agent must be an Agent."""
        with pytest.raises(TypeError):
            Conversation(agent="gpt", workspace="/tmp")  # type: ignore[arg-type]

    def test_send_message_rejects_non_str(self):
        """send_message takes text."""
        with pytest.raises(TypeError):
            new_conversation().send_message(42)  # type: ignore[arg-type]

    def test_state_snapshots_never_change(self):
        """A snapshot read earlier stays as it was."""
        conversation = new_conversation()
        before = conversation.state
        conversation.send_message("hi")
        assert len(before.events) == 0 and len(conversation.state.events) == 1
        assert isinstance(before, ConversationState)

    def test_callbacks_see_every_event_in_order(self):
        """Callbacks get each new event once, in order; a failing one does not stop the others."""
        seen = []

        def broken(event):
            raise RuntimeError("visualiser crashed")

        conversation = new_conversation(callbacks=[broken, seen.append])
        a = conversation.send_message("a")
        b = conversation.send_message("b")
        assert seen == [a, b]

    def test_failed_save_keeps_previous_state(self):
        """If the sink refuses a change, the conversation keeps its previous state."""

        class RefusingSink:
            def save(self, previous, current):
                if previous is not None:
                    raise OSError("disk full")

        conversation = Conversation._from_state(new_conversation().state, sink=RefusingSink())
        with pytest.raises(OSError):
            conversation.send_message("lost?")
        assert len(conversation.state.events) == 0


class TestConcurrency:
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
        for fork in forks:
            fork_events = list(fork.state.events)
            assert all(a is b for a, b in zip(fork_events, final, strict=False))
            assert [e.text for e in fork_events] == [str(i) for i in range(len(fork_events))]

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
        texts_seen = sorted(e.text for e in conversation.state.events)
        assert texts_seen == sorted(f"{n}-{i}" for n in "abcd" for i in range(500))
