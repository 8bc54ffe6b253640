"""Tests for cowconv.stores: SQLiteStore, the Store protocol, and persisted Conversations."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationNotFoundError,
    ConversationState,
    ConversationStats,
    CorruptStoreError,
    EventLog,
    ExecutionStatus,
    MessageEvent,
    SQLiteStore,
    Store,
    StoreError,
    Usage,
    Workspace,
)
from cowconv.core.state import dump_state, dump_state_json
from cowconv.stores.lazy import LazyEvents
from tests.conftest import message_texts
from tests.strategies import events, json_objects, keys, texts

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-stored"))
NEW_AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-brought-later"))
REPO = Path(__file__).resolve().parent.parent


def dump(state: ConversationState) -> str:
    """Everything of a state, secrets included, as canonical JSON."""
    data = state.model_dump(mode="json", context={"expose_secrets": True})
    return json.dumps(data, sort_keys=True)


def as_reloaded(state: ConversationState) -> ConversationState:
    """What a new process should load for this in-memory state."""
    if state.execution_status is ExecutionStatus.RUNNING:
        return state._replace(execution_status=ExecutionStatus.PAUSED)
    return state


def event_rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db, db:
        return int(db.execute("SELECT count(*) FROM events").fetchone()[0])


def conversation_rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db, db:
        return int(db.execute("SELECT count(*) FROM conversations").fetchone()[0])


def fill(conversation: Conversation, count: int) -> list[MessageEvent]:
    return [conversation.send_message(f"message {i}") for i in range(count)]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "cowconv.db"


@pytest.fixture
def store(path: Path):
    with SQLiteStore(path) as opened:
        yield opened


def persisted(store: SQLiteStore, **kwargs) -> Conversation:
    return Conversation(agent=AGENT, workspace="/tmp", store=store, **kwargs)


class TestOpen:
    def test_creates_private_file(self, path: Path):
        """A new store file is created readable by its owner only (it holds API keys)."""
        SQLiteStore(path).close()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_reopens_existing(self, path: Path):
        """Opening an existing store keeps what it holds."""
        with SQLiteStore(path) as store:
            persisted(store, conversation_id="c1")
        with SQLiteStore(path) as store:
            assert store.exists("c1")

    def test_satisfies_protocol(self, store: SQLiteStore):
        """SQLiteStore implements the Store protocol."""
        assert isinstance(store, Store)

    def test_closed_store_refuses(self, path: Path):
        """A closed store raises StoreError instead of touching a closed connection."""
        store = SQLiteStore(path)
        store.close()
        store.close()
        with pytest.raises(StoreError, match="closed"):
            store.exists("c1")

    def test_bad_arguments(self, path: Path):
        """Bad options are a ValueError before any file is created."""
        with pytest.raises(ValueError, match="synchronous"):
            SQLiteStore(path, synchronous="off")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="lock_timeout"):
            SQLiteStore(path, lock_timeout=-1)
        assert not path.exists()


class TestSaveLoad:
    def test_round_trip_of_every_field(self, path: Path):
        """Every field of a state, secrets included, loads back equal in a new store."""
        workspace = Workspace(working_dir="/srv", host="http://127.0.0.1:1", api_key="ws-key")
        state = ConversationState(
            id="c1",
            agent=AGENT,
            workspace=workspace,
            events=EventLog([MessageEvent(source="user", role="user", content="hi")]),
            agent_state={"plan": ["a", {"b": 1.5}]},
            activated_knowledge_skills=("git",),
            stats=ConversationStats().record(
                "main", Usage(accumulated_cost=0.125, prompt_tokens=3)
            ),
            tags={"title": "T", "team": "x"},
            execution_status=ExecutionStatus.FINISHED,
            forked_from_conversation_id="elsewhere",
            forked_from_event_id="e0",
        )
        with SQLiteStore(path) as store:
            store.save(None, state)
        with SQLiteStore(path) as store:
            loaded = store.load("c1")
        assert loaded == state
        assert loaded.agent.llm.api_key is not None
        assert loaded.agent.llm.api_key.get_secret_value() == "sk-stored"
        assert loaded.workspace.api_key is not None
        assert loaded.workspace.api_key.get_secret_value() == "ws-key"

    def test_unknown_id(self, store: SQLiteStore):
        """Loading an unknown id raises ConversationNotFoundError (a KeyError)."""
        with pytest.raises(ConversationNotFoundError):
            store.load("missing")
        with pytest.raises(KeyError):
            store.info("missing")

    def test_saving_a_taken_id_is_refused(self, store: SQLiteStore):
        """save(None, ...) for an id already exists is a ValueError and changes nothing."""
        first = persisted(store, conversation_id="c1")
        fill(first, 2)
        with pytest.raises(ValueError, match="already exists"):
            store.save(None, first.state._replace(events=EventLog()))
        assert message_texts(store.load("c1").events) == ["message 0", "message 1"]

    def test_appends_in_one_transaction(self, store: SQLiteStore, path: Path):
        """Several events appended in one commit are all stored."""
        conversation = persisted(store)
        batch = [MessageEvent(source="user", role="user", content=str(i)) for i in range(3)]
        conversation._commit(lambda s: s._replace(events=s.events.extend(batch)))
        assert list(store.load(conversation.id).events) == batch
        assert event_rows(path) == 3


class TestRunningStatus:
    def test_running_comes_back_paused(self, path: Path):
        """A conversation stored while running loads paused: its process is gone."""
        with SQLiteStore(path) as store:
            conversation = persisted(store, conversation_id="c1")
            conversation._commit(lambda s: s._replace(execution_status=ExecutionStatus.RUNNING))
        with SQLiteStore(path) as store:
            assert store.load("c1").execution_status is ExecutionStatus.PAUSED
            assert store.info("c1").execution_status is ExecutionStatus.PAUSED


class TestForkStorage:
    def test_fork_writes_no_event(self, store: SQLiteStore, path: Path):
        """Forking a persisted conversation adds one row and no event row."""
        source = persisted(store)
        fill(source, 50)
        before = event_rows(path), conversation_rows(path)
        fork = source.fork(title="branch")
        assert (event_rows(path), conversation_rows(path)) == (before[0], before[1] + 1)
        assert store.load(fork.id) == fork.state

    def test_fork_of_fork_at_earlier_event(self, store: SQLiteStore, path: Path):
        """A fork of a fork at an event it inherited shares rows and loads right."""
        source = persisted(store)
        sent = fill(source, 10)
        fork = source.fork()
        fill(fork, 3)
        early = fork.fork(from_event_id=sent[4].id)
        later = early.send_message("after")
        assert event_rows(path) == 1 + 10 + 3 + 1  # the system prompt, then the messages
        reopened = SQLiteStore(path)
        for conversation in (source, fork, early):
            assert reopened.load(conversation.id) == conversation.state
        assert message_texts(reopened.load(early.id).events)[-2:] == ["message 4", later.text]

    def test_fork_at_first_own_event_of_a_fork(self, store: SQLiteStore, path: Path):
        """Forking at a fork's first own event shares rows with both ancestors."""
        source = persisted(store)
        fill(source, 3)
        fork = source.fork()
        first_own = fork.send_message("first own")
        source.send_message("source moves on")
        rows = event_rows(path)
        branch = fork.fork(from_event_id=first_own.id)
        assert event_rows(path) == rows
        assert SQLiteStore(path).load(branch.id) == branch.state

    def test_fork_of_unstored_parent_stores_its_events(self, store: SQLiteStore, path: Path):
        """A fork whose parent is not in the store stores its own copy of the events."""
        source = Conversation(agent=AGENT, workspace="/tmp")
        fill(source, 4)
        fork = source.fork()
        store.save(None, fork.state)
        assert event_rows(path) == 1 + 4  # the system prompt, then the messages
        assert store.load(fork.id) == fork.state

    def test_source_appending_after_fork(self, store: SQLiteStore):
        """Events the source appends after the fork are not part of the fork."""
        source = persisted(store)
        fill(source, 3)
        fork = source.fork()
        source.send_message("source only")
        fork.send_message("fork only")
        assert message_texts(store.load(fork.id).events) == [
            "message 0",
            "message 1",
            "message 2",
            "fork only",
        ]
        assert store.load(source.id).events[-1].text == "source only"

    def test_fork_of_empty_conversation(self, store: SQLiteStore):
        """Forking a conversation with no events stores an empty fork."""
        source = persisted(store)
        fork = source.fork()
        assert store.load(fork.id) == fork.state
        assert store.info(fork.id).forked_from_conversation_id == source.id


