"""No write is lost: a stale writer on one SQLite file is refused, never applied (#10 part 3).

Every stored conversation carries a generation (new at creation) and a
version (counted up by every write). A writer whose snapshot is not the
stored write gets ``StoreError`` and writes nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationState,
    CorruptStoreError,
    SQLiteStore,
    StoreError,
)
from tests.conftest import message_texts

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-old"))
NEW_AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-new"))


def view(state: ConversationState) -> dict[str, Any]:
    """What a write can change, comparable across loads."""
    return {
        "events": [event.id for event in state.events],
        "tags": dict(state.tags),
        "agent_state": state.model_dump(mode="json")["agent_state"],
        "api_key": state.agent.llm.api_key and state.agent.llm.api_key.get_secret_value(),
        "working_dir": state.workspace.working_dir,
    }


class TestStaleWriters:
    def test_tag_after_another_writers_changes_is_refused(self, tmp_path: Path):
        """A sets a tag and agent state; B (opened before) setting a tag is refused, A's kept."""
        path = tmp_path / "s.db"
        with SQLiteStore(path) as a_store, SQLiteStore(path) as b_store:
            Conversation(AGENT, tmp_path, store=a_store, conversation_id="x")
            a = Conversation.resume(a_store, "x")
            b = Conversation.resume(b_store, "x")
            a.set_tag("owner", "a")
            a.update_agent_state({"step": 1})
            with pytest.raises(StoreError, match="another writer"):
                b.set_tag("owner", "b")
            stored = SQLiteStore(path)
            assert view(stored.load("x"))["tags"] == {"owner": "a"}
            assert view(stored.load("x"))["agent_state"] == {"step": 1}
            stored.close()
            assert dict(b.state.tags) == {}  # the refused change is not shown either

    @pytest.mark.parametrize("same_store", [True, False])
    def test_writer_of_a_deleted_conversation_cannot_write_into_its_successor(
        self, tmp_path: Path, same_store: bool
    ):
        """After delete(x) and a new x with as many events, the old writer is refused."""
        path = tmp_path / "s.db"
        with SQLiteStore(path) as one, SQLiteStore(path) as two:
            old = Conversation(AGENT, tmp_path, store=one, conversation_id="x")
            old.send_message("old")
            other = one if same_store else two
            other.delete("x")
            (tmp_path / "new").mkdir()  # a workspace must exist when a conversation is made
            new = Conversation(NEW_AGENT, tmp_path / "new", store=other, conversation_id="x")
            new.send_message("new")
            with pytest.raises(StoreError, match="deleted and created again"):
                old.send_message("appended by the old writer")
            with pytest.raises(StoreError):
                old.set_tag("k", "v")
            loaded = view(one.load("x"))
            assert loaded["api_key"] == "sk-new"
            assert loaded["working_dir"] == str(tmp_path / "new")
            assert message_texts(one.load("x").events) == ["new"]

    def test_every_kind_of_change_is_checked(self, tmp_path: Path):
        """Events, tags, agent state, skills, status and agent: a stale one of each is refused."""
        path = tmp_path / "s.db"
        changes = [
            lambda c: c.send_message("m"),
            lambda c: c.set_tag("k", "v"),
            lambda c: c.update_agent_state({"k": 1}),
            lambda c: c.activate_skill("s"),
            lambda c: c._commit(lambda s: s._replace(execution_status="paused")),
            lambda c: c._commit(lambda s: s._replace(agent=NEW_AGENT)),
        ]
        with SQLiteStore(path) as a_store, SQLiteStore(path) as b_store:
            Conversation(AGENT, tmp_path, store=a_store, conversation_id="x")
            for change in changes:
                stale = Conversation.resume(b_store, "x")
                Conversation.resume(a_store, "x").set_tag("bump", str(id(change)))
                before = view(a_store.load("x"))
                with pytest.raises(StoreError):
                    change(stale)
                assert view(a_store.load("x")) == before

    def test_resume_with_a_new_agent_is_a_checked_write(self, tmp_path: Path):
        """Reopening with a new API key is a write like any other: it does not lose tags."""
        path = tmp_path / "s.db"
        with SQLiteStore(path) as store:
            Conversation(AGENT, tmp_path, store=store, conversation_id="x").set_tag("k", "v")
            resumed = Conversation(NEW_AGENT, tmp_path, store=store, conversation_id="x")
            resumed.send_message("hi")
            assert view(store.load("x"))["tags"] == {"k": "v"}
            assert view(store.load("x"))["api_key"] == "sk-new"

    def test_store_of_the_previous_layout_is_migrated(self, tmp_path: Path):
        """A store written before versions existed opens, migrates, and checks writers."""
        path = tmp_path / "old.db"
        with SQLiteStore(path) as store:
            Conversation(AGENT, tmp_path, store=store, conversation_id="x").send_message("kept")
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("ALTER TABLE conversations DROP COLUMN generation")
            db.execute("ALTER TABLE conversations DROP COLUMN version")
            db.execute("PRAGMA user_version = 1")
            db.commit()
        with SQLiteStore(path) as one, SQLiteStore(path) as two:
            a, b = Conversation.resume(one, "x"), Conversation.resume(two, "x")
            a.send_message("a")
            with pytest.raises(StoreError):
                b.set_tag("k", "v")
            assert message_texts(two.load("x").events) == ["kept", "a"]


