"""``SQLiteStore``: conversations in one SQLite file, forks sharing stored events.

>>> import tempfile, pathlib
>>> from cowconv import LLM, Agent, Conversation
>>> path = pathlib.Path(tempfile.mkdtemp()) / "cowconv.db"
>>> store = SQLiteStore(path)
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", store=store)
>>> _ = source.send_message("Analyse the sales report.")
>>> fork = source.fork(title="Follow-up")  # one row written, no event copied
>>> [info.title for info in store.list()], len(store.load(fork.id).events)
([None, 'Follow-up'], 2)
>>> store.close()

The store itself (forks, the tree, versions, export) is the generic
:class:`~cowconv.stores.tree.TreeStore`, and what SQLite's rows share with
PostgreSQL's is :mod:`cowconv.stores.sql`; this module holds SQLite's own:
two tables, ``conversations`` and ``events``, in a file checked before it
is written. See ``docs/persistence.md`` for the layout and the guarantees.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from cowconv._exceptions import (
    CorruptStoreError,
    InvalidValueError,
    SchemaVersionError,
    StoreError,
    StoreLockedError,
)
from cowconv.core.frozen import decode_json
from cowconv.ports import Row
from cowconv.stores import local_path
from cowconv.stores.sql import (
    SQLRows,
    SQLStore,
    SQLTransaction,
    check_lock_timeout,
    newer_schema,
    translated,
)

__all__ = ["SCHEMA_VERSION", "STORE_FILE_NAME", "SQLiteRows", "SQLiteStore", "store_file"]

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

# Any store gets the table of recorded branch suites when opened, as the index below (not a
# new version: a cowconv that does not know it reads the file as before).
_SUITES_TABLE = (
    "CREATE TABLE IF NOT EXISTS suite_branches (suite TEXT NOT NULL, idx INTEGER NOT NULL, "
    "conversation TEXT NOT NULL, state TEXT NOT NULL, owner TEXT, beat INTEGER NOT NULL, "
    "detail TEXT NOT NULL, PRIMARY KEY (suite, idx)) WITHOUT ROWID"
)

# Any store gets this index when opened (not a new version: a cowconv that does not know it
# reads the file as before; SQLite keeps it up to date). A listing page is read off it, from
# an offset or from a cursor (created_at, id); the expression is the one named_rows orders by.
_CREATED = "coalesce(json_extract(state, '$.created_at'), '')"
_LISTING_INDEX_NAME = "conversations_page"
_LISTING_INDEXES = (
    # Ordered by key, it could not place a cursor: navigate_to moves an id to another key.
    "DROP INDEX IF EXISTS conversations_listing",
    f"CREATE INDEX IF NOT EXISTS {_LISTING_INDEX_NAME} ON conversations ({_CREATED}, id) "
    "WHERE id IS NOT NULL",
)

Synchronous = Literal["full", "normal"]


def store_file(path: str | os.PathLike[str]) -> Path:
    """The database file of ``path``: ``path`` itself, or a directory's ``cowconv.db``.

    A directory that holds only the ``conversations.db`` of cowconv 0.1.0's
    agent server has it renamed to ``cowconv.db`` (with its WAL files), so
    ``persistence_dir``, ``cowconv serve --data-dir`` and ``cowconv tree``
    open one store. A directory holding both is refused with a
    :class:`~cowconv.StoreError` saying what to do.

    A location that is not a path, or a path no file can have, is refused
    by :func:`~cowconv.stores.local_path`.

    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> store_file(directory).name
    'cowconv.db'
    """
    given = local_path(path)
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


def _kind(error: sqlite3.Error) -> type[StoreError]:
    """Which store error an sqlite3 error is."""
    name = getattr(error, "sqlite_errorname", "")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return StoreLockedError
    return CorruptStoreError if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) else StoreError


def _schema_version(path: Path, connection: sqlite3.Connection) -> int:
    """The schema version of the cowconv store ``connection`` reads, 0 for an empty database.

    Anything else (another file, a newer or damaged store) is refused with a
    :class:`~cowconv.StoreError` saying so.
    """
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    if application_id == 0 and version == 0 and not tables:
        return 0
    if application_id != _APPLICATION_ID:
        raise CorruptStoreError(f"{path} is an SQLite database but not a cowconv store")
    if version > SCHEMA_VERSION or version < 1:
        raise newer_schema(path, version, SCHEMA_VERSION)
    if not {"conversations", "events"} <= tables:
        raise CorruptStoreError(f"{path} is a cowconv store with missing tables: damaged")
    return int(version)


def _check_existing(path: Path, lock_timeout: float) -> int:
    """Validate an existing file read-only (:func:`_schema_version`)."""
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
        with translated(path, sqlite3.Error, _kind):
            return _schema_version(path, connection)
    except (StoreLockedError, CorruptStoreError, SchemaVersionError):
        raise
    except StoreError as error:
        raise CorruptStoreError(f"{path} is not a readable cowconv store: {error}") from error
    finally:
        connection.close()


class _Transaction(SQLTransaction):
    """The row operations on the SQLite connection: a branch row's state is its marker."""

    db: sqlite3.Connection
    branch_of = "json_extract(state, '$.branch_of')"
    branch_order = "json_extract(state, '$.order')"
    listing = (_CREATED, "id")
    unlimited = -1

    def active(self) -> bool:
        return self.db.in_transaction

    def decode(self, found: Sequence[Any]) -> Row:
        key, conversation_id, parent, fork_len, event_count, state, generation, version = found
        if conversation_id is not None or state is None:
            return Row(*found)
        try:
            marker = decode_json(state)
            branch_of, order = str(marker["branch_of"]), int(marker["order"])
        except (ValueError, TypeError, KeyError) as error:
            raise CorruptStoreError(f"conversation row {key} holds a damaged branch") from error
        return Row(key, None, parent, fork_len, event_count, None, generation, version,
                   branch_of, order)  # fmt: skip

    def encode(self, row: Row) -> list[Any]:
        if row.branch_of is None:
            return super().encode(row)
        marker = json.dumps({"branch_of": row.branch_of, "order": row.branch_order})
        return [*row[1:5], marker, row.generation, row.version]

    def after(self, place: tuple[str, str]) -> tuple[str, list[object]]:
        # Not a row value: SQLite would scan the index from its start to compare those.
        return f"{_CREATED} >= ? AND ({_CREATED} > ? OR id > ?)", [place[0], *place]

    def tagged(self, tags: Mapping[str, str]) -> tuple[str, list[object]]:
        each = (
            "EXISTS (SELECT 1 FROM json_each(state, '$.tags') "
            "WHERE json_each.key = ? AND json_each.value = ?)"
        )
        return " AND ".join([each] * len(tags)), [part for tag in tags.items() for part in tag]

    def epoch(self) -> object:
        # Without AUTOINCREMENT (it costs every fork a write of sqlite_sequence's page) a
        # deleted key can come back; only a commit by another connection can have done that.
        return self.db.execute("PRAGMA data_version").fetchone()[0]