class TestSharedLoading:
    def test_loaded_fork_shares_parent_events(self, path: Path):
        """One store loading a parent and its fork hands back histories sharing chunks."""
        with SQLiteStore(path) as store:
            source = persisted(store)
            fill(source, 40)
            fork = source.fork()
            fork.send_message("own")
        with SQLiteStore(path) as store:
            parent_events = store.load(source.id).events
            fork_events = store.load(fork.id).events
        assert fork_events._chunks[0] is parent_events._chunks[0]
        assert list(fork_events)[:41] == list(parent_events)  # the prompt and 40 messages

    def test_events_validated_on_first_read(self, path: Path):
        """A loaded history is validated lazily: only the events read so far."""
        with SQLiteStore(path) as store:
            fill(persisted(store, conversation_id="c1"), 100)
        with SQLiteStore(path) as store:
            loaded = store.load("c1").events
        chunk = loaded._chunks[0]
        assert isinstance(chunk, LazyEvents)
        assert chunk.validated == 0
        assert loaded[58].text == "message 57"  # after the system prompt
        assert chunk.validated == 1
        assert message_texts(loaded) == [f"message {i}" for i in range(100)]
        assert chunk.validated == 101

    def test_resumed_history_appends_after_lazy_chunk(self, path: Path):
        """Appending to a loaded history leaves the stored chunk sealed and unread."""
        with SQLiteStore(path) as store:
            fill(persisted(store, conversation_id="c1"), 100)
        with SQLiteStore(path) as store:
            resumed = Conversation.resume(store, "c1")
            resumed.send_message("new")
            chunk = resumed.state.events._chunks[0]
            # Only the system prompt was read, to see that it is the agent's: no second one.
            assert isinstance(chunk, LazyEvents) and chunk.validated == 1
            assert message_texts(store.load("c1").events)[-2:] == ["message 99", "new"]

    def test_key_reused_by_another_writer_is_not_served_from_memory(self, path: Path):
        """A row key freed and handed out again by another connection never yields stale events."""
        with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
            first = persisted(writer, conversation_id="first")
            fill(first, 3)
            assert message_texts(reader.load("first").events)[-1] == "message 2"
            writer.delete("first")
            second = persisted(writer, conversation_id="second")
            second.send_message("only this")
            with closing(sqlite3.connect(path)) as db, db:
                keys = [row[0] for row in db.execute("SELECT key FROM conversations")]
            assert len(keys) == 1  # the freed key came back: what the reader remembers is stale
            assert message_texts(reader.load("second").events) == ["only this"]

    def test_fork_writes_no_sequence_page(self, path: Path):
        """A fork's commit touches the row and the id index only (no AUTOINCREMENT bookkeeping)."""
        with SQLiteStore(path) as store:
            source = persisted(store)
            fill(source, 50)
            source.fork()
        with closing(sqlite3.connect(path)) as db, db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "sqlite_sequence" not in tables

    def test_damaged_event_is_corrupt_store_error(self, path: Path):
        """A stored event that no longer validates raises CorruptStoreError when read."""
        with SQLiteStore(path) as store:
            fill(persisted(store, conversation_id="c1"), 2)
        with closing(sqlite3.connect(path)) as db, db:
            db.execute('UPDATE events SET body = \'{"kind": "nope"}\' WHERE position = 2')
        with SQLiteStore(path) as store:
            loaded = store.load("c1").events
            assert loaded[1].text == "message 0"  # after the system prompt
            with pytest.raises(CorruptStoreError, match="damaged"):
                loaded[2]


