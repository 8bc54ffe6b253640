"""Fault tests for SQLiteStore: SIGKILL mid-write, two processes, locks, bad files."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    Conversation,
    CorruptStoreError,
    InvalidTypeError,
    InvalidValueError,
    SchemaVersionError,
    SQLiteStore,
    StoreError,
    StoreLockedError,
)
from cowconv.agent_server import create_app
from cowconv.stores import open_store
from tests.conftest import message_texts

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-faults"))

# Appends numbered events (some big enough to span several pages) in batches, forks
# now and then, and prints what each returned commit made durable.
WRITER = """
import random, sys
from cowconv import LLM, Agent, Conversation, MessageEvent, SQLiteStore
store = SQLiteStore(sys.argv[1], lock_timeout=30)
agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-faults"))
conversation = Conversation(agent=agent, workspace="/tmp", store=store, conversation_id=sys.argv[2])
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

LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""


def start_writer(path: Path, conversation_id: str, limit: int = 10**9) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), conversation_id, str(limit)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=ENV,
    )


def check_numbered(store: SQLiteStore, conversation_id: str) -> int:
    """The stored history is events 0..n-1 in order, every one whole; returns n."""
    texts = message_texts(store.load(conversation_id).events)
    assert [text.split(":")[0] for text in texts] == [str(n) for n in range(len(texts))]
    assert all(text == f"{n}:" + "x" * (n % 5 * 3000) for n, text in enumerate(texts))
    return len(texts)


def integrity(path: Path) -> str:
    with closing(sqlite3.connect(path)) as db, db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


class TestKilledWriter:
    @pytest.mark.slow
    def test_sigkill_at_random_moments(self, tmp_path: Path):
        """After SIGKILL mid-write, reopening shows every acknowledged event, none torn."""
        path = tmp_path / "cowconv.db"
        rng = random.Random(4)
        stored = 0
        for _ in range(20):
            writer = start_writer(path, "c")
            assert writer.stdout is not None
            assert writer.stdout.readline().split() == ["start", str(stored)]
            time.sleep(rng.uniform(0, 0.15))
            writer.send_signal(signal.SIGKILL)
            output, _ = writer.communicate()
            # Only whole lines count: the kill can land in the middle of writing the last one.
            whole_lines = output.split("\n")[:-1]
            acked = [int(line.split()[1]) for line in whole_lines if line.startswith("acked ")]
            with SQLiteStore(path) as store:
                now = check_numbered(store, "c")
                for info in store.list():
                    assert len(list(store.load(info.id).events)) == info.event_count
            assert now >= max(acked, default=stored)
            stored = now
        assert stored > 0
        assert integrity(path) == "ok"


class TestTwoProcesses:
    def test_concurrent_writers_are_serialised(self, tmp_path: Path):
        """Two processes appending to one store both keep every event, in order."""
        path = tmp_path / "cowconv.db"
        SQLiteStore(path).close()
        writers = [start_writer(path, name, limit=150) for name in ("left", "right")]
        for writer in writers:
            output, errors = writer.communicate(timeout=120)
            assert writer.returncode == 0, errors
            assert output.splitlines()[-1] == "done"
        with SQLiteStore(path) as store:
            assert check_numbered(store, "left") >= 150
            assert check_numbered(store, "right") >= 150
        assert integrity(path) == "ok"

    def test_writer_gets_locked_error_after_bounded_wait(self, tmp_path: Path):
        """While another process holds the write lock, a write fails with StoreLockedError."""
        path = tmp_path / "cowconv.db"
        with SQLiteStore(path) as store:
            Conversation(agent=AGENT, workspace="/tmp", store=store, conversation_id="c")
        with subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as holder:
            assert holder.stdout is not None and holder.stdin is not None
            assert holder.stdout.readline().strip() == "locked"
            with SQLiteStore(path, lock_timeout=0.2) as store:
                conversation = Conversation.resume(store, "c")  # reading needs no lock
                before = conversation.state
                with pytest.raises(StoreLockedError, match="locked"):
                    conversation.send_message("blocked")
                assert conversation.state is before
                holder.stdin.close()
                holder.wait(timeout=30)
                conversation.send_message("after release")
                assert message_texts(store.load("c").events) == ["after release"]


def make_store(path: Path) -> None:
    with SQLiteStore(path) as store:
        Conversation(agent=AGENT, workspace="/tmp", store=store).send_message("hello")


def random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(1).randbytes(8192))


