"""The store suite: one set of behaviours, run on memory, SQLite and PostgreSQL alike.

Every store is the generic :class:`~cowconv.stores.tree.TreeStore` over a
different row database; these tests hold each of them to the same
guarantees: forks share stored events, a stale writer is refused, navigation
and deletes write rows not copies, export/import keep the tree, unreadable
rows hide nothing else, and (for the databases other processes can open) a
writer killed mid-write loses nothing it acknowledged.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationNotFoundError,
    ConversationState,
    CorruptStoreError,
    ExecutionStatus,
    MessageEvent,
    PauseEvent,
    RemoteConversation,
    Store,
    StoreError,
    StoreLockedError,
    Workspace,
)
from cowconv.core.frozen import thaw
from cowconv.stores import TreeStore, open_store
from tests.conftest import StoreDatabase, message_texts

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-suite"))
NEW_AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-suite-new"))
REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def persisted(store: Store, **options: Any) -> Conversation:
    return Conversation(agent=AGENT, workspace="/tmp", store=store, visualizer=None, **options)


def fill(conversation: Conversation, count: int) -> list[MessageEvent]:
    return [conversation.send_message(f"message {n}") for n in range(count)]


def view(state: ConversationState) -> dict[str, Any]:
    """What a write can change, comparable across loads."""
    return {
        "events": [event.id for event in state.events],
        "tags": dict(state.tags),
        "agent_state": state.model_dump(mode="json")["agent_state"],
        "api_key": state.agent.llm.api_key and state.agent.llm.api_key.get_secret_value(),
    }


class TestForkSharing:
    def test_fork_is_one_row_and_no_event(self, store_database: StoreDatabase):
        """Forking a stored conversation adds one conversation row and no event row."""
        store = store_database.open()
        source = persisted(store)
        fill(source, 30)
        events, rows = store_database.count("events"), store_database.count("conversations")
        fork = source.fork(title="branch")
        assert store_database.count("events") == events == 31  # the system prompt, 30 messages
        assert store_database.count("conversations") == rows + 1
        assert store_database.open().load(fork.id) == fork.state

    def test_fork_of_a_fork_at_an_inherited_event(self, store_database: StoreDatabase):
        """A fork of a fork at an event it inherited shares rows; a new store loads all equal."""
        store = store_database.open()
        source = persisted(store)
        sent = fill(source, 10)
        fork = source.fork()
        fill(fork, 3)
        early = fork.fork(from_event_id=sent[4].id)
        later = early.send_message("after")
        assert store_database.count("events") == 1 + 10 + 3 + 1
        again = store_database.open()
        for conversation in (source, fork, early):
            assert again.load(conversation.id) == conversation.state
        assert message_texts(again.load(early.id).events)[-2:] == ["message 4", later.text]

    def test_loaded_fork_shares_the_parents_events(self, store_database: StoreDatabase):
        """One store loading a parent and then its fork hands back histories sharing chunks."""
        source = persisted(store_database.open())
        fill(source, 20)
        fork = source.fork()
        fork.send_message("own")
        again = store_database.open()
        parent_events, fork_events = again.load(source.id).events, again.load(fork.id).events
        assert fork_events._chunks[0] is parent_events._chunks[0]

    def test_many_threads_one_store(self, store_database: StoreDatabase):
        """Threads forking, appending and listing through one store lose nothing."""
        store = store_database.open()
        source = persisted(store, conversation_id="source")
        fill(source, 3)
        errors: list[BaseException] = []

        def work(number: int) -> None:
            try:
                fork = source.fork(conversation_id=f"fork-{number}")
                for n in range(8):
                    fork.send_message(f"{number}-{n}")
                    store.list(limit=3)
                assert store.load(fork.id) == fork.state
            except BaseException as error:  # reported below, in the test's thread
                errors.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert errors == []
        assert len(store.list()) == 5
        assert message_texts(store.load("fork-2").events)[3:] == [f"2-{n}" for n in range(8)]


class TestStaleWriters:
    def test_second_writer_is_refused_and_loses_nothing(self, store_database: StoreDatabase):
        """Two stores resume one conversation: the stale writer gets StoreError, nothing lost."""
        first_store, second_store = store_database.open(), store_database.open()
        persisted(first_store, conversation_id="c1")
        first = Conversation.resume(first_store, "c1")
        second = Conversation.resume(second_store, "c1")
        first.send_message("first")
        with pytest.raises(StoreError, match="another writer"):
            second.send_message("second")
        with pytest.raises(StoreError, match="another writer"):
            second.set_tag("k", "v")
        assert len(second.state.events) == 0
        assert message_texts(second_store.load("c1").events) == ["first"]
        assert dict(second_store.load("c1").tags) == {}

    def test_every_kind_of_change_is_checked(self, store_database: StoreDatabase):
        """Events, tags, agent state, skills, status, agent, navigation: a stale one is refused."""
        a_store, b_store = store_database.open(), store_database.open()
        persisted(a_store, conversation_id="x").send_message("root")
        changes = [
            lambda c: c.send_message("m"),
            lambda c: c.set_tag("k", "v"),
            lambda c: c.update_agent_state({"k": 1}),
            lambda c: c.activate_skill("s"),
            lambda c: c._commit(lambda s: s._replace(execution_status=ExecutionStatus.PAUSED)),
            lambda c: c._commit(lambda s: s._replace(agent=NEW_AGENT)),
            lambda c: c.navigate_to(None),
        ]
        for change in changes:
            stale = Conversation.resume(b_store, "x")
            Conversation.resume(a_store, "x").set_tag("bump", str(id(change)))
            before = view(a_store.load("x"))
            with pytest.raises(StoreError):
                change(stale)
            assert view(b_store.load("x")) == before

    def test_writer_of_a_deleted_conversation_is_refused(self, store_database: StoreDatabase):
        """After delete(x) and a new x, the old writer cannot write into the new one."""
        one, two = store_database.open(), store_database.open()
        old = persisted(one, conversation_id="x")
        old.send_message("old")
        two.delete("x")
        new = Conversation(NEW_AGENT, "/tmp", store=two, conversation_id="x", visualizer=None)
        new.send_message("new")
        with pytest.raises(StoreError, match="deleted and created again"):
            old.send_message("appended by the old writer")
        assert message_texts(one.load("x").events) == ["new"]
        assert view(one.load("x"))["api_key"] == "sk-suite-new"

    def test_saving_a_deleted_conversation(self, store_database: StoreDatabase):
        """A live conversation deleted from its store cannot save again."""
        store = store_database.open()
        conversation = persisted(store, conversation_id="c1")
        store.delete("c1")
        with pytest.raises(StoreError, match="deleted"):
            conversation.send_message("after delete")

    def test_a_closed_store_refuses_and_keeps_the_snapshot(self, store_database: StoreDatabase):
        """When the store cannot save, the conversation keeps its previous snapshot."""
        store = store_database.open()
        conversation = persisted(store)
        conversation.send_message("kept")
        before = conversation.state
        store.close()
        with pytest.raises(StoreError, match="closed"):
            conversation.send_message("lost")
        assert conversation.state is before


class TestNavigation:
    def test_branches_and_leaf_survive_a_reload(self, store_database: StoreDatabase):
        """A reloaded conversation has the same branches, in order, and goes on from its leaf."""
        conversation = persisted(store_database.open())
        e0, e1, _ = (conversation.send_message(text) for text in ("root", "a1", "a2"))
        conversation.navigate_to(e0.id)
        b1 = conversation.send_message("b1")
        conversation.navigate_to(e1.id)
        conversation.send_message("c2")
        conversation.navigate_to(b1.id)
        again = Conversation.resume(store_database.open(), conversation.id)
        assert [message_texts(b) for b in again.state.branches] == [
            ["root", "a1", "a2"],
            ["root", "a1", "c2"],
            ["root", "b1"],
        ]
        assert again.state.leaf_event_id == b1.id
        again.send_message("b2")
        assert message_texts(again.state.branch) == ["root", "b1", "b2"]

    def test_navigating_copies_no_event(self, store_database: StoreDatabase):
        """Navigating back, forward, to none and branching stores each event once."""
        store = store_database.open()
        conversation = persisted(store)
        rng = random.Random(7)
        for _ in range(40):
            every = [event.id for branch in conversation.state.branches for event in branch]
            if every and rng.random() < 0.4:
                conversation.navigate_to(rng.choice([None, *every]))
            else:
                conversation.append_event(PauseEvent())
        distinct = {event.id for branch in conversation.state.branches for event in branch}
        assert store_database.count("events") == len(distinct)
        reloaded = store_database.open().load(conversation.id)
        assert [[e.id for e in b] for b in reloaded.branches] == [
            [e.id for e in b] for b in conversation.state.branches
        ]

    def test_fork_at_an_event_of_an_abandoned_branch(self, store_database: StoreDatabase):
        """fork(from_event_id=) on another branch stores a row and no event."""
        conversation = persisted(store_database.open())
        e0, _, e2 = (conversation.send_message(text) for text in ("root", "a1", "a2"))
        conversation.navigate_to(e0.id)
        conversation.send_message("b1")
        events = store_database.count("events")
        fork = conversation.fork(from_event_id=e2.id)
        assert store_database.count("events") == events
        assert message_texts(store_database.open().load(fork.id).events) == ["root", "a1", "a2"]


class TestDelete:
    def test_forks_survive_and_everything_is_reclaimed(self, store_database: StoreDatabase):
        """Deleting keeps forks whole; once nothing reaches them, every row is gone."""
        store = store_database.open()
        source = persisted(store)
        fill(source, 5)
        middle = source.fork()
        fill(middle, 2)
        leaf = middle.fork(from_event_id=source.state.events[1].id)
        leaf.send_message("leaf")
        source.navigate_to(source.state.events[2].id)
        source.send_message("other branch")
        for conversation in (middle, source):
            store.delete(conversation.id)
            assert not store.exists(conversation.id)
            assert store_database.open().load(leaf.id) == leaf.state
        assert [info.id for info in store.list()] == [leaf.id]
        store.delete(leaf.id)
        assert (store_database.count("events"), store_database.count("conversations")) == (0, 0)
        with pytest.raises(ConversationNotFoundError):
            store.delete(leaf.id)


class TestListing:
    def test_order_tags_and_paging(self, store_database: StoreDatabase):
        """list() is oldest first, filters by every tag given, and pages."""
        store = store_database.open()
        for name in "abcde":
            persisted(store, conversation_id=name, tags={"team": "x" if name in "abd" else "y"})
        assert [i.id for i in store.list()] == list("abcde")
        assert [i.id for i in store.list(tags={"team": "x"})] == list("abd")
        assert [i.id for i in store.list(tags={"team": "x"}, limit=1, offset=1)] == ["b"]
        assert [i.id for i in store.list(limit=2, offset=2)] == ["c", "d"]
        assert store.list(limit=0) == [] and store.list(offset=2**70) == []
        assert [i.id for i in store.list(limit=2**70)] == list("abcde")
        assert store.list(tags={'we"ird': "'"}) == []
        with pytest.raises(ValueError):
            store.list(limit=-1)

    def test_info_matches_the_listing(self, store_database: StoreDatabase):
        """info() is the listed summary: counts, leaf, lineage, title."""
        store = store_database.open()
        source = persisted(store, conversation_id="a")
        fill(source, 3)
        source.fork(conversation_id="b", title="Fork")
        infos = store.list()
        assert [info.event_count for info in infos] == [4, 4]
        assert infos[1].title == "Fork" and infos[1].forked_from_conversation_id == "a"
        assert infos[1].leaf_event_id == source.state.leaf_event_id
        assert store_database.open().info("b") == infos[1]


class TestUnreadableRows:
    def test_one_bad_row_hides_nothing_else_and_can_be_deleted(self, store_database: StoreDatabase):
        """list() shows the readable ones, unreadable() names the bad one, delete() removes it."""
        store = store_database.open()
        for name in "abc":
            persisted(store, conversation_id=name).send_message(name)
        store_database.damage("b")
        store = store_database.open()
        assert [info.id for info in store.list()] == ["a", "c"]
        assert store.unreadable() == ["b"]
        with pytest.raises(CorruptStoreError, match="'b'"):
            store.load("b")
        store.delete("b")
        assert store.unreadable() == []
        assert [info.id for info in store.list()] == ["a", "c"]

    def test_many_rows_are_read_in_one_query_and_checked_once(self, store_database: StoreDatabase):
        """unreadable() on a store of many: the bad one found, again on the next call, and a
        row rewritten by cowconv is checked again (its version changed)."""
        store = store_database.open()
        for number in range(70):
            persisted(store, conversation_id=f"c{number:02}")
        store_database.damage("c33")
        store = store_database.open()
        assert store.unreadable() == ["c33"]
        assert store.unreadable() == ["c33"]
        Conversation.resume(store, "c05").set_tag("k", "v")
        store_database.damage("c05")
        assert store.unreadable() == ["c05", "c33"]


class TestExportImport:
    def test_fork_tree_round_trip_keeps_sharing(
        self, store_database: StoreDatabase, tmp_path: Path
    ):
        """A fork tree with branches exports parents first; importing stores events once."""
        store = store_database.open()
        root = persisted(store)
        fill(root, 6)
        child = root.fork()
        child.send_message("child")
        grandchild = child.fork(from_event_id=root.state.events[2].id)
        grandchild.send_message("grandchild")
        root.navigate_to(root.state.events[3].id)
        root.send_message("root branch")
        store.delete(child.id)  # a tombstone in the middle of the tree
        document = store.export_conversation(root.id, with_forks=True, include_secrets=True)
        assert "sk-suite" not in store.export_conversation(root.id)
        store.delete(root.id)
        store.delete(grandchild.id)
        assert store.import_conversations(document) == [root.id, grandchild.id]
        again = store_database.open()
        assert again.load(root.id) == root.state
        assert again.load(grandchild.id) == grandchild.state
        assert store_database.count("events") == 1 + 6 + 1 + 1  # prompt, root's, branch, own

    def test_a_taken_id_imports_nothing(self, store_database: StoreDatabase):
        """Importing over an existing id is a ValueError; nothing of the import is kept."""
        store = store_database.open()
        root = persisted(store, conversation_id="root")
        fill(root, 2)
        root.fork(conversation_id="fork")
        document = store.export_conversation("root", with_forks=True)
        store.delete("root")
        rows = store_database.count("conversations"), store_database.count("events")
        with pytest.raises(ValueError, match="already exists"):
            store.import_conversations(document)
        assert [info.id for info in store.list()] == ["fork"]
        assert (store_database.count("conversations"), store_database.count("events")) == rows

    @staticmethod
    def with_deep_value(document: str, depth: int, shape: str = "array") -> str:
        """``document`` with a value ``depth`` levels deep in its conversation's agent state."""
        data = json.loads(document)
        data["conversations"][0]["state"]["agent_state"] = {"deep": "PLACE"}
        if shape == "array":
            nested = "[" * depth + "]" * depth
        else:
            nested = '{"a":' * depth + "1" + "}" * depth
        return json.dumps(data).replace('"PLACE"', nested, 1)

    def test_a_document_nested_too_deep_imports_nothing(self, store_database: StoreDatabase):
        """Nesting past 512 levels, in text or bytes of any JSON encoding, is refused as not
        JSON (a ValueError saying why, found without recursing); nothing is stored."""
        store = store_database.open()
        root = persisted(store, conversation_id="root")
        fill(root, 2)
        document = store.export_conversation("root")
        store.delete("root")
        rows = store_database.count("conversations"), store_database.count("events")
        for shape in ("array", "object"):
            deep = self.with_deep_value(document, 100_000, shape)
            for data in (deep, deep.encode(), deep.encode("utf-16"), deep.encode("utf-32")):
                with pytest.raises(ValueError, match="nested deeper than 512 levels"):
                    store.import_conversations(data)
        assert store.list() == []
        assert (store_database.count("conversations"), store_database.count("events")) == rows

    @given(depth=st.integers(1, 1_500), shape=st.sampled_from(["array", "object"]))
    @settings(
        max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    def test_a_document_of_any_depth_imports_whole_or_not_at_all(
        self, store_database: StoreDatabase, depth: int, shape: str
    ):
        """Whatever import accepts loads back equal; whatever it refuses (the state's own depth
        rule, or JSON past 512 levels) is a ValueError and leaves the store as it was."""
        store = store_database.open()
        if not store.exists("root"):
            fill(persisted(store, conversation_id="root"), 1)
        document = store.export_conversation("root")
        data = self.with_deep_value(document, depth, shape).replace('"root"', '"copy"')
        try:
            imported = store.import_conversations(data)
        except ValueError as error:
            assert "nested deeper than" in str(error), error
            assert not store.exists("copy")
        else:
            assert [str(i) for i in imported] == ["copy"]
            sent = json.loads(data)["conversations"][0]["state"]["agent_state"]
            assert thaw(store_database.open().load("copy").agent_state) == sent
            store.delete("copy")


# -- other processes: the databases they can open ------------------------------------------

OTHER_PROCESS = ["sqlite", "postgres"]

# Appends numbered events (some spanning several pages) in batches, forks now and then,
# and prints what each returned commit made durable.
WRITER = """
import random, sys
from cowconv import LLM, Agent, Conversation, MessageEvent
from cowconv.stores import open_store
store = open_store(sys.argv[1])
agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-suite"))
conversation = Conversation(agent=agent, workspace="/tmp", store=store, conversation_id=sys.argv[2],
                            visualizer=None)
count = len(conversation.state.events)
print("start", count, flush=True)
limit = int(sys.argv[3])
while count < limit:
    size = random.randint(1, 3)
    batch = [
        MessageEvent(source="user", role="user", content=f"{n}:" + "x" * (n % 5 * 3000))
        for n in range(count, count + size)
    ]
    conversation._commit(lambda s: s._replace(events=s.events.extend(batch)))
    count += size
    if random.random() < 0.1:
        conversation.fork()
    print("acked", count, flush=True)
print("done", flush=True)
"""


def start_writer(location: str, conversation_id: str, limit: int = 10**9) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, location, conversation_id, str(limit)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=ENV,
    )