class TestConflicts:
    def test_second_writer_of_same_conversation_is_refused(self, path: Path):
        """Two stores resuming one conversation: the stale writer gets StoreError, loses nothing."""
        with SQLiteStore(path) as first_store, SQLiteStore(path) as second_store:
            persisted(first_store, conversation_id="c1")
            first = Conversation.resume(first_store, "c1")
            second = Conversation.resume(second_store, "c1")
            first.send_message("first")
            with pytest.raises(StoreError, match="another writer"):
                second.send_message("second")
            assert len(second.state.events) == 0
            assert message_texts(second_store.load("c1").events) == ["first"]

    def test_failed_save_keeps_previous_state(self, path: Path):
        """When the store cannot save, the conversation keeps its previous snapshot."""
        store = SQLiteStore(path)
        conversation = persisted(store)
        conversation.send_message("kept")
        before = conversation.state
        store.close()
        with pytest.raises(StoreError):
            conversation.send_message("lost")
        with pytest.raises(StoreError):
            conversation.fork()
        assert conversation.state is before
        with SQLiteStore(path) as reopened:
            assert reopened.load(conversation.id) == before

    def test_saving_a_deleted_conversation(self, store: SQLiteStore):
        """A live conversation deleted from its store cannot save again: a stale write."""
        conversation = persisted(store, conversation_id="c1")
        store.delete("c1")
        with pytest.raises(StoreError, match="deleted"):
            conversation.send_message("after delete")