class SQLiteRows(SQLRows[sqlite3.Connection]):
    """The rows of a cowconv store in one SQLite file (a :class:`~cowconv.ports.RowStore`).

    One connection shared by the process's threads under a lock; a writer
    takes SQLite's write lock (``BEGIN IMMEDIATE``), so it sees every commit.

    >>> with SQLiteStore(":memory:") as store:
    ...     isinstance(store.rows, SQLiteRows)
    True
    """

    operations = _Transaction
    errors = sqlite3.Error

    def __init__(self, path: Path, *, lock_timeout: float, synchronous: Synchronous) -> None:
        super().__init__(str(path), lock_timeout=lock_timeout)
        self.path = path
        self.hold(self._open(lock_timeout, synchronous))

    def _open(self, lock_timeout: float, synchronous: Synchronous) -> sqlite3.Connection:
        path = self.path
        in_memory = str(path) == ":memory:"
        try:
            if in_memory or not path.exists() or path.stat().st_size == 0:
                version = 0
                if not in_memory:  # it holds API keys: the owner's only (-wal, -shm follow)
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            else:
                version = _check_existing(path, lock_timeout)
        except OSError as error:
            raise StoreError(f"cannot open the store {path}: {error}") from error
        with self.translated():
            connection = sqlite3.connect(path, timeout=lock_timeout, isolation_level=None,
                                         check_same_thread=False)  # fmt: skip
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute(f"PRAGMA synchronous={synchronous.upper()}")
                listed = (
                    "SELECT count(*) FROM sqlite_master "
                    f"WHERE name IN ('{_LISTING_INDEX_NAME}', 'suite_branches')"
                )
                if version != SCHEMA_VERSION or connection.execute(listed).fetchone()[0] != 2:
                    self._set_up(connection)
            except BaseException:
                connection.close()
                raise
        return connection

    def _set_up(self, connection: sqlite3.Connection) -> None:
        """Create the schema in an empty database, or migrate an older one, atomically."""
        with _Transaction.run(connection, ["BEGIN IMMEDIATE"]):
            # Read again under the write lock: another process may have set it up meanwhile.
            version = _schema_version(self.path, connection)
            if version == 0:
                statements = [s for s in _SCHEMA.split(";") if s.strip()]
                statements.append(f"PRAGMA application_id={_APPLICATION_ID}")
            else:
                steps = range(version, SCHEMA_VERSION)
                statements = [s for step in steps for s in _MIGRATIONS[step]]
            for statement in (*statements, *_LISTING_INDEXES, _SUITES_TABLE):
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def kind(self, error: sqlite3.Error) -> type[StoreError]:
        return _kind(error)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self.handle()

    def begin(self, write: bool) -> list[str]:
        return ["BEGIN IMMEDIATE" if write else "BEGIN"]

    def wal_bytes_during(self, action: Callable[[], object]) -> int:
        # It checkpoints first and holds checkpoints off while ``action`` runs.
        wal = Path(f"{self.path}-wal")
        with self.translated(), self.connection() as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            before = wal.stat().st_size if wal.exists() else 0
            automatic = db.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
            db.execute("PRAGMA wal_autocheckpoint=0")
            try:
                action()
            finally:
                db.execute(f"PRAGMA wal_autocheckpoint={int(automatic)}")
            return (wal.stat().st_size if wal.exists() else 0) - before


class SQLiteStore(SQLStore):
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
        self, path: str | os.PathLike[str], *, lock_timeout: float = 5.0,
        synchronous: Synchronous = "full",
    ) -> None:  # fmt: skip
        if synchronous not in ("full", "normal"):
            raise InvalidValueError(f"synchronous must be 'full' or 'normal', got {synchronous!r}")
        check_lock_timeout(lock_timeout)  # before store_file() may move a 0.1 file in
        self._sqlite = SQLiteRows(store_file(path), lock_timeout=lock_timeout,
                                  synchronous=synchronous)  # fmt: skip
        super().__init__(self._sqlite)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._sqlite.path

    @property
    def location(self) -> str | None:
        """The database file's absolute path (``None`` for ``:memory:``).

        >>> SQLiteStore(":memory:").location is None
        True
        """
        path = self._sqlite.path
        return None if str(path) == ":memory:" else str(path.resolve())
