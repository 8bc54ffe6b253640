"""The conversation tree: leaf_event_id, navigate_to, branches, and fork's agreement with them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    ROOT_PARENT_ID,
    Agent,
    Conversation,
    ConversationState,
    EventLog,
    EventNotFoundError,
    ExecutionStatus,
    InvalidTypeError,
    MemoryStore,
    Message,
    MessageEvent,
    PauseEvent,
    RemoteConversation,
    RemoteError,
    SQLiteStore,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.core.tree import EventTree, extend_active, history_to, navigate
from tests.conftest import message_texts

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-test"))
DATA_DIRS: dict = {}  # the data dir of each remote conversation's server
DSNS: dict = {}  # the PostgreSQL database of each conversation stored there


def texts(history) -> list[str]:
    return message_texts(history)


def three(conversation: Conversation) -> list[MessageEvent]:
    return [conversation.send_message(text) for text in ("root", "a1", "a2")]


def in_postgres(dsn: str) -> Conversation:
    conversation = Conversation(agent=AGENT, workspace=".", visualizer=None, store=dsn)
    DSNS[conversation.id] = dsn
    return conversation


@pytest.fixture(params=["memory", "sqlite", "postgres", "remote"])
def conversation(request, tmp_path) -> Iterator[Conversation]:
    """A conversation in memory, in an SQLite or PostgreSQL store, or on an agent server."""
    if request.param == "postgres":
        conversation = in_postgres(request.getfixturevalue("postgres_dsn"))
        yield conversation
        conversation.backend.sink.close()
        return
    if request.param == "remote":
        with BackgroundServer(create_app(data_dir=tmp_path / "data")) as server:
            workspace = Workspace(host=server.url, working_dir=str(tmp_path))
            remote = Conversation(agent=AGENT, workspace=workspace, visualizer=None)
            DATA_DIRS[remote.id] = tmp_path / "data"
            yield remote
            remote.close()
        return
    if request.param == "sqlite":
        yield Conversation(agent=AGENT, workspace=".", visualizer=None, persistence_dir=tmp_path)
        return
    yield Conversation(agent=AGENT, workspace=".", visualizer=None)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def local(request, tmp_path) -> Conversation:
    if request.param == "postgres":
        return in_postgres(request.getfixturevalue("postgres_dsn"))
    if request.param == "sqlite":
        return Conversation(agent=AGENT, workspace=".", visualizer=None, persistence_dir=tmp_path)
    return Conversation(agent=AGENT, workspace=".", visualizer=None)


def reopened(conversation) -> Iterator:
    """The conversation as a new process sees it (the same one when it is not stored)."""
    if isinstance(conversation, RemoteConversation):
        # Another server on the same data dir: what it serves was read from the store.
        data = DATA_DIRS[conversation.id]
        with BackgroundServer(create_app(data_dir=data)) as server:
            yield RemoteConversation.attach(server.url, conversation.id)
        return
    store = conversation.backend.sink
    if conversation.id in DSNS:  # a new connection to the database
        yield Conversation.resume(DSNS[conversation.id], conversation.id)
        return
    yield (
        conversation
        if store is None
        else Conversation.resume(SQLiteStore(store.path), conversation.id)
    )


class TestLeafEventId:
    def test_follows_the_last_event(self, conversation):
        """leaf_event_id is the id of the last event of the active branch, None when empty."""
        assert conversation.state.leaf_event_id is None
        e0, e1, e2 = three(conversation)
        assert conversation.state.leaf_event_id == e2.id


class TestNavigateTo:
    def test_then_a_message_starts_a_sibling_branch(self, conversation):
        """After navigate_to(root), the next message branches off the root; a1, a2 are kept."""
        e0, e1, e2 = three(conversation)
        conversation.navigate_to(e0.id)
        assert conversation.state.leaf_event_id == e0.id
        assert texts(conversation.state.branch) == ["root"]
        assert texts(conversation.state.events) == ["root", "a1", "a2"]  # a1, a2 kept
        conversation.send_message("b1")
        assert texts(conversation.state.branch) == ["root", "b1"]
        assert texts(conversation.state.active_branch()) == ["root", "b1"]
        assert texts(conversation.state.view.events) == ["root", "b1"]
        assert texts(conversation.state.events) == ["root", "a1", "a2", "b1"]
        assert e1.id in conversation.state.events and e2 in conversation.state.events
        assert [texts(b) for b in conversation.state.branches] == [
            ["root", "a1", "a2"],
            ["root", "b1"],
        ]

    def test_back_to_the_old_leaf_restores_the_old_branch(self, conversation):
        """Navigating to the old leaf makes the old branch active again, the new one kept."""
        e0, e1, e2 = three(conversation)
        conversation.navigate_to(e0.id)
        b1 = conversation.send_message("b1")
        conversation.navigate_to(e2.id)
        assert texts(conversation.state.branch) == ["root", "a1", "a2"]
        assert texts(conversation.state.events) == ["root", "b1", "a1", "a2"]  # b1's branch first
        assert list(conversation.state.other_branches[0])[-1] == b1
        assert len(conversation.state.branches) == 2

    def test_to_none_empties_the_active_branch(self, conversation):
        """navigate_to(None) leaves an empty active branch; the next event is a new root."""
        three(conversation)
        conversation.navigate_to(None)
        assert conversation.state.leaf_event_id is None and len(conversation.state.branch) == 0
        assert len(conversation.state.events) == 4  # the system prompt, root, a1, a2: all kept
        assert list(conversation.state.view.events) == []
        conversation.send_message("fresh")
        assert [texts(b) for b in conversation.state.branches] == [
            ["root", "a1", "a2"],
            ["fresh"],
        ]

    @pytest.mark.parametrize("operation", ["navigate_to", "fork"])
    def test_unknown_event_id_raises(self, conversation, operation):
        """An unknown id is a ValueError (as in OpenHands' SDK) and a KeyError naming it; nothing
        changes."""
        three(conversation)
        with pytest.raises((ValueError, RemoteError), match="nope") as raised:
            if operation == "navigate_to":
                conversation.navigate_to("nope")
            else:
                conversation.fork(from_event_id="nope")
        if isinstance(raised.value, RemoteError):
            assert raised.value.status_code == 404
        else:
            assert isinstance(raised.value, KeyError | EventNotFoundError)
        assert texts(conversation.state.events) == ["root", "a1", "a2"]

    def test_shares_structure(self, local):
        """Navigating copies nothing: the new active branch is a prefix view of the old one."""
        for n in range(100):
            local.send_message(f"m{n}")
        old = local.state.branch
        local.navigate_to(old[49].id)
        new = local.state.branch
        assert len(new) == 50 and new._chunks[0] is old._chunks[0]
        assert local.state.other_branches[0]._chunks is old._chunks

    def test_to_the_current_leaf_changes_nothing(self, local):
        """Navigating to where the conversation already is keeps the same snapshot."""
        e0, e1, e2 = three(local)
        before = local.state
        local.navigate_to(e2.id)
        assert local.state is before

    def test_refused_while_running(self, local):
        """navigate_to during a run is a RuntimeError; nothing changes."""
        e0, e1, e2 = three(local)
        local._commit(lambda s: s._replace(execution_status=ExecutionStatus.RUNNING))
        with pytest.raises(RuntimeError, match="pause"):
            local.navigate_to(e0.id)
        assert texts(local.state.events) == ["root", "a1", "a2"]


class TestForkAndTheTree:
    def test_fork_from_an_event_on_an_abandoned_branch(self, conversation):
        """fork(from_event_id=) takes the history up to the event, on whichever branch holds it."""
        e0, e1, e2 = three(conversation)
        conversation.navigate_to(e0.id)
        conversation.send_message("b1")
        fork = conversation.fork(from_event_id=e2.id)
        assert texts(fork.state.events) == ["root", "a1", "a2"]
        assert fork.state.leaf_event_id == e2.id
        assert fork.state.other_branches == ()
        assert texts(conversation.state.branch) == ["root", "b1"]  # the source is untouched
        fork.close()

    def test_whole_fork_keeps_every_branch_and_the_leaf(self, conversation):
        """A whole-conversation fork carries all branches and the source's leaf (as in OpenHands'
        SDK)."""
        e0, e1, e2 = three(conversation)
        conversation.navigate_to(e0.id)
        fork = conversation.fork()
        assert fork.state.leaf_event_id == e0.id
        assert [texts(b) for b in fork.state.branches] == [["root", "a1", "a2"]]

    def test_navigation_agrees_with_fork(self, conversation):
        """navigate_to(e) and fork(from_event_id=e) give the same history, for every event."""
        e0, e1, e2 = three(conversation)
        conversation.navigate_to(e1.id)
        conversation.send_message("b2")
        for branch in conversation.state.branches:
            for event in branch:
                fork = conversation.fork(from_event_id=event.id)
                probe = conversation.fork()
                probe.navigate_to(event.id)
                assert list(fork.state.events) == list(probe.state.branch)
                assert list(fork.state.events)[-1] == event
                fork.close(), probe.close()


class TestStartsWith:
    def test_cases(self):
        """starts_with compares the shared prefix: empty, equal, shorter, diverging, longer."""
        events = [MessageEvent(source="user", role="user", content=t) for t in "abc"]
        other = MessageEvent(source="user", role="user", content="x")
        log = EventLog(events)
        diverged = log.take(1).append(other)
        assert log.starts_with(log.take(0)) and log.starts_with(log)
        assert log.starts_with(log.take(2)) and log.take(2).is_prefix_of(log)
        assert not log.starts_with(diverged) and not log.take(2).starts_with(log)


class TestPersistedTree:
    def test_resume_keeps_every_branch_and_the_leaf(self, conversation):
        """A reopened conversation has the same branches, in order, and the same leaf."""
        e0, e1, e2 = three(conversation)
        conversation.navigate_to(e0.id)
        b1 = conversation.send_message("b1")
        conversation.navigate_to(e1.id)
        conversation.send_message("c2")
        conversation.navigate_to(b1.id)
        for again in reopened(conversation):
            assert [texts(b) for b in again.state.branches] == [
                texts(b) for b in conversation.state.branches
            ]
            assert [texts(b) for b in again.state.branches] == [
                ["root", "a1", "a2"],
                ["root", "a1", "c2"],
                ["root", "b1"],
            ]
            assert again.state.leaf_event_id == b1.id
            again.send_message("b2")  # and it goes on from there
            assert texts(again.state.branch) == ["root", "b1", "b2"]
            assert texts(again.state.events) == ["root", "a1", "a2", "c2", "b1", "b2"]

    def test_navigating_copies_no_event(self, tmp_path):
        """In SQLite, navigating and branching write rows, never events again."""
        import sqlite3
        from contextlib import closing

        conversation = Conversation(
            agent=AGENT, workspace=".", visualizer=None, persistence_dir=tmp_path
        )
        events = [conversation.send_message(f"m{n}") for n in range(50)]
        for target in (events[10], events[40], events[49], events[0]):
            conversation.navigate_to(target.id)
        conversation.send_message("new")
        with closing(sqlite3.connect(tmp_path / "cowconv.db")) as db:
            assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 52  # + prompt

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        steps=st.lists(
            st.one_of(st.just("append"), st.none(), st.integers(0, 999)), min_size=1, max_size=30
        )
    )
    def test_navigating_anywhere_copies_no_event(self, tmp_path_factory, steps):
        """Whatever the appends and navigations (to none, back, or forward along another
        branch), SQLite holds each event once: one row per distinct event of the tree."""
        import sqlite3
        from contextlib import closing

        directory = tmp_path_factory.mktemp("tree")
        with SQLiteStore(directory) as store:
            conversation = Conversation(agent=AGENT, workspace=".", visualizer=None, store=store)
            for step in steps:
                if step == "append":
                    conversation.append_event(PauseEvent())
                    continue
                every = [event.id for branch in conversation.state.branches for event in branch]
                conversation.navigate_to(
                    None if step is None or not every else every[step % len(every)]
                )
            distinct = {event.id for branch in conversation.state.branches for event in branch}
            reloaded = store.load(conversation.id)
            assert [e.id for e in reloaded.events] == [e.id for e in conversation.state.events]
        with closing(sqlite3.connect(directory / "cowconv.db")) as db:
            assert db.execute("SELECT count(*) FROM events").fetchone()[0] == len(distinct)

    def test_delete_removes_every_branch_but_forks_keep_theirs(self, tmp_path):
        """Deleting a conversation reclaims its branches; a fork's history survives."""
        import sqlite3
        from contextlib import closing

        conversation = Conversation(
            agent=AGENT, workspace=".", visualizer=None, persistence_dir=tmp_path
        )
        e0, e1, e2 = three(conversation)
        fork = conversation.fork()
        conversation.navigate_to(e0.id)
        conversation.send_message("b1")
        store = conversation.backend.sink
        store.delete(conversation.id)
        assert texts(store.load(fork.id).events) == ["root", "a1", "a2"]
        with closing(sqlite3.connect(tmp_path / "cowconv.db")) as db:  # and the system prompt
            assert db.execute("SELECT count(*) FROM events").fetchone()[0] == 4