class TestThreads:
    def test_one_store_many_threads(self, store: SQLiteStore):
        """Conversations written, forked and read from several threads through one store."""
        source = persisted(store, conversation_id="source")
        fill(source, 5)
        errors: list[BaseException] = []

        def work(number: int) -> None:
            try:
                fork = source.fork(conversation_id=f"fork-{number}")
                for i in range(20):
                    fork.send_message(f"{number}-{i}")
                    store.list()
                assert store.load(fork.id) == fork.state
            except BaseException as error:  # reported below, in the test's thread
                errors.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(store.list()) == 7
        assert message_texts(store.load("fork-3").events)[5:] == [f"3-{i}" for i in range(20)]


class TestList:
    def test_lists_summaries_in_creation_order(self, store: SQLiteStore):
        """list() returns id, title, tags, status, times, lineage and event count."""
        source = persisted(store, conversation_id="a", tags={"team": "x"})
        fill(source, 3)
        fork = source.fork(conversation_id="b", title="Fork", tags={"team": "y"})
        infos = store.list()
        assert [info.id for info in infos] == ["a", "b"]
        assert infos[0].event_count == 4 and infos[1].event_count == 4  # prompt + 3 messages
        assert infos[1].title == "Fork"
        assert infos[1].forked_from_conversation_id == "a"
        assert infos[1].forked_from_event_id is None  # a whole fork, as OpenHands' SDK says
        assert infos[1].forked_from_event_count == 4
        assert infos[1].created_at == fork.state.created_at
        assert infos[0].updated_at == source.state.updated_at
        assert store.info("b") == infos[1]

    def test_tag_filter(self, store: SQLiteStore):
        """tags= keeps the conversations carrying every given tag."""
        persisted(store, conversation_id="a", tags={"team": "x", "env": "prod"})
        persisted(store, conversation_id="b", tags={"team": "x"})
        persisted(store, conversation_id="c", tags={"team": "y", "env": "prod"})
        assert [i.id for i in store.list(tags={"team": "x"})] == ["a", "b"]
        assert [i.id for i in store.list(tags={"team": "x", "env": "prod"})] == ["a"]
        assert store.list(tags={"team": "z"}) == []
        assert [i.id for i in store.list(tags={'we"ird': "'"})] == []

    def test_paging(self, store: SQLiteStore):
        """limit and offset page through the listing."""
        for name in "abcde":
            persisted(store, conversation_id=name)
        assert [i.id for i in store.list(limit=2)] == ["a", "b"]
        assert [i.id for i in store.list(limit=2, offset=2)] == ["c", "d"]
        assert [i.id for i in store.list(offset=4)] == ["e"]
        assert store.list(limit=0) == []
        assert [i.id for i in store.list(limit=2**70)] == list("abcde")
        assert store.list(offset=2**70) == []

    def test_bad_paging(self, store: SQLiteStore):
        """Negative limit or offset is a ValueError."""
        with pytest.raises(ValueError):
            store.list(limit=-1)
        with pytest.raises(ValueError):
            store.list(offset=-1)


