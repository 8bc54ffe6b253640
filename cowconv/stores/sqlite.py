"""``SQLiteStore``: conversations in one SQLite file, forks sharing stored events.

>>> import tempfile, pathlib
>>> from cowconv import LLM, Agent, Conversation
>>> path = pathlib.Path(tempfile.mkdtemp()) / "cowconv.db"
>>> store = SQLiteStore(path)
>>> source = Conversation(
...     agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", store=store
... )
>>> _ = source.send_message("Analyse the sales report.")
>>> fork = source.fork(title="Follow-up")  # one row written, no event copied
>>> [info.title for info in store.list()], len(store.load(fork.id).events)
([None, 'Follow-up'], 2)
>>> store.close()

Each event is stored once, by the conversation that appended it; a fork is a
row naming its parent and how many of the parent's events it inherits. See
``docs/persistence.md`` for the layout and the guarantees.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import secrets
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cowconv._exceptions import (
    ConversationExistsError,
    ConversationNotFoundError,
    CorruptStoreError,
    InvalidValueError,
    SchemaVersionError,
    StoreError,
    StoreLockedError,
)
from cowconv.core.history import EventLog, shared_prefix_length
from cowconv.core.ids import ConversationID, id_text, public_id
from cowconv.core.state import ConversationInfo, ConversationState, check_tags, dump_state_json
from cowconv.core.storable import check_storable, loaded_history
from cowconv.stores.base import (
    ExportRecord,
    export_document,
    loaded_status,
    parse_export,
)
from cowconv.stores.lazy import LazyEvents

__all__ = ["SCHEMA_VERSION", "STORE_FILE_NAME", "SQLiteStore", "store_file"]

STORE_FILE_NAME = "cowconv.db"
"""The store's file in a directory (``persistence_dir``, ``cowconv serve --data-dir``)."""

# What the agent server of cowconv 0.1.0 called its store in --data-dir.
_OLD_SERVER_FILE_NAME = "conversations.db"

SCHEMA_VERSION = 2
"""The layout this cowconv writes; recorded in ``PRAGMA user_version``."""

# "cowv": marks the file as a cowconv store (PRAGMA application_id, header offset 68).
_APPLICATION_ID = 0x636F7776
_SQLITE_MAGIC = b"SQLite format 3\x00"

logger = logging.getLogger("cowconv")

_SCHEMA = """
CREATE TABLE conversations (
    key INTEGER PRIMARY KEY,
    id TEXT UNIQUE,
    parent INTEGER REFERENCES conversations (key),
    fork_len INTEGER NOT NULL CHECK (fork_len >= 0),
    event_count INTEGER NOT NULL CHECK (event_count >= fork_len),
    state TEXT,
    generation INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE events (
    conversation INTEGER NOT NULL REFERENCES conversations (key),
    position INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (conversation, position)
) WITHOUT ROWID;
"""

# The statements that take a store from version N to N + 1, run in order in one
# transaction when an older store is opened. Version 1 is the first layout; the
# next one adds its step here (executescript would commit half-way: no scripts).
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2: every row carries the generation (random, set when the row is created) and the
    # version (counted up by every write) that a writer's base must match.
    1: (
        "ALTER TABLE conversations ADD COLUMN generation INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE conversations ADD COLUMN version INTEGER NOT NULL DEFAULT 0",
    ),
}

_MAX_ROWS = 2**63 - 1

# Loaded histories kept so that loading a fork shares the parent's events.
_CACHE_SIZE = 32

Synchronous = Literal["full", "normal"]

logger = logging.getLogger("cowconv")

# (row key, generation, version): which stored write a snapshot is.
_Token = tuple[int, int, int]


@dataclass(frozen=True)
class _Row:
    key: int
    parent: int | None
    fork_len: int
    event_count: int
    state: str | None
    generation: int = 0
    version: int = 0

    @property
    def token(self) -> _Token:
        return (self.key, self.generation, self.version)


def store_file(path: str | os.PathLike[str]) -> Path:
    """The database file of ``path``: ``path`` itself, or a directory's ``cowconv.db``.

    A directory that holds only the ``conversations.db`` of cowconv 0.1.0's
    agent server has it renamed to ``cowconv.db`` (with its WAL files), so
    ``persistence_dir``, ``cowconv serve --data-dir`` and ``cowconv tree``
    open one store. A directory holding both is refused with a
    :class:`~cowconv.StoreError` saying what to do.

    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> store_file(directory).name
    'cowconv.db'
    """
    given = Path(path).expanduser()
    if str(path) == ":memory:" or not given.is_dir():
        return given
    current, old = given / STORE_FILE_NAME, given / _OLD_SERVER_FILE_NAME
    if old.exists():
        if current.exists():
            raise StoreError(
                f"{given} holds two stores, {STORE_FILE_NAME} and {_OLD_SERVER_FILE_NAME} (the "
                f"agent server's name before cowconv 0.2); move their conversations into one "
                f"(store.import_conversations(old.export_conversation(...))) and remove the other"
            )
        for suffix in ("-wal", "-shm", ""):
            moved = Path(f"{old}{suffix}")
            if moved.exists():
                moved.rename(f"{current}{suffix}")
        logger.warning("renamed the store %s to %s", old, current)
    return current