def check_numbered(store: TreeStore, conversation_id: str) -> int:
    """The stored history is events 0..n-1 in order, every one whole; returns n."""
    texts = message_texts(store.load(conversation_id).events)
    assert all(text == f"{n}:" + "x" * (n % 5 * 3000) for n, text in enumerate(texts))
    return len(texts)


@pytest.mark.parametrize("store_database", OTHER_PROCESS, indirect=True)
class TestOtherProcesses:
    """Other processes open the database: a SQLite file, a PostgreSQL database."""

    @pytest.mark.slow
    def test_sigkill_of_a_writer_mid_write(self, store_database: StoreDatabase):
        """After SIGKILL mid-write, a new store shows every acknowledged event, none torn."""
        assert store_database.location is not None
        rng = random.Random(4)
        stored = 0
        for _ in range(8):
            writer = start_writer(store_database.location, "c")
            assert writer.stdout is not None
            assert writer.stdout.readline().split() == ["start", str(stored)]
            time.sleep(rng.uniform(0.05, 0.3))
            writer.send_signal(signal.SIGKILL)
            output, _ = writer.communicate(timeout=60)
            whole_lines = output.split("\n")[:-1]  # the kill may cut the last line
            acked = [int(line.split()[1]) for line in whole_lines if line.startswith("acked ")]
            store = store_database.open()
            now = check_numbered(store, "c")
            for info in store.list():
                assert len(list(store.load(info.id).events)) == info.event_count
            store.close()
            assert now >= max(acked, default=stored)
            stored = now
        assert stored > 0

    def test_two_writer_processes_are_serialised(self, store_database: StoreDatabase):
        """Two processes appending to one database both keep every event, in order."""
        assert store_database.location is not None
        store_database.open().close()  # the schema, before both race to make it
        writers = [start_writer(store_database.location, name, 60) for name in ("l", "r")]
        for writer in writers:
            output, errors = writer.communicate(timeout=300)
            assert writer.returncode == 0, errors
            assert output.splitlines()[-1] == "done"
        store = store_database.open()
        assert check_numbered(store, "l") >= 60 and check_numbered(store, "r") >= 60

    def test_a_reader_in_another_process_sees_each_write(self, store_database: StoreDatabase):
        """A conversation written here is read back whole by another process."""
        assert store_database.location is not None
        conversation = persisted(store_database.open(), tags={"team": "x"})
        fill(conversation, 5)
        conversation.navigate_to(conversation.state.events[2].id)
        conversation.send_message("branch")
        script = (
            "import sys; from cowconv.stores import open_store\n"
            "store = open_store(sys.argv[1])\n"
            "print(store.load(sys.argv[2]).model_dump_json(context={'expose_secrets': True}))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, store_database.location, str(conversation.id)],
            capture_output=True, text=True, check=True, cwd=REPO, env=ENV, timeout=120,
        )  # fmt: skip
        loaded = ConversationState.model_validate_json(result.stdout)
        assert loaded == conversation.state
        assert json.loads(result.stdout)["tags"] == {"team": "x"}