class TestDelete:
    def test_forks_survive_parent_delete(self, store: SQLiteStore, path: Path):
        """Deleting a conversation keeps its forks whole; its unreached events are reclaimed."""
        source = persisted(store, conversation_id="src")
        fill(source, 10)
        fork = source.fork(from_event_id=source.state.events[3].id)
        fork.send_message("own")
        store.delete("src")
        assert not store.exists("src")
        assert [i.id for i in store.list()] == [fork.id]
        assert SQLiteStore(path).load(fork.id) == fork.state
        assert event_rows(path) == 4 + 1

    def test_deleting_everything_reclaims_everything(self, store: SQLiteStore, path: Path):
        """Once no conversation reaches them, all rows are gone."""
        source = persisted(store)
        fill(source, 5)
        middle = source.fork()
        fill(middle, 2)
        leaf = middle.fork(from_event_id=source.state.events[1].id)
        leaf.send_message("leaf")
        for conversation in (middle, source):
            store.delete(conversation.id)
            assert store.load(leaf.id) == leaf.state
        store.delete(leaf.id)
        assert (event_rows(path), conversation_rows(path)) == (0, 0)

    def test_deleted_id_can_be_reused(self, store: SQLiteStore):
        """After a delete, a new conversation may take the same id."""
        old = persisted(store, conversation_id="c1")
        fill(old, 3)
        keeper = old.fork()
        store.delete("c1")
        fresh = persisted(store, conversation_id="c1")
        fresh.send_message("fresh")
        assert message_texts(store.load("c1").events) == ["fresh"]
        assert store.load(keeper.id) == keeper.state

    def test_unknown_id(self, store: SQLiteStore):
        """Deleting an unknown id raises ConversationNotFoundError."""
        with pytest.raises(ConversationNotFoundError):
            store.delete("missing")