def parent_chain_ok(branch) -> bool:
    """Each event's parent is the event before it on the branch; the first is a root."""
    return all(
        event.parent_id in (None, ROOT_PARENT_ID)
        if position == 0
        else event.parent_id == branch[position - 1].id
        for position, event in enumerate(branch)
    )


def path_to_root(events_by_id: dict, event_id: str) -> list[str]:
    """OpenHands' path_to_root: follow parent_id from the event up to a root."""
    path = [event_id]
    while events_by_id[path[-1]].parent_id not in (None, ROOT_PARENT_ID):
        path.append(events_by_id[path[-1]].parent_id)
    return path[::-1]


tree_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["user", "agent"])),
        st.tuples(st.just("navigate"), st.none() | st.integers(0, 999)),
        st.tuples(st.just("fork"), st.integers(0, 999)),
    ),
    min_size=1,
    max_size=25,
)


class TestParentChains:
    """OpenHands' tree, stated as properties over random appends, navigations and forks."""

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=tree_steps, stored=st.booleans())
    def test_every_parent_is_the_event_before_it_and_forks_take_the_path_to_root(
        self, tmp_path_factory, steps, stored
    ):
        options = {"persistence_dir": tmp_path_factory.mktemp("chains")} if stored else {}
        conversation = Conversation(agent=AGENT, workspace=".", visualizer=None, **options)
        for kind, value in steps:
            state = conversation.state
            every = [event for branch in state.branches for event in branch]
            if kind == "append":
                role = "user" if value == "user" else "assistant"
                parent = conversation.state.leaf_event_id
                if parent is None and every:
                    parent = ROOT_PARENT_ID
                event = conversation.append_event(
                    MessageEvent(source=value, llm_message=Message(role=role, content="x"))
                )
                assert event.parent_id == parent
            elif kind == "navigate":
                conversation.navigate_to(
                    None if value is None or not every else every[value % len(every)].id
                )
            elif every:
                target = every[value % len(every)]
                by_id = {event.id: event for event in every}
                fork = conversation.fork(from_event_id=target.id)
                assert [e.id for e in fork.state.events] == path_to_root(by_id, target.id)
                assert fork.state.leaf_event_id == target.id
                assert fork.state.events == history_to(state, target.id)
            state = conversation.state
            assert all(parent_chain_ok(branch) for branch in (*state.branches, state.branch))
            # One parent per event, whichever branch holds it (branches share their events).
            parents = {}
            for branch in state.branches:
                for event in branch:
                    assert parents.setdefault(event.id, event.parent_id) == event.parent_id
            assert [e.id for e in state.view.events] == [e.id for e in state.branch]
            assert state.head_is_empty == (not state.branch and bool(parents))
            # state.events: every event of the tree once (OpenHands' SDK keeps left branches).
            assert sorted(e.id for e in state.events) == sorted(parents)
        if stored:  # and all of it as a new process reads it back
            reloaded = Conversation.resume(conversation.backend.sink, conversation.id).state
            assert reloaded.events == conversation.state.events
            assert all(parent_chain_ok(b) for b in reloaded.branches)
            assert reloaded.head_is_empty == conversation.state.head_is_empty


