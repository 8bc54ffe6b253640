"""What SQLite and PostgreSQL stores share, written once: row operations, transactions, errors.

Both hold a store in two tables, conversations and events, with the same
columns; they differ in the parameter mark, the table names, how a branch
row says whose branch it is, how a listing filters by tag and starts from a
cursor, how a connection is had and a transaction begun, and which driver
errors mean what. :class:`~cowconv.stores.sqlite.SQLiteStore` and
:class:`~cowconv.stores.postgres.PostgresStore` subclass
:class:`SQLTransaction`, :class:`SQLRows` and :class:`SQLStore` with those.

>>> SQLTransaction.conversations, SQLTransaction.mark
('conversations', '?')
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, Protocol, Self, TypeVar

from cowconv._exceptions import (
    CorruptStoreError,
    InvalidValueError,
    SchemaVersionError,
    StoreError,
    StoreLockedError,
)
from cowconv.core.events import Event
from cowconv.ports import Row, SuiteRow
from cowconv.stores.lazy import LazyEvents
from cowconv.stores.tree import TreeStore

__all__ = [
    "SQLRows",
    "SQLStore",
    "SQLTransaction",
    "check_lock_timeout",
    "newer_schema",
    "translated",
]

# What each kind of store error says after "the store <name> ".
_SAYS: dict[type[StoreError], str] = {
    StoreLockedError: "is locked by another writer; gave up waiting ({})",
    CorruptStoreError: "is damaged: {}",
    StoreError: "failed: {}",
}


@contextmanager
def translated(
    name: object, errors: type[Exception], kind: Callable[[Any], type[StoreError]]
) -> Iterator[None]:
    """Turn a driver's ``errors`` into the store's own (the class ``kind(error)``), naming it.

    >>> with translated("db", ValueError, lambda error: StoreError):
    ...     raise ValueError("disk I/O")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.StoreError: the store db failed: disk I/O
    """
    try:
        yield
    except errors as error:
        found = kind(error)
        raise found(f"the store {name} {_SAYS[found].format(error)}") from error


def newer_schema(name: object, version: int, newest: int) -> SchemaVersionError:
    """The error for a store whose schema ``version`` this cowconv (``1 .. newest``) cannot read.

    >>> print(newer_schema("db", 9, 2))  # doctest: +NORMALIZE_WHITESPACE
    db has cowconv store schema version 9;
    this cowconv reads versions 1 to 2 (upgrade cowconv to open it)
    """
    return SchemaVersionError(
        f"{name} has cowconv store schema version {version}; this cowconv reads versions 1 "
        f"to {newest} (upgrade cowconv to open it)"
    )


class _Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class _Connection(Protocol):
    """What both ``sqlite3.Connection`` and ``psycopg.Connection`` offer."""

    def execute(self, query: Any, parameters: Any = ..., /) -> Any: ...

    def cursor(self) -> Any: ...


class SQLTransaction:
    """The :class:`~cowconv.ports.RowTransaction` on a DB-API connection inside a transaction.

    Subclasses name the tables and the parameter ``mark``, say which
    ``columns`` hold a :class:`~cowconv.ports.Row` (:meth:`decode`,
    :meth:`encode`), what a branch row's ``branch_of`` and ``branch_order``
    are and the listing's order (SQL expressions), how a listing starts
    after a place (:meth:`after`) and filters by tags (:meth:`tagged`), and
    whether the transaction is still open (:meth:`active`).
    """

    conversations = "conversations"
    events = "events"
    suites = "suite_branches"
    mark = "?"
    # The columns written from a row, in the order encode() gives their values.
    columns: tuple[str, ...] = ("id", "parent", "fork_len", "event_count", "state", "generation",
                                "version")  # fmt: skip
    branch_of = "branch_of"
    branch_order = "branch_order"
    # The listing's order, (created_at or "", id): the columns of the index that answers it.
    listing = ("coalesce(created_at, '')", "id")
    # The LIMIT that means no limit.
    unlimited: int | None = None

    def __init__(self, connection: _Connection) -> None:
        self.db = connection

    @classmethod
    @contextmanager
    def run(cls, connection: _Connection, begin: Iterable[str]) -> Iterator[Self]:
        """The statements ``begin``, then a transaction committed if the body returns, else
        rolled back (unless the database ended it already)."""
        transaction = cls(connection)
        try:
            for statement in begin:
                connection.execute(statement)
            yield transaction
            connection.execute("COMMIT")
        except BaseException:
            if transaction.active():
                connection.execute("ROLLBACK")
            raise

    def active(self) -> bool:
        """Whether a transaction is open on the connection."""
        raise NotImplementedError

    def decode(self, found: Sequence[Any]) -> Row:
        """The :class:`Row` of ``key`` and :attr:`columns` as selected."""
        return Row(*found)

    def encode(self, row: Row) -> list[Any]:
        """The values of :attr:`columns` for ``row``."""
        return list(row[1 : 1 + len(self.columns)])

    def sql(self, query: str) -> str:
        """``query`` with ``{c}``, ``{e}``, ``{cols}`` filled in, ``?`` as this database's mark."""
        columns = ", ".join(("key", *self.columns))
        filled = query.format(c=self.conversations, e=self.events, s=self.suites, cols=columns)
        return filled.replace("?", self.mark)

    def execute(self, query: str, parameters: Sequence[Any] = ()) -> _Cursor:
        cursor: _Cursor = self.db.execute(self.sql(query), parameters)
        return cursor

    def rows(self, query: str, parameters: Sequence[Any]) -> list[Row]:
        return [self.decode(found) for found in self.execute(query, parameters).fetchall()]

    def row(self, conversation_id: str) -> Row | None:
        found = self.rows("SELECT {cols} FROM {c} WHERE id = ?", (conversation_id,))
        return found[0] if found else None

    def row_at(self, key: int) -> Row | None:
        found = self.rows("SELECT {cols} FROM {c} WHERE key = ?", (key,))
        return found[0] if found else None

    def written(self, conversation_id: str) -> tuple[int, int, int] | None:
        found = self.execute(
            "SELECT key, generation, version FROM {c} WHERE id = ?", (conversation_id,)
        ).fetchone()
        return None if found is None else (int(found[0]), int(found[1]), int(found[2]))

    def children(self, key: int) -> list[Row]:
        return self.rows("SELECT {cols} FROM {c} WHERE parent = ? ORDER BY key", (key,))

    def insert(self, row: Row) -> int:
        # The tree store looked for a taken id first: the database's UNIQUE is a backstop.
        marks = ", ".join("?" * len(self.columns))
        query = f"INSERT INTO {{c}} ({', '.join(self.columns)}) VALUES ({marks}) RETURNING key"
        return int(self.execute(query, self.encode(row)).fetchone()[0])

    def update(self, row: Row, *, expected: Row | None = None) -> bool:
        query = f"UPDATE {{c}} SET {', '.join(f'{name} = ?' for name in self.columns)}"
        parameters = [*self.encode(row), row.key]
        query += " WHERE key = ?"
        if expected is not None:  # the version check: a stale writer matches no row
            query += " AND generation = ? AND version = ?"
            parameters += [expected.generation, expected.version]
        return self.execute(query, parameters).rowcount == 1

    def delete(self, key: int) -> None:
        self.execute("DELETE FROM {c} WHERE key = ?", (key,))

    def write_events(self, key: int, start: int, events: Iterable[Event]) -> None:
        self.db.cursor().executemany(
            self.sql(
                "INSERT INTO {e} (conversation, position, event_id, body) VALUES (?, ?, ?, ?)"
            ),
            [
                (key, position, event.id, event.model_dump_json())
                for position, event in enumerate(events, start)
            ],
        )

    def read_events(self, key: int, start: int, stop: int) -> tuple[list[str], LazyEvents]:
        found = self.execute(
            "SELECT event_id, body FROM {e} WHERE conversation = ? AND position >= ? "
            "AND position < ? ORDER BY position",
            (key, start, stop),
        ).fetchall()
        return [event_id for event_id, _ in found], LazyEvents([body for _, body in found])

    def event_id(self, key: int, position: int) -> str | None:
        found = self.execute(
            "SELECT event_id FROM {e} WHERE conversation = ? AND position = ?", (key, position)
        ).fetchone()
        return None if found is None else str(found[0])

    def trim_events(self, key: int, keep: int) -> None:
        self.execute("DELETE FROM {e} WHERE conversation = ? AND position >= ?", (key, keep))

    def named_versions(self) -> list[tuple[int, str, int, int]]:
        query = "SELECT key, id, generation, version FROM {c} WHERE id IS NOT NULL"
        return [tuple(found) for found in self.execute(query).fetchall()]

    def branch_rows(self, conversation_id: str) -> list[Row]:
        return self.rows(
            f"SELECT {{cols}} FROM {{c}} WHERE id IS NULL AND {self.branch_of} = ? "
            f"ORDER BY {self.branch_order}",
            (conversation_id,),
        )

    def named_rows(
        self,
        tags: Mapping[str, str],
        limit: int | None,
        offset: int,
        after: tuple[str, str] | None = None,
    ) -> list[Row]:
        # The listing index answers this: a page from a cursor costs its own rows (a tag
        # filter skips the rows without the tags on the way).
        query = "SELECT {cols} FROM {c} WHERE id IS NOT NULL"
        parameters: list[object] = []
        conditions = [self.tagged(tags)]
        if after is not None:
            conditions.insert(0, self.after(after))
        for clause, values in conditions:
            if clause:
                query += f" AND {clause}"
                parameters += values
        query += f" ORDER BY {', '.join(self.listing)} LIMIT ? OFFSET ?"
        return self.rows(query, [*parameters, self.unlimited if limit is None else limit, offset])

    def after(self, place: tuple[str, str]) -> tuple[str, Sequence[object]]:
        """The condition (and its values) of the rows past ``place`` in the listing's order."""
        return f"({', '.join(self.listing)}) > (?, ?)", place

    def tagged(self, tags: Mapping[str, str]) -> tuple[str, Sequence[object]]:
        """The condition (and its values) of the rows carrying all ``tags`` ("" for none)."""
        raise NotImplementedError

    def epoch(self) -> object:
        return 0  # keys never come back (a database that reuses them says when)

    def suite_rows(self, suite: str) -> list[SuiteRow]:
        found = self.execute(
            "SELECT suite, idx, conversation, state, owner, beat, detail FROM {s} "
            "WHERE suite = ? ORDER BY idx",
            (suite,),
        ).fetchall()
        return [SuiteRow(*values) for values in found]

    def put_suite_row(self, row: SuiteRow) -> None:
        self.execute(
            "INSERT INTO {s} (suite, idx, conversation, state, owner, beat, detail) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (suite, idx) DO UPDATE SET "
            "conversation = excluded.conversation, state = excluded.state, "
            "owner = excluded.owner, beat = excluded.beat, detail = excluded.detail",
            tuple(row),
        )