def _file_is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True


def _create_private_file(path: Path) -> None:
    # The store holds API keys: only the owner may read it (SQLite gives the
    # -wal and -shm files the database file's permissions).
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


@contextmanager
def _translated(path: object) -> Iterator[None]:
    """Turn sqlite3 errors into the store's own, naming the file."""
    try:
        yield
    except sqlite3.Error as error:
        name = getattr(error, "sqlite_errorname", "")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            raise StoreLockedError(
                f"the store {path} is locked by another writer; gave up waiting ({error})"
            ) from error
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            raise CorruptStoreError(f"the store {path} is damaged: {error}") from error
        raise StoreError(f"the store {path} failed: {error}") from error


def _check_existing(path: Path, lock_timeout: float) -> int:
    """Validate an existing file read-only; its schema version, 0 for an empty database."""
    with open(path, "rb") as file:
        header = file.read(len(_SQLITE_MAGIC))
    if header != _SQLITE_MAGIC:
        raise CorruptStoreError(f"{path} is not a cowconv store (not an SQLite database)")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=lock_timeout)
    except sqlite3.Error as error:
        raise CorruptStoreError(f"{path} cannot be opened as a cowconv store: {error}") from error
    try:
        with _translated(path):
            application_id = connection.execute("PRAGMA application_id").fetchone()[0]
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    except StoreLockedError:
        raise
    except StoreError as error:
        raise CorruptStoreError(f"{path} is not a readable cowconv store: {error}") from error
    finally:
        connection.close()
    if application_id == 0 and version == 0 and not tables:
        return 0
    if application_id != _APPLICATION_ID:
        raise CorruptStoreError(f"{path} is an SQLite database but not a cowconv store")
    if version > SCHEMA_VERSION or version < 1:
        raise SchemaVersionError(
            f"{path} has cowconv store schema version {version}; this cowconv reads "
            f"versions 1 to {SCHEMA_VERSION} (upgrade cowconv to open it)"
        )
    if not {"conversations", "events"} <= tables:
        raise CorruptStoreError(f"{path} is a cowconv store with missing tables: damaged")
    return int(version)


