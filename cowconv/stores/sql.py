"""``SQLTransaction``: the row operations SQLite and PostgreSQL share, written once.

Both hold a store in two tables, conversations and events, with the same
columns; they differ in the parameter mark, the table names, how a branch
row says whose branch it is, and how a listing filters by tag.
:class:`~cowconv.stores.sqlite.SQLiteStore` and
:class:`~cowconv.stores.postgres.PostgresStore` subclass this with those.

>>> SQLTransaction.conversations, SQLTransaction.mark
('conversations', '?')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from cowconv.core.events import Event
from cowconv.ports import Row, SuiteRow
from cowconv.stores.lazy import LazyEvents

__all__ = ["SQLTransaction"]


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
    :meth:`encode`), and list rows (:meth:`branch_rows`, :meth:`named_rows`).
    """

    conversations = "conversations"
    events = "events"
    suites = "suite_branches"
    mark = "?"
    # The columns written from a row, in the order encode() gives their values.
    columns: tuple[str, ...] = ("id", "parent", "fork_len", "event_count", "state", "generation",
                                "version")  # fmt: skip

    def __init__(self, connection: _Connection) -> None:
        self.db = connection

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
        raise NotImplementedError

    def named_rows(self, tags: Mapping[str, str], limit: int | None, offset: int) -> list[Row]:
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