class _Closable(Protocol):
    def close(self) -> None: ...


Handle = TypeVar("Handle", bound=_Closable)


def check_lock_timeout(lock_timeout: float) -> None:
    """Refuse a ``lock_timeout`` that is not a number of seconds >= 0 (before a store opens).

    >>> check_lock_timeout(-1)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: lock_timeout must be >= 0, got -1
    """
    if lock_timeout < 0:
        raise InvalidValueError(f"lock_timeout must be >= 0, got {lock_timeout!r}")


class SQLRows(Generic[Handle]):
    """The rows of a store in an SQL database (a :class:`~cowconv.ports.RowStore`).

    Subclasses open the database's ``Handle`` (a connection, a pool) and
    :meth:`hold` it, lend a connection (:meth:`connection`), say how a
    transaction begins (:meth:`begin`) and which driver ``errors`` are which
    store error (:meth:`kind`); ``operations`` is their :class:`SQLTransaction`.
    ``name`` names the database in messages, never with a password.

    >>> from cowconv import SQLiteStore
    >>> with SQLiteStore(":memory:") as store:
    ...     isinstance(store.rows, SQLRows), repr(store.rows)
    (True, ':memory:')
    """

    operations: type[SQLTransaction] = SQLTransaction
    errors: type[Exception] = Exception

    def __init__(self, name: str, *, lock_timeout: float) -> None:
        check_lock_timeout(lock_timeout)
        self.name = name
        self._lock = threading.RLock()
        self._handle: Handle | None = None

    def hold(self, handle: Handle) -> None:
        """Keep ``handle`` until :meth:`close`, or until this object is dropped."""
        self._handle = handle
        self._release = weakref.finalize(self, handle.close)

    def handle(self) -> Handle:
        """The open handle (:class:`~cowconv.StoreError` once closed)."""
        if self._handle is None:
            raise StoreError(f"the store {self.name} is closed")
        return self._handle

    def translated(self) -> AbstractContextManager[None]:
        """The driver's errors turned into the store's own (:func:`translated`)."""
        return translated(self.name, self.errors, self.kind)

    def kind(self, error: Any) -> type[StoreError]:
        """Which store error the driver's ``error`` is."""
        return StoreError

    def connection(self) -> AbstractContextManager[_Connection]:
        """A connection of the database, for one transaction."""
        raise NotImplementedError

    def begin(self, write: bool) -> Sequence[str]:
        """The statements that begin a read snapshot or a write serialised with other writers."""
        raise NotImplementedError

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[SQLTransaction]:
        """One snapshot (reads) or one atomic, durable write (:meth:`SQLTransaction.run`)."""
        with (
            self.translated(),
            self.connection() as connection,
            self.operations.run(connection, self.begin(write)) as rows,
        ):
            yield rows

    def wal_bytes_during(self, action: Callable[[], object]) -> int:
        """The bytes of write-ahead log the database wrote while ``action()`` ran."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the handle. Idempotent."""
        with self._lock:
            if self._handle is not None:
                self._release()
                self._handle = None

    def __repr__(self) -> str:
        return self.name


class SQLStore(TreeStore):
    """A :class:`~cowconv.stores.tree.TreeStore` over :class:`SQLRows`.

    >>> from cowconv import SQLiteStore
    >>> isinstance(SQLiteStore(":memory:"), SQLStore)
    True
    """

    def __init__(self, rows: SQLRows[Any]) -> None:
        super().__init__(rows, name=rows.name)
        self._sql = rows

    def bytes_written_by(self, action: Callable[[], object]) -> int:
        """The bytes of write-ahead log ``action()`` made the database write (for benchmarks).

        Every committed change reaches the tables through the write-ahead log,
        so this is what it costs on disk; run nothing else against the
        database meanwhile.

        >>> from cowconv import LLM, Agent, Conversation, SQLiteStore
        >>> import tempfile, pathlib
        >>> store = SQLiteStore(pathlib.Path(tempfile.mkdtemp()) / "cowconv.db")
        >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".",
        ...                       store=store)
        >>> for n in range(100):
        ...     _ = source.send_message(f"message {n}")
        >>> store.bytes_written_by(source.fork) < 16 * 1024
        True
        """
        return self._sql.wal_bytes_during(action)