class TestUnreadableRows:
    def damage(self, path: Path, conversation_id: str) -> None:
        # What cowconv 0.1.0 wrote for LLM(retry_max_wait=inf): JSON null where a float goes.
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(
                "UPDATE conversations SET state = json_set(state, '$.agent.llm.retry_max_wait',"
                " json('null')) WHERE id = ?",
                (conversation_id,),
            )
            db.commit()

    def test_one_bad_row_hides_nothing_else_and_can_be_deleted(self, tmp_path: Path):
        """list() shows the readable ones, unreadable() names the bad one, delete() removes it."""
        path = tmp_path / "s.db"
        with SQLiteStore(path) as store:
            for name in "abc":
                Conversation(AGENT, tmp_path, store=store, conversation_id=name).send_message(name)
        self.damage(path, "b")
        with SQLiteStore(path) as store:
            assert [info.id for info in store.list()] == ["a", "c"]
            assert store.unreadable() == ["b"]
            with pytest.raises(CorruptStoreError, match="'b'"):
                store.load("b")
            assert message_texts(store.load("c").events) == ["c"]
            fork = Conversation.resume(store, "a").fork(conversation_id="a2")
            assert message_texts(fork.state.events) == ["a"]
            store.delete("b")
            assert store.unreadable() == []
            assert [info.id for info in store.list()] == ["a", "c", "a2"]


# -- the stateful model ------------------------------------------------------------------


class TwoStoresOneFile(RuleBasedStateMachine):
    """Two SQLiteStore objects on one file, writers on both, against a model of the file.

    The model keeps, per id, the stored view and a write counter. A writer
    remembers the counter it last read or wrote: its write must succeed
    exactly when that is still the stored one, and a refused write changes
    nothing.
    """

    writers = Bundle("writers")

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(self._tmp())
        self.path = self.directory / "store.db"
        self.stores = [SQLiteStore(self.path), SQLiteStore(self.path)]
        self.model: dict[str, tuple[int, dict[str, Any]]] = {}
        self.counter = itertools.count(1)
        self.names = itertools.count()

    @staticmethod
    def _tmp() -> str:
        import tempfile

        return tempfile.mkdtemp(prefix="cowconv-stateful-")

    def teardown(self) -> None:
        for store in self.stores:
            store.close()

    # -- making writers --

    @initialize(target=writers)
    def first(self) -> Any:
        return self._create("c0", 0)

    def _create(self, conversation_id: str, side: int) -> Any:
        conversation = Conversation(
            AGENT, self.directory, store=self.stores[side], conversation_id=conversation_id
        )
        stamp = next(self.counter)
        self.model[conversation_id] = (stamp, view(conversation.state))
        return (conversation, stamp)

    @rule(target=writers, side=st.integers(0, 1), name=st.sampled_from(["c0", "c1", "c2"]))
    def create(self, side: int, name: str) -> Any:
        if name in self.model:
            return multiple()
        return self._create(name, side)

    @rule(target=writers, side=st.integers(0, 1), name=st.sampled_from(["c0", "c1", "c2"]))
    def open(self, side: int, name: str) -> Any:
        if name not in self.model:
            return multiple()
        conversation = Conversation.resume(self.stores[side], name)
        stamp, stored = self.model[name]
        assert view(conversation.state) == stored
        return (conversation, stamp)

    # -- writing through a writer --

    def _write(self, writer: Any, change: Any) -> Any:
        conversation, stamp = writer
        current = self.model.get(conversation.id)
        fresh = current is not None and current[0] == stamp
        before = conversation.state
        try:
            change(conversation)
        except StoreError:
            assert not fresh, "a write from the stored version was refused"
            assert conversation.state is before
            return multiple()
        assert fresh, "a stale write was acknowledged"
        new_stamp = next(self.counter)
        self.model[conversation.id] = (new_stamp, view(conversation.state))
        return (conversation, new_stamp)

    @rule(target=writers, writer=consumes(writers))
    def append(self, writer: Any) -> Any:
        return self._write(writer, lambda c: c.send_message(f"m{next(self.names)}"))

    @rule(target=writers, writer=consumes(writers))
    def tag(self, writer: Any) -> Any:
        return self._write(writer, lambda c: c.set_tag("t", f"v{next(self.names)}"))

    @rule(target=writers, writer=consumes(writers))
    def agent_state(self, writer: Any) -> Any:
        return self._write(writer, lambda c: c.update_agent_state({"n": next(self.names)}))

    @rule(target=writers, writer=writers, name=st.sampled_from(["f0", "f1"]))
    def fork(self, writer: Any, name: str) -> Any:
        conversation, _ = writer
        if name in self.model or name == conversation.id:
            return multiple()
        fork = conversation.fork(conversation_id=name)
        stamp = next(self.counter)
        self.model[name] = (stamp, view(fork.state))
        return (fork, stamp)

    @precondition(lambda self: self.model)
    @rule(side=st.integers(0, 1), data=st.data())
    def delete(self, side: int, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.model)))
        self.stores[side].delete(name)
        del self.model[name]

    # -- what must hold --

    @invariant()
    def both_stores_hold_the_model(self) -> None:
        for store in self.stores:
            assert sorted(info.id for info in store.list()) == sorted(self.model)
            for name, (_, expected) in self.model.items():
                assert view(store.load(name)) == expected


TwoStoresOneFile.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTwoStoresOneFile = TwoStoresOneFile.TestCase