class TestExportImport:
    def test_one_conversation_round_trip(self, store: SQLiteStore, tmp_path: Path):
        """Exporting and importing a conversation gives an equal state."""
        source = persisted(store, tags={"title": "T"})
        fill(source, 5)
        fork = source.fork()
        fork.send_message("fork")
        data = store.export_conversation(fork.id, include_secrets=True)
        assert json.loads(data)["version"] == 1
        with SQLiteStore(tmp_path / "other.db") as other:
            assert other.import_conversations(data) == [fork.id]
            assert other.load(fork.id) == fork.state

    def test_fork_tree_round_trip_keeps_sharing(self, store: SQLiteStore, tmp_path: Path):
        """A fork tree exports parents before forks and imports with events stored once."""
        root = persisted(store)
        fill(root, 6)
        child = root.fork()
        child.send_message("child")
        grandchild = child.fork(from_event_id=root.state.events[2].id)
        grandchild.send_message("grandchild")
        store.delete(child.id)  # a tombstone in the middle of the tree
        data = store.export_conversation(root.id, with_forks=True, include_secrets=True)
        other_path = tmp_path / "other.db"
        with SQLiteStore(other_path) as other:
            assert other.import_conversations(data) == [root.id, grandchild.id]
            assert other.load(root.id) == root.state
            assert other.load(grandchild.id) == grandchild.state
        assert event_rows(other_path) == 1 + 6 + 1  # the prompt, root's messages, grandchild's

    def test_store_and_export_write_one_serialisation(self, path: Path):
        """The stored state row is dump_state_json(); an export holds dump_state() of it."""
        with SQLiteStore(path) as store:
            conversation = persisted(store, conversation_id="c1", tags={"owner": "ci"})
            fill(conversation, 2)
            conversation.update_agent_state({"step": 2, "wait": 1e-05})
            data = store.export_conversation("c1", include_secrets=True)
            state = conversation.state
        with closing(sqlite3.connect(path)) as db, db:
            (row,) = db.execute("SELECT state FROM conversations").fetchone()
        assert row == dump_state_json(state)
        assert json.loads(data)["conversations"][0]["state"] == dump_state(state) == json.loads(row)

    def test_secrets_left_out_by_default(self, store: SQLiteStore):
        """Without include_secrets, API keys are exported as null."""
        conversation = persisted(store)
        data = store.export_conversation(conversation.id)
        assert "sk-stored" not in data
        assert json.loads(data)["conversations"][0]["state"]["agent"]["llm"]["api_key"] is None
        assert "sk-stored" in store.export_conversation(conversation.id, include_secrets=True)

    @pytest.mark.parametrize(
        "data",
        [
            "not json",
            '{"format": "cowconv.conversations", "version": 99, "conversations": []}',
            '{"format": "cowconv.conversations", "version": 1, "conversations": [{}]}',
            '{"format": "cowconv.conversations", "version": 1}',
            "[]",
        ],
    )
    def test_bad_document_stores_nothing(self, store: SQLiteStore, data: str):
        """A malformed or unsupported export is a ValueError and stores nothing."""
        with pytest.raises(ValueError):
            store.import_conversations(data)
        assert store.list() == []

    def test_taken_id_stores_nothing(self, store: SQLiteStore, tmp_path: Path):
        """Importing over an existing id is a ValueError; nothing of the import is kept."""
        root = persisted(store, conversation_id="root")
        fill(root, 2)
        root.fork(conversation_id="fork")
        data = store.export_conversation("root", with_forks=True)
        with SQLiteStore(tmp_path / "other.db") as other:
            persisted(other, conversation_id="fork")
            with pytest.raises(ValueError, match="already exists"):
                other.import_conversations(data)
            assert [i.id for i in other.list()] == ["fork"]

    def test_parent_must_come_first(self, store: SQLiteStore):
        """A record naming a parent that is not before it is refused."""
        root = persisted(store, conversation_id="root")
        fill(root, 2)
        root.fork(conversation_id="fork")
        document = json.loads(store.export_conversation("root", with_forks=True))
        document["conversations"].reverse()
        with pytest.raises(ValueError, match="does not come before"):
            SQLiteStore(":memory:").import_conversations(json.dumps(document))