def text_file(path: Path) -> None:
    path.write_text("these are my notes, not a database\n")


def foreign_sqlite(path: Path) -> None:
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        db.execute("INSERT INTO invoices (total) VALUES (9.5)")
    sqlite3.connect(path).close()


def newer_schema(path: Path) -> None:
    make_store(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()


def damaged_store(path: Path) -> None:
    make_store(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = random.Random(2).randbytes(4096 - 100)  # the schema page, after the header
    path.write_bytes(bytes(data))


def truncated_store(path: Path) -> None:
    make_store(path)
    data = path.read_bytes()
    path.write_bytes(data[:1000])


class TestBadFiles:
    @pytest.mark.parametrize(
        ("prepare", "error"),
        [
            (random_bytes, CorruptStoreError),
            (text_file, CorruptStoreError),
            (foreign_sqlite, CorruptStoreError),
            (newer_schema, SchemaVersionError),
            (damaged_store, CorruptStoreError),
            (truncated_store, CorruptStoreError),
        ],
    )
    def test_clear_error_and_file_untouched(self, tmp_path: Path, prepare, error):
        """A file that is not a readable cowconv store raises a clear error and is not changed."""
        path = tmp_path / "cowconv.db"
        prepare(path)
        before = path.read_bytes()
        with pytest.raises(error):
            store = SQLiteStore(path)
            store.load(store.list()[0].id)
        assert path.read_bytes() == before

    def test_errors_are_store_errors(self):
        """Every bad-file error is a StoreError, so one except catches them."""
        assert issubclass(CorruptStoreError, StoreError)
        assert issubclass(SchemaVersionError, StoreError)

    def test_directory_without_access_is_a_store_error(self, tmp_path: Path):
        """A directory whose cowconv.db cannot be created is a StoreError, not a crash."""
        (tmp_path / "cowconv.db").mkdir()  # a directory where the file should be
        with pytest.raises(StoreError):
            SQLiteStore(tmp_path)


class TestWhereAStoreIsOpened:
    """Every door that opens a store at a location (``SQLiteStore``, ``open_store``,
    ``persistence_dir=``, ``store=``, ``Conversation.resume``, the agent server's
    ``data_dir``) checks it in one place (``stores.local_path``): a location that is not a
    path, or that no file can have, is a cowconv error naming the argument; nothing is made."""

    DOORS: ClassVar[dict[str, Callable[[object], object]]] = {
        "SQLiteStore": SQLiteStore,
        "open_store": open_store,
        "persistence_dir": lambda where: Conversation(
            agent=AGENT, workspace="/tmp", persistence_dir=where
        ),
        "store": lambda where: Conversation(agent=AGENT, workspace="/tmp", store=where),
        "resume": lambda where: Conversation.resume(where, "c1"),  # type: ignore[arg-type]
        "data_dir": lambda where: create_app(data_dir=where),  # type: ignore[arg-type]
    }

    NONE_MEANS_NO_STORE = frozenset({"persistence_dir", "store", "data_dir"})
    NAMED: ClassVar[dict[str, str]] = {
        "persistence_dir": "persistence_dir",
        "store": "store",
        "resume": "store",
        "data_dir": "data_dir",
    }  # the argument the error names

    @pytest.mark.parametrize("door", sorted(DOORS))
    @given(
        where=st.one_of(
            st.text(max_size=8).map(lambda text: f"{text}\x00{text}"),
            st.sampled_from(["~no-such-user-here/x", "~no-such-user-here"]),
            st.none(),
            st.integers(),
            st.binary(max_size=4),
            st.lists(st.text(max_size=2), max_size=2),
        )
    )
    @settings(max_examples=25, deadline=None)
    def test_a_location_no_file_can_have_is_refused(self, door: str, where: object):
        if where is None and door in self.NONE_MEANS_NO_STORE:
            return
        before = set(os.listdir("."))
        with pytest.raises((InvalidTypeError, InvalidValueError)) as raised:
            self.DOORS[door](where)
        named = self.NAMED.get(door)
        assert named is None or str(raised.value).startswith(named), raised.value
        assert set(os.listdir(".")) == before

    @pytest.mark.parametrize("door", ["persistence_dir", "store", "data_dir"])
    def test_a_directory_that_cannot_be_made_is_a_store_error(self, door: str, tmp_path: Path):
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory")
        with pytest.raises(StoreError, match="cannot make the directory"):
            self.DOORS[door](blocker / "below")
        assert blocker.read_text() == "not a directory"