class TestPostgresOnly:
    def test_a_held_write_lock_is_a_locked_error_after_a_bounded_wait(self, postgres_dsn: str):
        """While another session holds the writers' lock, a write fails with StoreLockedError."""
        from cowconv.stores.postgres import _WRITE_LOCK, PostgresStore

        with PostgresStore(postgres_dsn, lock_timeout=0.2) as store:
            conversation = persisted(store, conversation_id="c")
            with psycopg.connect(postgres_dsn) as holder:
                holder.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
                before = conversation.state
                with pytest.raises(StoreLockedError, match="locked"):
                    conversation.send_message("blocked")
                assert conversation.state is before
                assert store.load("c") == before  # reading needs no lock
            conversation.send_message("after release")
            assert message_texts(store.load("c").events) == ["after release"]

    def test_a_store_url_opens_a_postgres_store(self, postgres_dsn: str):
        """Conversation(store=URL), persistence_dir=URL and resume(URL, id) reach one database."""
        created = Conversation(agent=AGENT, workspace="/tmp", store=postgres_dsn, visualizer=None)
        created.send_message("hello")
        resumed = Conversation.resume(postgres_dsn, created.id)
        assert resumed.state == created.state
        again = Conversation(
            agent=AGENT, workspace="/tmp", persistence_dir=postgres_dsn,
            conversation_id=created.id, visualizer=None,
        )  # fmt: skip
        assert message_texts(again.state.events) == ["hello"]
        assert type(open_store(postgres_dsn)).__name__ == "PostgresStore"
        assert "password" not in repr(created.backend.sink)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(store: str) -> tuple[subprocess.Popen[bytes], str]:
    """``cowconv serve --store store`` on a free port; returns it and its URL once it answers."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cowconv", "serve", "--port", str(port), "--store", store],
        cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                assert answer.status == 200
                return server, url
        except OSError:
            assert server.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)


class TestServeReplicas:
    @pytest.mark.slow
    def test_two_servers_on_one_postgres_database(self, postgres_dsn: str, tmp_path: Path):
        """cowconv serve --store URL twice: created on one, forked and listed on the other."""
        (one, one_url), (two, two_url) = serve(postgres_dsn), serve(postgres_dsn)
        try:
            workspace = Workspace(host=one_url, working_dir=str(tmp_path))
            created = Conversation(agent=AGENT, workspace=workspace, visualizer=None)
            created.send_message("hello")
            with RemoteConversation.attach(two_url, str(created.id)) as attached:
                fork = attached.fork(title="on two")
                fork.send_message("from two")
            for url in (one_url, two_url):
                with urllib.request.urlopen(f"{url}/api/conversations", timeout=30) as answer:
                    listed = json.load(answer)["items"]
                assert [item["title"] for item in listed] == [None, "on two"]
            with open_store(postgres_dsn) as store:
                assert message_texts(store.load(fork.id).events) == ["hello", "from two"]
        finally:
            for server in (one, two):
                server.terminate()
                server.wait(timeout=60)


class TestLegacyFile:
    def test_a_store_written_by_cowconv_0_1_opens_and_takes_writes(self, tmp_path: Path):
        """tests/data/store-0.1.sqlite (make_legacy_0_1.py) migrates, loads, forks and appends."""
        path = tmp_path / "cowconv.db"
        shutil.copy(REPO / "tests" / "data" / "store-0.1.sqlite", path)
        with open_store(path) as store:
            assert [(str(i.id), i.title, i.event_count) for i in store.list()] == [
                ("legacy-source", None, 12),
                ("legacy-fork", "Fork", 13),
            ]
            assert store.unreadable() == []
            source, fork = store.load("legacy-source"), store.load("legacy-fork")
            assert list(fork.events)[:12] == list(source.events)
            resumed = Conversation.resume(store, "legacy-fork")
            resumed.send_message("written by this cowconv")
        with open_store(path) as store:
            assert message_texts(store.load("legacy-fork").events)[-2:] == [
                "In the fork.",
                "written by this cowconv",
            ]