class TestExportedTree:
    @pytest.mark.parametrize("kind", ["memory", "sqlite"])
    def test_export_import_keeps_every_branch(self, tmp_path, kind):
        """An export carries every branch of a conversation and its forks; import restores them."""

        def store(name: str):
            return MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / name)

        source = store("a.db")
        conversation = Conversation(agent=AGENT, workspace=".", visualizer=None, store=source)
        e0, e1, _ = three(conversation)
        conversation.navigate_to(e0.id)
        b1 = conversation.send_message("b1")
        conversation.navigate_to(e1.id)
        conversation.send_message("c2")
        fork = conversation.fork()
        fork.navigate_to(b1.id)
        fork.send_message("f")
        conversation.navigate_to(b1.id)
        document = source.export_conversation(conversation.id, with_forks=True)
        target = store("b.db")
        assert [str(i) for i in target.import_conversations(document)] == [
            str(conversation.id),
            str(fork.id),
        ]
        for original in (conversation, fork):
            loaded = target.load(original.id)
            assert [texts(b) for b in loaded.branches] == [
                texts(b) for b in original.state.branches
            ]
            assert loaded.leaf_event_id == original.state.leaf_event_id

    def test_a_bad_branch_is_refused_whole(self, tmp_path):
        """A branch sharing more events than its conversation has: the import stores nothing."""
        import json

        source = MemoryStore()
        conversation = Conversation(agent=AGENT, workspace=".", visualizer=None, store=source)
        e0, _, _ = three(conversation)
        conversation.navigate_to(e0.id)
        conversation.send_message("b1")
        document = json.loads(source.export_conversation(conversation.id))
        document["conversations"][0]["branches"][0]["shared"] = 99
        target = SQLiteStore(tmp_path / "b.db")
        with pytest.raises(ValueError, match="shared"):
            target.import_conversations(json.dumps(document))
        assert target.list() == []