class SQLiteStore:
    """Conversations in one SQLite file (created 0600 if missing), safe across threads.

    ``SQLiteStore(path)`` opens or creates the store at ``path``, or in the
    directory ``path`` as its ``cowconv.db`` (the file ``persistence_dir``
    uses). An existing file is
    validated read-only before anything is written: a file that is not a
    cowconv store raises :class:`~cowconv.CorruptStoreError`, one from a
    newer cowconv :class:`~cowconv.SchemaVersionError`, and the file is left
    as it was.

    Writes take the database's write lock, waiting at most ``lock_timeout``
    seconds for another process to release it, else
    :class:`~cowconv.StoreLockedError`. ``synchronous="full"`` (the default)
    makes each write durable against power loss when it returns;
    ``"normal"`` is faster and durable against a crash of the process but may
    lose the last writes if the machine loses power.

    >>> with SQLiteStore(":memory:") as store:
    ...     store.list()
    []
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock_timeout: float = 5.0,
        synchronous: Synchronous = "full",
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise InvalidValueError(f"synchronous must be 'full' or 'normal', got {synchronous!r}")
        if lock_timeout < 0:
            raise InvalidValueError(f"lock_timeout must be >= 0, got {lock_timeout!r}")
        self._path = store_file(path)
        self._lock = threading.RLock()
        self._cache: OrderedDict[int, EventLog] = OrderedDict()
        self._cache_data_version: int | None = None
        # id(snapshot) -> the stored write it is, for every snapshot this store loaded or
        # saved and that is still alive: the base a writer's next save must match.
        self._bases: dict[int, _Token] = {}
        self._connection: sqlite3.Connection | None = self._open(lock_timeout, synchronous)
        self._finalizer = weakref.finalize(self, self._connection.close)

    def _open(self, lock_timeout: float, synchronous: Synchronous) -> sqlite3.Connection:
        path = self._path
        in_memory = str(path) == ":memory:"
        try:
            if in_memory or _file_is_empty(path):
                version = 0
                if not in_memory:
                    _create_private_file(path)
            else:
                version = _check_existing(path, lock_timeout)
        except OSError as error:
            raise StoreError(f"cannot open the store {path}: {error}") from error
        with _translated(path):
            connection = sqlite3.connect(
                path, timeout=lock_timeout, isolation_level=None, check_same_thread=False
            )
        try:
            with _translated(path):
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute(f"PRAGMA synchronous={synchronous.upper()}")
                if version != SCHEMA_VERSION:
                    self._set_up(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _set_up(self, connection: sqlite3.Connection) -> None:
        """Create the schema in an empty database, or migrate an older one, atomically."""
        connection.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another process may have set it up meanwhile.
            application_id = connection.execute("PRAGMA application_id").fetchone()[0]
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if application_id == 0 and version == 0:
                statements = [s for s in _SCHEMA.split(";") if s.strip()]
                statements.append(f"PRAGMA application_id={_APPLICATION_ID}")
            elif application_id != _APPLICATION_ID:
                raise CorruptStoreError(f"{self._path} is not a cowconv store")
            else:
                statements = [
                    s for step in range(version, SCHEMA_VERSION) for s in _MIGRATIONS[step]
                ]
            for statement in statements:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    # -- plumbing ----------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            raise StoreError(f"the store {self._path} is closed")
        return self._connection

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One consistent snapshot (reads) or one atomic, durable change (writes)."""
        with self._lock, _translated(self._path):
            db = self._db()
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _row(self, db: sqlite3.Connection, conversation_id: ConversationID) -> _Row:
        conversation_id = id_text(conversation_id)
        found = db.execute(
            "SELECT key, parent, fork_len, event_count, state, generation, version "
            "FROM conversations WHERE id = ?",
            (conversation_id,),
        ).fetchone()
        if found is None:
            raise ConversationNotFoundError(conversation_id)
        return _Row(*found)

    def _links(self, db: sqlite3.Connection, key: int) -> tuple[int | None, int]:
        found = db.execute(
            "SELECT parent, fork_len FROM conversations WHERE key = ?", (key,)
        ).fetchone()
        if found is None:
            raise CorruptStoreError(f"the store {self._path} lost conversation row {key}")
        return found[0], found[1]

    def _remember(self, key: int, events: EventLog) -> None:
        # Rows at (key, position) are written once, and a key is reused only after the
        # row holding it was deleted: _history drops what it remembers whenever another
        # connection committed (and delete() does for this one).
        known = self._cache.get(key)
        if known is None or len(known) <= len(events):
            self._cache[key] = events
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    # -- reading -------------------------------------------------------------------

    def _history(self, db: sqlite3.Connection, key: int, count: int) -> EventLog:
        """The first ``count`` events of conversation ``key``: ancestors' prefixes, then its own."""
        # Without AUTOINCREMENT (it costs every fork a write of sqlite_sequence's page) a
        # deleted key can come back; only a commit by another connection can have done that.
        data_version = db.execute("PRAGMA data_version").fetchone()[0]
        if data_version != self._cache_data_version:
            self._cache.clear()
            self._cache_data_version = data_version
        # Walk up to the nearest remembered prefix (or the root), then read down.
        path: list[tuple[int, int]] = []
        base = EventLog()
        while count > 0:
            known = self._cache.get(key)
            if known is not None and len(known) >= count:
                base = known.take(count)
                break
            parent, fork_len = self._links(db, key)
            path.append((key, count))
            if known is not None and len(known) >= fork_len:
                base = known
                break
            if parent is None or fork_len == 0:
                break
            key, count = parent, min(count, fork_len)
        for key, count in reversed(path):
            if len(base) < count:
                rows = db.execute(
                    "SELECT event_id, body FROM events WHERE conversation = ? "
                    "AND position >= ? AND position < ? ORDER BY position",
                    (key, len(base), count),
                ).fetchall()
                if len(rows) != count - len(base):
                    raise CorruptStoreError(
                        f"the store {self._path} is missing events of conversation row {key}"
                    )
                base = base.extend_sealed(
                    LazyEvents([row[1] for row in rows]), [r[0] for r in rows]
                )
            self._remember(key, base)
        return loaded_history(base)  # read from this store's JSON: not checked again on save

    def _state(self, row: _Row, events: EventLog, conversation_id: str) -> ConversationState:
        assert row.state is not None
        try:
            state = ConversationState.model_validate_json(row.state)
        except ValueError as error:
            raise CorruptStoreError(
                f"the stored state of conversation {conversation_id!r} cannot be read (delete() "
                f"still removes it): {error}"
            ) from error
        return loaded_status(state._replace(events=events))

    def _track(self, state: ConversationState, token: _Token) -> None:
        """Remember that ``state`` is the stored write ``token``, for as long as it lives."""
        key = id(state)
        if key not in self._bases:
            weakref.finalize(state, self._bases.pop, key, None)
        self._bases[key] = token

    def exists(self, conversation_id: ConversationID) -> bool:
        """Whether a conversation with this id is stored.

        >>> SQLiteStore(":memory:").exists("nope")
        False
        """
        with self._transaction(write=False) as db:
            found = db.execute(
                "SELECT 1 FROM conversations WHERE id = ?", (id_text(conversation_id),)
            ).fetchone()
        return found is not None

    def load(self, conversation_id: ConversationID) -> ConversationState:
        """The stored snapshot; ``ConversationNotFoundError`` if there is none.

        Events are validated from JSON when first read, so opening a long
        history is fast; a ``running`` conversation loads ``paused``.

        >>> SQLiteStore(":memory:").load("nope")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ConversationNotFoundError: no conversation with id 'nope'
        """
        with self._transaction(write=False) as db:
            row = self._row(db, conversation_id)
            state = self._tree_state(db, row, id_text(conversation_id))
        self._track(state, row.token)
        return state

    def _tree_state(
        self, db: sqlite3.Connection, row: _Row, conversation_id: str
    ) -> ConversationState:
        """The snapshot of ``row`` with every branch of its conversation tree."""
        state = self._state(row, self._history(db, row.key, row.event_count), conversation_id)
        branches = tuple(
            self._history(db, key, count) for key, count in self._branch_rows(db, conversation_id)
        )
        return state._replace(other_branches=branches) if branches else state

    def _other_branches(self, conversation_id: ConversationID) -> builtins.list[tuple[str, int]]:
        """(leaf event id, event count) of each other branch of a conversation, in order."""
        with self._transaction(write=False) as db:
            rows = self._branch_rows(db, id_text(conversation_id))
            return [(self._leaf(db, key, count) or "", count) for key, count in rows]

    def _branch_rows(
        self, db: sqlite3.Connection, conversation_id: str
    ) -> builtins.list[tuple[int, int]]:
        """(key, event count) of the rows holding a conversation's other branches, in order."""
        rows = db.execute(
            "SELECT key, event_count FROM conversations WHERE id IS NULL AND state IS NOT NULL "
            "AND json_extract(state, '$.branch_of') = ? ORDER BY json_extract(state, '$.order')",
            (conversation_id,),
        ).fetchall()
        return [(int(key), int(count)) for key, count in rows]

    def info(self, conversation_id: ConversationID) -> ConversationInfo:
        """The stored conversation's summary, without reading its events.

        >>> SQLiteStore(":memory:").info("nope")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ConversationNotFoundError: no conversation with id 'nope'
        """
        with self._transaction(write=False) as db:
            row = self._row(db, conversation_id)
            leaf = self._leaf(db, row.key, row.event_count)
        return self._info(id_text(conversation_id), row.state, row.event_count, leaf)

    def _leaf(self, db: sqlite3.Connection, key: int, event_count: int) -> str | None:
        """The id of the last event of a stored history (its leaf), or ``None``."""
        return self._event_id_at(db, key, event_count - 1) if event_count else None

    def _info(
        self, conversation_id: str, state_json: str | None, event_count: int, leaf: str | None
    ) -> ConversationInfo:
        state = self._state(_Row(0, None, 0, 0, state_json), EventLog(), conversation_id)
        update = {"event_count": event_count, "leaf_event_id": leaf}
        return ConversationInfo.of(state).model_copy(update=update)

    def list(
        self, *, tags: Mapping[str, str] | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[ConversationInfo]:
        """Summaries of the stored conversations carrying all ``tags``, oldest first.

        ``limit`` and ``offset`` page through them. A conversation whose
        stored state cannot be read is left out and logged by id (see
        :meth:`unreadable`); it never hides the others.

        >>> SQLiteStore(":memory:").list(tags={"title": "x"}, limit=10)
        []
        """
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidValueError(f"limit must be an int >= 0 or None, got {limit!r}")
        if not isinstance(offset, int) or offset < 0:
            raise InvalidValueError(f"offset must be an int >= 0, got {offset!r}")
        query = "SELECT id, state, event_count, key FROM conversations WHERE id IS NOT NULL"
        parameters: list[object] = []
        for key, value in check_tags(tags).items():  # the one tag validator
            query += (
                " AND EXISTS (SELECT 1 FROM json_each(state, '$.tags')"
                " WHERE json_each.key = ? AND json_each.value = ?)"
            )
            parameters += [key, value]
        query += " ORDER BY json_extract(state, '$.created_at'), key LIMIT ? OFFSET ?"
        # SQLite integers are 64-bit; no store holds more rows than that anyway.
        parameters += [-1 if limit is None else min(limit, _MAX_ROWS), min(offset, _MAX_ROWS)]
        with self._transaction(write=False) as db:
            rows = db.execute(query, parameters).fetchall()
            infos, unreadable = self._infos(db, rows)
        if unreadable:
            logger.warning(
                "the store %s holds conversations whose state cannot be read (delete them or "
                "restore the file): %s",
                self._path,
                ", ".join(map(repr, unreadable)),
            )
        return infos

    def _infos(
        self, db: sqlite3.Connection, rows: builtins.list[tuple[str, str, int, int]]
    ) -> tuple[builtins.list[ConversationInfo], builtins.list[str]]:
        infos, unreadable = [], []
        for conversation_id, state_json, event_count, key in rows:
            try:
                leaf = self._leaf(db, key, event_count)
                infos.append(self._info(conversation_id, state_json, event_count, leaf))
            except CorruptStoreError:
                unreadable.append(conversation_id)
        return infos, unreadable

    def unreadable(self) -> builtins.list[str]:
        """The ids of stored conversations whose state cannot be read (damage, an old bug).

        :meth:`list` leaves them out, :meth:`load` raises
        :class:`~cowconv.CorruptStoreError` naming them, :meth:`delete` removes them.

        >>> SQLiteStore(":memory:").unreadable()
        []
        """
        with self._transaction(write=False) as db:
            rows = db.execute(
                "SELECT id, state, event_count, key FROM conversations WHERE id IS NOT NULL "
                "ORDER BY key"
            ).fetchall()
            return self._infos(db, rows)[1]

    # -- writing -------------------------------------------------------------------

    def save(self, previous: ConversationState | None, current: ConversationState) -> None:
        """Make ``current`` durable in one transaction (the :class:`~cowconv.StateSink`).

        ``previous is None`` stores a new conversation, or a fork: when its
        parent is in this store, the fork is one row and no event is
        written. Otherwise ``previous`` must be the very write the store
        holds: every stored conversation carries a generation (new when it
        is created, so a deleted and re-created id is a different one) and a
        version (counted up by every write). A writer whose ``previous`` is
        not the stored generation and version (another writer, another
        process, or a delete came in between) gets
        :class:`~cowconv.StoreError` and nothing is written.
        """
        check_storable(current, previous)  # whatever is stored loads again (core/storable.py)
        with self._lock:  # the cache is shared by the store's threads too
            with self._transaction(write=True) as db:
                if previous is None:
                    token = self._insert(db, current, *self._fork_point(db, current))
                else:
                    token = self._append(db, previous, current)
            self._remember(token[0], current.events)
            self._track(current, token)

    def _fork_point(
        self, db: sqlite3.Connection, state: ConversationState
    ) -> tuple[int | None, int]:
        """Where ``state`` branches off a stored conversation: (parent key, events shared)."""
        parent_id, count = state.forked_from_conversation_id, state.forked_from_event_count
        if parent_id is None or not count or count > len(state.events):
            return None, 0
        found = db.execute(
            "SELECT key, event_count FROM conversations WHERE id = ?", (str(parent_id),)
        ).fetchone()
        if found is None:
            return None, 0
        # The source's active branch, else one of its other branches (fork at an old event).
        for key, stored in [(found[0], found[1]), *self._branch_rows(db, str(parent_id))]:
            if (
                count <= stored
                and self._stored_common_prefix(db, state.events, key, count) == count
            ):
                return key, count
        return None, 0  # a different history under that id: share nothing

    def _event_id_at(self, db: sqlite3.Connection, key: int, position: int) -> str | None:
        while True:
            parent, fork_len = self._links(db, key)
            if position >= fork_len or parent is None:
                break
            key = parent
        found = db.execute(
            "SELECT event_id FROM events WHERE conversation = ? AND position = ?", (key, position)
        ).fetchone()
        return None if found is None else str(found[0])

    def _insert(
        self, db: sqlite3.Connection, state: ConversationState, parent: int | None, fork_len: int
    ) -> _Token:
        if db.execute("SELECT 1 FROM conversations WHERE id = ?", (str(state.id),)).fetchone():
            raise ConversationExistsError(str(state.id))
        if fork_len == 0:
            parent = None
        # Random, not counted: a count would restart when the rows holding it are deleted.
        generation = secrets.randbits(63)
        cursor = db.execute(
            "INSERT INTO conversations (id, parent, fork_len, event_count, state, generation) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                str(state.id),
                parent,
                fork_len,
                len(state.events),
                dump_state_json(state),
                generation,
            ),
        )
        key = cursor.lastrowid
        assert key is not None
        self._write_events(db, key, state.events, fork_len)
        if state.other_branches:
            self._insert_branches(db, state, key, generation)
        return (key, generation, 0)

    def _insert_branches(
        self, db: sqlite3.Connection, state: ConversationState, key: int, generation: int
    ) -> None:
        """Rows for the other branches of a new conversation (a fork carries its source's).

        Each shares what it can with the rows of the source and of the new
        conversation, so a fork of a tree writes rows, not events.
        """
        conversation_id = str(state.id)
        candidates = [(key, len(state.events))]
        source = state.forked_from_conversation_id
        if source is not None:
            found = db.execute(
                "SELECT key, event_count FROM conversations WHERE id = ?", (str(source),)
            ).fetchone()
            if found is not None:
                candidates += [(found[0], found[1]), *self._branch_rows(db, str(source))]
        for order, log in enumerate(state.other_branches):
            best, shared = None, 0
            for candidate, count in candidates:
                common = self._stored_common_prefix(db, log, candidate, count)
                if common > shared:
                    best, shared = candidate, common
            marker = json.dumps({"branch_of": conversation_id, "order": order})
            cursor = db.execute(
                "INSERT INTO conversations (id, parent, fork_len, event_count, state, generation) "
                "VALUES (NULL, ?, ?, ?, ?, ?)",
                (best, shared, len(log), marker, generation),
            )
            assert cursor.lastrowid is not None
            self._write_events(db, cursor.lastrowid, log, shared)
            candidates.append((cursor.lastrowid, len(log)))

    def _stored_common_prefix(
        self, db: sqlite3.Connection, log: EventLog, key: int, count: int
    ) -> int:
        """How many first events ``log`` shares with the stored history of row ``key``."""
        return shared_prefix_length(
            min(len(log), count),
            lambda position: self._event_id_at(db, key, position) == log[position].id,
        )

    def _base(
        self, db: sqlite3.Connection, row: _Row, previous: ConversationState
    ) -> _Token | None:
        """The stored write ``previous`` is, or None if it is not the stored one."""
        known = self._bases.get(id(previous))
        if known is not None:
            return known
        # A snapshot this store object never saw (built elsewhere): it is the stored write
        # only if it is that write, event for event and field for field.
        count = len(previous.events)
        if row.event_count != count or row.state != dump_state_json(previous):
            return None
        if count and self._event_id_at(db, row.key, count - 1) != previous.events[count - 1].id:
            return None
        return row.token

    def _append(
        self, db: sqlite3.Connection, previous: ConversationState, current: ConversationState
    ) -> _Token:
        if current.id != previous.id:
            raise InvalidValueError(f"cannot save conversation {current.id!r} over {previous.id!r}")
        start = len(previous.events)
        try:
            row = self._row(db, current.id)
        except ConversationNotFoundError:
            raise StoreError(
                f"conversation {current.id!r} was deleted since this writer read it; nothing "
                "was written"
            ) from None
        base = self._base(db, row, previous)
        if base != row.token or row.event_count != start:
            why = (
                "deleted and created again"
                if base is None or base[:2] != row.token[:2]
                else f"changed by another writer (stored version {row.version}, this writer's "
                f"{base[2]})"
            )
            raise StoreError(
                f"conversation {current.id!r} was {why} since this writer read it; nothing was "
                "written (load it again to continue)"
            )
        if not _only_grows(previous, current):
            return self._restructure(db, row, previous, current)
        self._write_events(db, row.key, current.events, start)
        db.execute(
            "UPDATE conversations SET event_count = ?, state = ?, version = ? WHERE key = ?",
            (len(current.events), dump_state_json(current), row.version + 1, row.key),
        )
        return (row.key, row.generation, row.version + 1)

    def _restructure(
        self,
        db: sqlite3.Connection,
        row: _Row,
        previous: ConversationState,
        current: ConversationState,
    ) -> _Token:
        """Store a conversation whose branches changed (``navigate_to``): rows, not copies.

        Each branch (the active one first) is kept in the row that already
        holds exactly its history, or gets a new row forked off the stored
        history it shares the most events with; rows no branch uses any more
        become tombstones and are reclaimed. The conversation's id moves to
        the row of its active branch; the other branches' rows carry
        ``{"branch_of": id, "order": n}`` as their state.
        """
        conversation_id = str(current.id)
        old_keys = [row.key, *(key for key, _ in self._branch_rows(db, conversation_id))]
        old_logs = [previous.events, *previous.other_branches]
        if len(old_keys) != len(old_logs):
            raise StoreError(
                f"the branches of conversation {conversation_id!r} in the store do not match "
                "this writer's; nothing was written (load it again to continue)"
            )
        new_keys: builtins.list[int] = []
        for log in (current.events, *current.other_branches):
            best, shared, same = None, 0, None
            for key, old in zip(old_keys, old_logs, strict=True):
                common = log.common_prefix_length(old)
                if common == len(log) == len(old) and key not in new_keys:
                    same = key
                    break
                if best is None or common > shared:
                    best, shared = key, common
            if same is not None:
                new_keys.append(same)  # this branch's history is stored exactly there
                continue
            cursor = db.execute(
                "INSERT INTO conversations (id, parent, fork_len, event_count, state, generation) "
                "VALUES (NULL, ?, ?, ?, NULL, ?)",
                (best if shared else None, shared, len(log), row.generation),
            )
            assert cursor.lastrowid is not None
            self._write_events(db, cursor.lastrowid, log, shared)
            new_keys.append(cursor.lastrowid)
        db.execute("UPDATE conversations SET id = NULL, state = NULL WHERE key = ?", (row.key,))
        db.execute(
            "UPDATE conversations SET id = ?, state = ?, generation = ?, version = ? WHERE key = ?",
            (
                conversation_id,
                dump_state_json(current),
                row.generation,
                row.version + 1,
                new_keys[0],
            ),
        )
        for order, key in enumerate(new_keys[1:]):
            marker = json.dumps({"branch_of": conversation_id, "order": order})
            db.execute("UPDATE conversations SET state = ? WHERE key = ?", (marker, key))
        for key in old_keys:
            if key not in new_keys:
                db.execute("UPDATE conversations SET state = NULL WHERE key = ?", (key,))
                self._reclaim_up(db, key)
        self._cache.clear()  # reclaimed keys may be handed out again
        return (new_keys[0], row.generation, row.version + 1)

    def _reclaim_up(self, db: sqlite3.Connection, key: int | None) -> None:
        """Reclaim the tombstone ``key`` and the tombstones above it that nothing reaches."""
        while key is not None and self._is_tombstone(db, key):
            parent, _ = self._links(db, key)
            self._reclaim(db, key)
            key = parent

    def _write_events(self, db: sqlite3.Connection, key: int, events: EventLog, start: int) -> None:
        db.executemany(
            "INSERT INTO events (conversation, position, event_id, body) VALUES (?, ?, ?, ?)",
            (
                (key, position, events[position].id, events[position].model_dump_json())
                for position in range(start, len(events))
            ),
        )

    def delete(self, conversation_id: ConversationID) -> None:
        """Forget a conversation; forks of it keep their histories.

        The row stays as a hidden tombstone (its id and state, secrets
        included, erased) holding the events that forks still reach; events
        nothing reaches are deleted, here and up the chain of tombstones.

        >>> SQLiteStore(":memory:").delete("nope")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ConversationNotFoundError: no conversation with id 'nope'
        """
        with self._lock, self._transaction(write=True) as db:
            key = self._row(db, conversation_id).key
            branches = [key for key, _ in self._branch_rows(db, id_text(conversation_id))]
            for row_key in (key, *branches):
                db.execute(
                    "UPDATE conversations SET id = NULL, state = NULL WHERE key = ?", (row_key,)
                )
            for row_key in (key, *branches):
                self._reclaim_up(db, row_key)
            # A deleted key may be handed out again: forget what was loaded under any key.
            self._cache.clear()

    def _is_tombstone(self, db: sqlite3.Connection, key: int) -> bool:
        # A row without id but with a state holds another branch of a conversation.
        found = db.execute("SELECT id, state FROM conversations WHERE key = ?", (key,)).fetchone()
        return found is not None and found[0] is None and found[1] is None

    def _reclaim(self, db: sqlite3.Connection, key: int) -> None:
        parent, fork_len = self._links(db, key)
        # A fork reaches min(its own reach, its fork_len) events of its parent.
        needed = db.execute(
            "SELECT coalesce(max(min(event_count, fork_len)), 0) FROM conversations "
            "WHERE parent = ?",
            (key,),
        ).fetchone()[0]
        db.execute("DELETE FROM events WHERE conversation = ? AND position >= ?", (key, needed))
        if needed <= fork_len:
            # None of its own events is reached: its forks inherit from its parent directly.
            db.execute("UPDATE conversations SET parent = ? WHERE parent = ?", (parent, key))
            db.execute("DELETE FROM conversations WHERE key = ?", (key,))
        else:
            db.execute("UPDATE conversations SET event_count = ? WHERE key = ?", (needed, key))

    # -- export and import ---------------------------------------------------

    def export_conversation(
        self,
        conversation_id: ConversationID,
        *,
        with_forks: bool = False,
        include_secrets: bool = False,
    ) -> str:
        """A conversation (and with ``with_forks`` its fork tree) as versioned JSON.

        Forks are written as their parent's id, the number of events they
        share and their own events. Without ``include_secrets`` the API keys
        are written as ``null``.

        >>> store = SQLiteStore(":memory:")
        >>> store.export_conversation("nope")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ConversationNotFoundError: no conversation with id 'nope'
        """
        with self._transaction(write=False) as db:
            root = self._row(db, conversation_id)
            records = [ExportRecord(self._tree_state(db, root, id_text(conversation_id)))]
            # Forks of tombstones belong to the nearest exported ancestor.
            pending = [(root.key, id_text(conversation_id), root.event_count)] if with_forks else []
            while pending:
                key, ancestor, shared = pending.pop(0)
                children = db.execute(
                    "SELECT key, parent, fork_len, event_count, state, id FROM conversations "
                    "WHERE parent = ? ORDER BY key",
                    (key,),
                ).fetchall()
                for *fields, child_id in children:
                    child = _Row(*fields)
                    reach = min(shared, child.fork_len)
                    if child_id is None:
                        pending.append((child.key, ancestor, reach))
                        continue
                    state = self._tree_state(db, child, child_id)
                    records.append(ExportRecord(state, ancestor, reach))
                    pending.append((child.key, child_id, child.event_count))
        return export_document(records, include_secrets=include_secrets)

    def import_conversations(self, data: str | bytes) -> builtins.list[ConversationID]:
        """Store the conversations of an export, forks sharing as they did; returns their ids.

        All or nothing: a bad document or an id already stored raises
        ``ValueError`` and stores nothing.

        >>> SQLiteStore(":memory:").import_conversations('{"format": "zip"}')  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: not a cowconv export (no 'format': ...)
        """
        records = parse_export(data)
        keys: dict[str, int] = {}
        with self._transaction(write=True) as db:
            for record in records:
                parent = None if record.parent is None else keys[record.parent]
                fork_len = record.fork_len if parent is not None else 0
                keys[str(record.state.id)] = self._insert(db, record.state, parent, fork_len)[0]
        return [public_id(key) for key in keys]

    # -- measuring ---------------------------------------------------------------

    def bytes_written_by(self, action: Callable[[], object]) -> int:
        """The bytes ``action()`` makes the store append to its write-ahead log.

        Every committed page reaches the database file through the WAL, so
        this is what a change costs on disk (4 KiB pages plus 24-byte frame
        headers). For benchmarks: it checkpoints first and holds
        checkpoints off while ``action`` runs; run nothing else meanwhile.

        >>> from cowconv import LLM, Agent, Conversation
        >>> import tempfile, pathlib
        >>> store = SQLiteStore(pathlib.Path(tempfile.mkdtemp()) / "cowconv.db")
        >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".",
        ...                       store=store)
        >>> for n in range(100):
        ...     _ = source.send_message(f"message {n}")
        >>> store.bytes_written_by(source.fork) < 16 * 1024
        True
        """
        wal = Path(f"{self._path}-wal")
        with self._lock, _translated(self._path):
            db = self._db()
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            before = wal.stat().st_size if wal.exists() else 0
            automatic = db.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
            db.execute("PRAGMA wal_autocheckpoint=0")
            try:
                action()
            finally:
                db.execute(f"PRAGMA wal_autocheckpoint={int(automatic)}")
            return (wal.stat().st_size if wal.exists() else 0) - before

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards. Idempotent."""
        with self._lock:
            if self._connection is not None:
                self._finalizer()
                self._connection = None
                self._cache.clear()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"


def _only_grows(previous: ConversationState, current: ConversationState) -> bool:
    """Whether ``current`` only adds new events to ``previous``'s active branch (the common case).

    The active branch also grows when ``navigate_to`` moves its leaf forward
    along another branch; those events are stored already, in that branch's
    rows, so that change is a restructure (rows, not copies).
    """
    if previous.other_branches != current.other_branches:
        return False
    start = len(previous.events)
    if len(current.events) < start or not current.events.starts_with(previous.events):
        return False
    return len(current.events) == start or not any(
        current.events.common_prefix_length(branch) > start for branch in current.other_branches
    )