class TestConversationPersistence:
    def test_persistence_dir_creates_then_resumes(self, tmp_path: Path):
        """Conversation(persistence_dir=, conversation_id=) creates it, then resumes it."""
        directory = tmp_path / "state"
        first = Conversation(
            agent=AGENT, workspace="/tmp", persistence_dir=directory, conversation_id="c1"
        )
        first.send_message("hello")
        first.set_tag("title", "Kept")
        first.update_agent_state({"step": 2})
        first.activate_skill("git")
        first._commit(lambda s: s._replace(stats=s.stats.record("main", Usage(prompt_tokens=7))))
        assert (directory / "cowconv.db").exists()
        again = Conversation(
            agent=AGENT, workspace="/tmp", persistence_dir=directory, conversation_id="c1"
        )
        assert again.state == first.state

    def test_resume_uses_the_agent_given(self, tmp_path: Path):
        """Resuming with a new agent (a new API key) uses and stores that agent."""
        Conversation(agent=AGENT, workspace="/tmp", persistence_dir=tmp_path, conversation_id="c1")
        new = tmp_path / "new"  # a workspace must exist when a conversation is made
        new.mkdir()
        again = Conversation(
            agent=NEW_AGENT, workspace=new, persistence_dir=tmp_path, conversation_id="c1"
        )
        assert again.agent == NEW_AGENT and again.workspace.working_dir == str(new)
        with SQLiteStore(tmp_path / "cowconv.db") as store:
            stored = store.load("c1")
        assert stored.agent.llm.api_key is not None
        assert stored.agent.llm.api_key.get_secret_value() == "sk-brought-later"
        assert stored.workspace.working_dir == str(new)

    def test_one_file_name_everywhere(self, tmp_path: Path):
        """persistence_dir, SQLiteStore(dir), resume(dir) and the server open one file."""
        from cowconv.agent_server import ConversationRegistry

        first = Conversation(agent=AGENT, workspace="/tmp", persistence_dir=tmp_path)
        first.send_message("hello")
        resumed = Conversation.resume(tmp_path, first.id)
        assert resumed.state == first.state
        with SQLiteStore(tmp_path) as store:
            assert store.path == tmp_path / "cowconv.db"
            registry = ConversationRegistry(store)
            assert message_texts(registry.get(first.id).state.events) == ["hello"]
            registry.close()

    def test_old_server_file_is_renamed(self, tmp_path: Path):
        """The conversations.db of cowconv 0.1's server becomes cowconv.db, data kept."""
        with SQLiteStore(tmp_path / "conversations.db") as old:
            kept = persisted(old, conversation_id="c1")
            kept.send_message("from the old server")
        with SQLiteStore(tmp_path) as store:
            assert message_texts(store.load("c1").events) == ["from the old server"]
        assert not (tmp_path / "conversations.db").exists()

    @pytest.mark.parametrize("bad", [{"lock_timeout": -1}, {"synchronous": "off"}])
    def test_bad_arguments_leave_an_old_file_alone(self, tmp_path: Path, bad: dict[str, Any]):
        """Arguments are refused before the 0.1 file is moved: the directory is as it was."""
        SQLiteStore(tmp_path / "conversations.db").close()
        before = sorted(path.name for path in tmp_path.iterdir())
        with pytest.raises(ValueError, match=next(iter(bad))):
            SQLiteStore(tmp_path, **bad)
        assert sorted(path.name for path in tmp_path.iterdir()) == before
        assert (tmp_path / "conversations.db").exists()

    def test_two_files_are_reported(self, tmp_path: Path):
        """A directory holding both names is refused with a StoreError naming both."""
        SQLiteStore(tmp_path / "conversations.db").close()
        SQLiteStore(tmp_path / "cowconv.db").close()
        with pytest.raises(StoreError, match=r"cowconv\.db and conversations\.db"):
            SQLiteStore(tmp_path)

    def test_resume_classmethod(self, store: SQLiteStore):
        """Conversation.resume reopens with the stored agent, credentials included."""
        original = persisted(store, conversation_id="c1")
        fill(original, 2)
        seen = []
        resumed = Conversation.resume(store, "c1", callbacks=[seen.append])
        assert resumed.state == original.state
        event = resumed.send_message("more")
        assert seen == [event]
        with pytest.raises(ConversationNotFoundError):
            Conversation.resume(store, "missing")

    def test_forks_go_to_the_same_store(self, store: SQLiteStore):
        """A fork of a persisted conversation is persisted in the same store."""
        source = persisted(store)
        fork = source.fork()
        fork.send_message("in the fork")
        assert store.load(fork.id) == fork.state

    def test_both_store_arguments(self, store: SQLiteStore, tmp_path: Path):
        """persistence_dir and store together are a ValueError."""
        with pytest.raises(ValueError, match="not both"):
            persisted(store, persistence_dir=tmp_path)