class TestEventTree:
    """state.events after navigation: every event of the tree once, read like a sequence."""

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.one_of(st.none(), st.integers(0, 40)), max_size=40))
    def test_reads_agree_with_the_branches(self, steps):
        """Random appends (None) and navigations (an index into the events so far)."""
        state = ConversationState(id="t", agent=AGENT, workspace=Workspace(working_dir="."))
        for number, step in enumerate(steps):
            if step is None or not len(state.events):
                event = MessageEvent(id=f"e{number}", role="user", content=str(number))
                state = state._replace(branch=extend_active(state, [event]))
            else:
                state = navigate(state, state.events[step % len(state.events)].id)
        events = state.events
        listed = list(events)
        distinct = {e.id: e for branch in state.branches for e in branch}
        assert sorted(e.id for e in listed) == sorted(distinct) and len(events) == len(listed)
        assert [events[i] for i in range(len(events))] == listed
        assert [events[i - len(events)] for i in range(len(events))] == listed
        assert events[1:3] == listed[1:3] if isinstance(events, EventTree) else True
        for position, event in enumerate(listed):
            assert events.index_of(event.id) == position and events.get_id(position) == event.id
            assert event.id in events and event in events
            path = events.path_to_root(event.id)
            assert path[-1] == event and path == list(history_to(state, event.id))
            # A parent comes before its children (OpenHands' storage order keeps that too).
            if event.parent_id not in (None, ROOT_PARENT_ID):
                assert events.index_of(event.parent_id) < position
        assert "nope" not in events and events.position_of("nope") is None
        with pytest.raises(EventNotFoundError):
            events.path_to_root("nope")
        assert list(state.branch) == state.active_branch()

    def test_a_snapshot_tree_is_read_only(self):
        state = ConversationState(id="t", agent=AGENT, workspace=Workspace(working_dir="."))
        first = MessageEvent(id="a", role="user", content="a")
        state = state._replace(branch=extend_active(state, [first, MessageEvent(content="b")]))
        state = navigate(state, "a")
        state = state._replace(branch=extend_active(state, [MessageEvent(content="c")]))
        assert isinstance(state.events, EventTree) and len(state.events) == 3
        with pytest.raises(InvalidTypeError, match="append_event"):
            state.events.append(MessageEvent(content="d"))
        again = ConversationState(
            id="t", agent=AGENT, workspace=Workspace(working_dir="."), events=state.events
        )  # an EventTree given as events= keeps every branch
        assert again.events == state.events and again.branch == state.branch
