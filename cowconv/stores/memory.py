"""``MemoryStore``: a :class:`~cowconv.Store` whose rows live in this process.

The rows are persistent maps (pyrsistent): a write transaction edits new
versions of them and publishes them when it ends, so a failed one leaves
nothing behind and a reader always sees one committed state. Events are kept
as the event objects themselves, nothing is serialised but the states.
Nothing survives the process. The agent server uses it when it has no data
directory, so its registry has one code path for both cases.

>>> from cowconv import LLM, Agent, Conversation
>>> store = MemoryStore()
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", store=store)
>>> _ = source.send_message("hi")
>>> fork = source.fork(title="B")
>>> [(info.title, info.event_count) for info in store.list()]  # the system prompt, "hi"
[(None, 2), ('B', 2)]
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from pyrsistent import PMap, PVector, pmap, pvector

from cowconv._exceptions import ConversationExistsError, StoreError
from cowconv.core.events import Event
from cowconv.ports import Row, SuiteRow
from cowconv.stores.tree import TreeStore

__all__ = ["MemoryRows", "MemoryStore"]

_NO_KEYS: frozenset[int] = frozenset()


@dataclass(frozen=True)
class _Tables:
    """One committed state of the rows, with the indexes a database would keep."""

    rows: PMap[int, Row]
    by_id: PMap[str, int]
    branches: PMap[str, frozenset[int]]
    children: PMap[int, frozenset[int]]
    # A row's own events: the position of the first, then the (id, event) pairs.
    events: PMap[int, tuple[int, PVector[tuple[str, Event]]]]
    # (created_at, tags) of each conversation row's state, for listing.
    summaries: PMap[int, tuple[str, Mapping[str, Any]]]
    # The recorded branch suites: suite id -> branch index -> row.
    suites: PMap[str, PMap[int, SuiteRow]] = pmap()


def _summary(state: str) -> tuple[str, Mapping[str, Any]]:
    data = json.loads(state)
    created = data.get("created_at")  # as a database's index reads it: text, else ""
    return created if isinstance(created, str) else "", dict(data.get("tags") or {})


def _without(index: PMap[Any, frozenset[int]], name: Any, key: int) -> PMap[Any, frozenset[int]]:
    left = index.get(name, _NO_KEYS) - {key}
    return index.set(name, left) if left else index.discard(name)


class _Transaction:
    """The row operations (:class:`~cowconv.ports.RowTransaction`) on one version of the tables."""

    def __init__(self, tables: _Tables, keys: Iterator[int]) -> None:
        self.tables = tables
        self._keys = keys

    def _put(self, row: Row) -> None:
        t = self.tables
        old = t.rows.get(row.key)
        by_id, branches, children, summaries = t.by_id, t.branches, t.children, t.summaries
        if old is not None:
            if old.id is not None:
                by_id = by_id.discard(old.id)
            if old.branch_of is not None:
                branches = _without(branches, old.branch_of, old.key)
            if old.parent is not None:
                children = _without(children, old.parent, old.key)
        if row.id is not None:
            by_id = by_id.set(row.id, row.key)
        if row.branch_of is not None:
            branches = branches.set(
                row.branch_of, branches.get(row.branch_of, _NO_KEYS) | {row.key}
            )
        if row.parent is not None:
            children = children.set(row.parent, children.get(row.parent, _NO_KEYS) | {row.key})
        if row.id is not None and row.state is not None:
            if old is None or old.state != row.state:
                summaries = summaries.set(row.key, _summary(row.state))
        else:
            summaries = summaries.discard(row.key)
        self.tables = replace(
            t, rows=t.rows.set(row.key, row), by_id=by_id, branches=branches,
            children=children, summaries=summaries,
        )  # fmt: skip

    def row(self, conversation_id: str) -> Row | None:
        key = self.tables.by_id.get(conversation_id)
        return None if key is None else self.tables.rows[key]

    def row_at(self, key: int) -> Row | None:
        return self.tables.rows.get(key)

    def written(self, conversation_id: str) -> tuple[int, int, int] | None:
        row = self.row(conversation_id)
        return None if row is None else (row.key, row.generation, row.version)

    def branch_rows(self, conversation_id: str) -> list[Row]:
        keys = self.tables.branches.get(conversation_id, _NO_KEYS)
        return sorted((self.tables.rows[key] for key in keys), key=lambda row: row.branch_order)

    def children(self, key: int) -> list[Row]:
        return [self.tables.rows[child] for child in sorted(self.tables.children.get(key, ()))]

    def insert(self, row: Row) -> int:
        if row.id is not None and row.id in self.tables.by_id:
            raise ConversationExistsError(row.id)
        key = next(self._keys)  # never reused: what a reader remembers of a key stays true
        self._put(row._replace(key=key))
        return key

    def update(self, row: Row, *, expected: Row | None = None) -> bool:
        held = self.tables.rows.get(row.key)
        if held is None or (
            expected is not None
            and (held.generation, held.version) != (expected.generation, expected.version)
        ):
            return False
        self._put(row)
        return True

    def delete(self, key: int) -> None:
        t = self.tables
        old = t.rows.get(key)
        if old is None:
            return
        self._put(old._replace(id=None, state=None, parent=None, branch_of=None))
        t = self.tables
        self.tables = replace(t, rows=t.rows.discard(key), events=t.events.discard(key))

    def write_events(self, key: int, start: int, events: Iterable[Event]) -> None:
        first, held = self.tables.events.get(key, (start, pvector()))
        if first + len(held) != start:
            raise StoreError(f"events of row {key} must be written in order, from {start}")
        held = held.extend((event.id, event) for event in events)
        self.tables = replace(self.tables, events=self.tables.events.set(key, (first, held)))

    def _own(self, key: int) -> tuple[int, PVector[tuple[str, Event]]]:
        return self.tables.events.get(key, (0, pvector()))

    def read_events(self, key: int, start: int, stop: int) -> tuple[list[str], tuple[Event, ...]]:
        first, held = self._own(key)
        if start < first:
            return [], ()
        pairs = held[start - first : stop - first]
        return [event_id for event_id, _ in pairs], tuple(event for _, event in pairs)

    def event_id(self, key: int, position: int) -> str | None:
        first, held = self._own(key)
        return held[position - first][0] if 0 <= position - first < len(held) else None

    def trim_events(self, key: int, keep: int) -> None:
        first, held = self._own(key)
        events = self.tables.events
        if keep <= first:
            events = events.discard(key)
        elif keep - first < len(held):
            events = events.set(key, (first, held[: keep - first]))
        self.tables = replace(self.tables, events=events)

    def named_rows(
        self,
        tags: Mapping[str, str],
        limit: int | None,
        offset: int,
        after: tuple[str, str] | None = None,
    ) -> list[Row]:
        summaries, rows = self.tables.summaries, self.tables.rows
        chosen = sorted(
            (summary[0], str(rows[key].id), key)
            for key, summary in summaries.items()
            if all(summary[1].get(name) == value for name, value in tags.items())
        )
        if after is not None:
            chosen = [place for place in chosen if place[:2] > after]
        page = chosen[offset:] if limit is None else chosen[offset : offset + limit]
        return [rows[key] for _, _, key in page]

    def named_versions(self) -> list[tuple[int, str, int, int]]:
        rows = self.tables.rows
        return [
            (key, name, rows[key].generation, rows[key].version)
            for name, key in self.tables.by_id.items()
        ]

    def epoch(self) -> object:
        return 0  # keys are never reused

    def suite_rows(self, suite: str) -> list[SuiteRow]:
        held = self.tables.suites.get(suite, pmap())
        return [held[index] for index in sorted(held)]

    def put_suite_row(self, row: SuiteRow) -> None:
        suites = self.tables.suites
        held = suites.get(row.suite, pmap()).set(row.branch, row)
        self.tables = replace(self.tables, suites=suites.set(row.suite, held))


class MemoryRows:
    """The rows of a store in this process (a :class:`~cowconv.ports.RowStore`).

    Two stores over one ``MemoryRows`` are two writers of one database.

    >>> rows = MemoryRows()
    >>> with rows.transaction(write=False) as tables:
    ...     tables.row("nope") is None
    True
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._keys = itertools.count(1)
        self._tables: _Tables | None = _Tables(pmap(), pmap(), pmap(), pmap(), pmap(), pmap())

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[_Transaction]:
        """A version of the tables; a write's is published when it ends without error."""
        with self._lock:
            if self._tables is None:
                raise StoreError("the memory store is closed")
            transaction = _Transaction(self._tables, self._keys)
            yield transaction
            if write:
                self._tables = transaction.tables

    def close(self) -> None:
        """Drop every row; further transactions raise :class:`~cowconv.StoreError`."""
        with self._lock:
            self._tables = None

    def __repr__(self) -> str:
        return "memory"


class MemoryStore(TreeStore):
    """Conversations in this process, oldest first; safe across threads.

    ``MemoryStore(rows)`` opens another store on the rows of an existing one.

    >>> MemoryStore().exists("nope")
    False
    """

    def __init__(self, rows: MemoryRows | None = None) -> None:
        super().__init__(MemoryRows() if rows is None else rows, name="memory")

    def __repr__(self) -> str:
        return "MemoryStore()"