# -- random fork trees, reopened in a fresh process --------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 99), events),
        st.tuples(st.just("fork"), st.integers(0, 99), st.none() | st.integers(0, 99)),
        st.tuples(st.just("tag"), st.integers(0, 99), keys, texts),
        st.tuples(st.just("agent_state"), st.integers(0, 99), json_objects),
        st.tuples(st.just("status"), st.integers(0, 99), st.sampled_from(list(ExecutionStatus))),
        st.tuples(st.just("delete"), st.integers(0, 99)),
        st.tuples(st.just("navigate"), st.integers(0, 99), st.none() | st.integers(0, 999)),
    ),
    min_size=1,
    max_size=25,
)

READER = """
import json, sys
from cowconv import SQLiteStore
with SQLiteStore(sys.argv[1]) as store:
    out = {str(info.id): json.dumps(
        store.load(info.id).model_dump(mode="json", context={"expose_secrets": True}),
        sort_keys=True) for info in store.list()}
print(json.dumps(out))
"""


def apply(store: SQLiteStore, steps: list) -> tuple[list[Conversation], int, bool]:
    """Run ``steps`` on persisted conversations; returns the live ones, events appended, deleted."""
    live = [persisted(store)]
    appended, deleted = 0, False
    for step in steps:
        if not live:
            live.append(persisted(store))
        target = live[step[1] % len(live)]
        match step:
            case ("append", _, event):
                if event.id not in {e.id for e in target.state.events}:
                    target.append_event(event)
                    appended += 1
            case ("fork", _, at):
                history = target.state.events
                if at is None or not history:
                    live.append(target.fork())
                else:
                    live.append(target.fork(from_event_id=history[at % len(history)].id))
            case ("tag", _, key, value):
                target.set_tag(key, value)
            case ("agent_state", _, changes):
                target.update_agent_state(changes)
            case ("status", _, status):
                target._commit(lambda s, status=status: s._replace(execution_status=status))
            case ("delete", _):
                store.delete(target.id)
                live.remove(target)
                deleted = True
            case ("navigate", _, pick):
                if target.state.execution_status is ExecutionStatus.RUNNING:
                    continue  # refused while running (tests/test_tree.py)
                every = [e.id for branch in target.state.branches for e in branch]
                target.navigate_to(None if pick is None or not every else every[pick % len(every)])
    return live, appended, deleted


class TestRandomForkTrees:
    @pytest.mark.slow
    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(steps=operations)
    def test_reopened_in_fresh_process_equals_memory(self, steps):
        """Random fork trees reload equal in a new process; forks store no events."""
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "cowconv.db"
            with SQLiteStore(path) as store:
                live, appended, deleted = apply(store, steps)
                expected = {str(c.id): dump(as_reloaded(c.state)) for c in live}
            rows = event_rows(path)
            assert rows <= appended
            if not deleted:
                assert rows == appended
            result = subprocess.run(
                [sys.executable, "-c", READER, str(path)],
                capture_output=True,
                text=True,
                check=True,
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )
            assert json.loads(result.stdout) == expected
            with SQLiteStore(path) as store:
                for conversation in live:
                    store.delete(conversation.id)
            assert (event_rows(path), conversation_rows(path)) == (0, 0)


class TestBytesWrittenBy:
    def test_fork_bytes_do_not_grow_with_history(self, store: SQLiteStore):
        """A fork writes a few pages (under 16 KiB) whether the history is short or long."""
        source = persisted(store)
        fill(source, 10)
        short = store.bytes_written_by(source.fork)
        fill(source, 490)
        long = store.bytes_written_by(source.fork)
        assert 0 < short <= 16 * 1024 and 0 < long <= 16 * 1024
        assert store.bytes_written_by(lambda: fill(source, 50)) > long
        assert store.bytes_written_by(lambda: None) == 0
