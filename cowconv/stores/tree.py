"""``TreeStore``: the :class:`~cowconv.Store` protocol, written once, over any row database.

Forks sharing stored events, the conversation tree (``navigate_to``),
version checks, deletes that keep forks whole, export and import: all of it
lives here, on top of the handful of row operations a database offers
(:class:`~cowconv.ports.RowStore`). :class:`~cowconv.MemoryStore`,
:class:`~cowconv.SQLiteStore` and :class:`~cowconv.stores.postgres.PostgresStore`
are such databases.

>>> from cowconv import LLM, Agent, Conversation
>>> from cowconv.stores.memory import MemoryRows
>>> store = TreeStore(MemoryRows())
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", store=store)
>>> _ = source.send_message("hi")
>>> fork = source.fork(title="B")  # one row, no event written again
>>> [(info.title, info.event_count) for info in store.list()]
[(None, 2), ('B', 2)]

Each event is stored once, by the conversation that appended it; a fork is a
row naming its parent and how many of the parent's events it inherits. See
``docs/persistence.md`` for the layout and the guarantees.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import secrets
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NamedTuple, Self, TypeVar

from cowconv._exceptions import (
    ConversationExistsError,
    ConversationNotFoundError,
    CorruptStoreError,
    InvalidValueError,
    StoreError,
)
from cowconv.core.frozen import decode_json
from cowconv.core.history import EventLog, shared_prefix_length
from cowconv.core.ids import ConversationID, id_text, public_id
from cowconv.core.state import ConversationInfo, ConversationState, check_tags, dump_state_json
from cowconv.core.storable import check_storable, loaded_history
from cowconv.ports import Row, RowStore, RowTransaction, SuiteRow
from cowconv.stores.base import ExportRecord, export_document, loaded_status, parse_export

__all__ = ["StorePage", "TreeStore"]

logger = logging.getLogger("cowconv")

MAX_ROWS = 2**63 - 1
"""No database holds more rows than a 64-bit integer counts: paging is clamped to it."""

MAX_CURSOR = 4096
"""The longest listing cursor taken (a page's ``next_cursor``: a time stamp and an id)."""

# Loaded histories kept so that loading a fork shares the parent's events.
_CACHE_SIZE = 32

# (row key, generation, version): which stored write a snapshot is.
_Token = tuple[int, int, int]

T = TypeVar("T")


def _token(row: Row) -> _Token:
    return (row.key, row.generation, row.version)


class TreeStore:
    """Conversations as rows of ``rows``, forks sharing stored events; safe across threads.

    ``name`` names the store in error messages (a file, a database).

    >>> from cowconv.stores.memory import MemoryRows
    >>> with TreeStore(MemoryRows()) as store:
    ...     store.list()
    []
    """

    def __init__(self, rows: RowStore, *, name: str = "") -> None:
        self._rows = rows
        self._name = name or repr(rows)
        # Writers hold _lock (outermost: before the database's own lock); _cache_lock is
        # the innermost, held only to touch what this store remembers.
        self._lock = threading.RLock()
        self._cache_lock = threading.Lock()
        self._cache: OrderedDict[int, EventLog] = OrderedDict()
        self._cache_epoch: object = None
        # id(snapshot) -> the stored write it is, for every snapshot this store loaded or
        # saved and that is still alive: the base a writer's next save must match.
        self._bases: dict[int, _Token] = {}
        # Row key -> (generation, version) of a state found readable there.
        self._readable: dict[int, tuple[int, ...]] = {}

    @property
    def rows(self) -> RowStore:
        """The row database underneath (another ``TreeStore`` over it sees the same data)."""
        return self._rows

    @property
    def location(self) -> str | None:
        """What another process opens to reach this store (:func:`~cowconv.stores.open_store`):
        a file path or a ``postgresql://`` URL; ``None`` when only this process can.

        >>> from cowconv import MemoryStore
        >>> MemoryStore().location is None
        True
        """
        return None

    # -- recorded branch suites (cowconv.branches.ledger) -------------------------------

    def suite_rows(self, suite: str) -> builtins.list[SuiteRow]:
        """The stored rows of the branch suite ``suite``, by index (empty: not recorded).

        >>> from cowconv import MemoryStore
        >>> MemoryStore().suite_rows("nope")
        []
        """
        with self._transaction(write=False) as rows:
            return builtins.list(rows.suite_rows(suite))

    def change_suite(self, change: Callable[[RowTransaction], T]) -> T:
        """Run ``change`` in one write transaction (read, decide, write suite rows atomically).

        >>> from cowconv import MemoryStore
        >>> from cowconv.ports import SuiteRow
        >>> store = MemoryStore()
        >>> store.change_suite(lambda rows: rows.put_suite_row(SuiteRow("s", 0, "c", "pending")))
        >>> [row.state for row in store.suite_rows("s")]
        ['pending']
        """
        with self._transaction(write=True) as rows:
            return change(rows)

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[RowTransaction]:
        # Writers go one at a time (the database serialises them anyway) and hold the lock
        # until what they remember is remembered; readers run in parallel where the
        # database allows it (a pool of connections).
        with (
            self._lock if write else contextlib.nullcontext(),
            self._rows.transaction(write=write) as rows,
        ):
            yield rows

    def _row(self, rows: RowTransaction, conversation_id: ConversationID) -> Row:
        found = rows.row(id_text(conversation_id))
        if found is None:
            raise ConversationNotFoundError(id_text(conversation_id))
        return found

    def _links(self, rows: RowTransaction, key: int) -> Row:
        found = rows.row_at(key)
        if found is None:
            raise CorruptStoreError(f"the store {self._name} lost conversation row {key}")
        return found

    def _remember(self, key: int, events: EventLog) -> None:
        # Rows at (key, position) are written once, and a key is reused only after the
        # row holding it was deleted: _history drops what it remembers whenever another
        # connection may have reused one (and delete() does for this one).
        with self._cache_lock:
            known = self._cache.get(key)
            if known is None or len(known) <= len(events):
                self._cache[key] = events
            self._cache.move_to_end(key)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)

    def _forget(self) -> None:
        with self._cache_lock:
            self._cache.clear()

    # -- reading -------------------------------------------------------------------

    def _history(self, rows: RowTransaction, key: int, count: int) -> EventLog:
        """The first ``count`` events of row ``key``: ancestors' prefixes, then its own."""
        epoch = rows.epoch()
        if epoch != self._cache_epoch:
            self._forget()
            self._cache_epoch = epoch
        # Walk up to the nearest remembered prefix (or the root), then read down.
        path: list[tuple[int, int]] = []
        base = EventLog()
        while count > 0:
            known = self._cache.get(key)
            if known is not None and len(known) >= count:
                base = known.take(count)
                break
            row = self._links(rows, key)
            path.append((key, count))
            if known is not None and len(known) >= row.fork_len:
                base = known
                break
            if row.parent is None or row.fork_len == 0:
                break
            key, count = row.parent, min(count, row.fork_len)
        for key, count in reversed(path):
            if len(base) < count:
                ids, events = rows.read_events(key, len(base), count)
                if len(ids) != count - len(base):
                    raise CorruptStoreError(
                        f"the store {self._name} is missing events of conversation row {key}"
                    )
                base = base.extend_sealed(events, ids)
            self._remember(key, base)
        return loaded_history(base)  # read back from this store: not checked again on save

    def _state(
        self, state_json: str | None, events: EventLog, conversation_id: str
    ) -> ConversationState:
        try:
            state = ConversationState.model_validate_json(state_json or "")
        except ValueError as error:
            raise CorruptStoreError(
                f"the stored state of conversation {conversation_id!r} cannot be read (delete() "
                f"still removes it): {error}"
            ) from error
        return loaded_status(state._replace(branch=events))

    def _track(self, state: ConversationState, token: _Token) -> None:
        """Remember that ``state`` is the stored write ``token``, for as long as it lives."""
        key = id(state)
        with self._cache_lock:
            if key not in self._bases:
                weakref.finalize(state, self._bases.pop, key, None)
            self._bases[key] = token

    def exists(self, conversation_id: ConversationID) -> bool:
        """Whether a conversation with this id is stored.

        >>> from cowconv import MemoryStore
        >>> MemoryStore().exists("nope")
        False
        """
        with self._transaction(write=False) as rows:
            return rows.row(id_text(conversation_id)) is not None

    def load(self, conversation_id: ConversationID) -> ConversationState:
        """The stored snapshot; ``ConversationNotFoundError`` if there is none.

        Events may be validated when first read, so opening a long history is
        fast; a ``running`` conversation loads ``paused``.

        >>> from cowconv import MemoryStore
        >>> MemoryStore().load("nope")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ConversationNotFoundError: no conversation with id 'nope'
        """
        with self._transaction(write=False) as rows:
            row = self._row(rows, conversation_id)
            state = self._tree_state(rows, row, id_text(conversation_id))
        self._track(state, _token(row))
        return state

    def _tree_state(
        self, rows: RowTransaction, row: Row, conversation_id: str
    ) -> ConversationState:
        """The snapshot of ``row`` with every branch of its conversation tree."""
        events = self._history(rows, row.key, row.event_count)
        state = self._state(row.state, events, conversation_id)
        branches = tuple(
            self._history(rows, branch.key, branch.event_count)
            for branch in rows.branch_rows(conversation_id)
        )
        return state._replace(other_branches=branches) if branches else state

    def _other_branches(self, conversation_id: ConversationID) -> builtins.list[tuple[str, int]]:
        """(leaf event id, event count) of each other branch of a conversation, in order."""
        with self._transaction(write=False) as rows:
            return [
                (self._leaf(rows, branch.key, branch.event_count) or "", branch.event_count)
                for branch in rows.branch_rows(id_text(conversation_id))
            ]

    def holds(self, state: ConversationState) -> bool:
        """Whether ``state`` is the very write the store holds for its conversation.

        ``False`` once another writer (another process, another store object
        on the same database) wrote or deleted the conversation, or for a
        snapshot this store object neither loaded nor saved: the check a
        server makes before serving a conversation it keeps in memory. It
        reads three numbers of one row, not the state.

        >>> from cowconv import LLM, Agent, Conversation, MemoryStore
        >>> store = MemoryStore()
        >>> mine = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".",
        ...                     store=store)
        >>> snapshot = mine.backend.snapshot()
        >>> store.holds(snapshot)
        True
        >>> other = Conversation.resume(MemoryStore(store.rows), mine.id)  # another writer
        >>> _ = other.send_message("hi")
        >>> store.holds(snapshot)
        False
        """
        token = self._bases.get(id(state))
        if token is None:
            return False
        with self._transaction(write=False) as rows:
            return rows.written(id_text(state.id)) == token

    def info(self, conversation_id: ConversationID) -> ConversationInfo:
        """The stored conversation's summary, without reading its events.

        >>> from cowconv import LLM, Agent, Conversation, MemoryStore
        >>> store = MemoryStore()
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o"))
        >>> conversation = Conversation(agent=agent, workspace=".", store=store)
        >>> _ = conversation.send_message("Draft the reply.")
        >>> info = store.info(conversation.fork(title="Draft").id)
        >>> info.title, info.event_count  # the system prompt, the message
        ('Draft', 2)
        """
        with self._transaction(write=False) as rows:
            row = self._row(rows, conversation_id)
            return self._info(rows, row)

    def _leaf(self, rows: RowTransaction, key: int, event_count: int) -> str | None:
        """The id of the last event of a stored history (its leaf), or ``None``."""
        return self._event_id_at(rows, key, event_count - 1) if event_count else None

    def _info(self, rows: RowTransaction, row: Row) -> ConversationInfo:
        assert row.id is not None
        state = self._state(row.state, EventLog(), row.id)
        leaf = self._leaf(rows, row.key, row.event_count)
        update = {"event_count": row.event_count, "leaf_event_id": leaf}
        return ConversationInfo.of(state).model_copy(update=update)

    def list(
        self, *, tags: Mapping[str, str] | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[ConversationInfo]:
        """Summaries of the stored conversations carrying all ``tags``, oldest first.

        ``limit`` and ``offset`` page through them. A conversation whose
        stored state cannot be read is left out and logged by id (see
        :meth:`unreadable`); it never hides the others.

        >>> from cowconv import MemoryStore
        >>> MemoryStore().list(tags={"title": "x"}, limit=10)
        []
        """
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidValueError(f"limit must be an int >= 0 or None, got {limit!r}")
        if not isinstance(offset, int) or offset < 0:
            raise InvalidValueError(f"offset must be an int >= 0, got {offset!r}")
        wanted = check_tags(tags)  # the one tag validator
        page = None if limit is None else min(limit, MAX_ROWS)
        with self._transaction(write=False) as rows:
            infos, unreadable = self._infos(
                rows, rows.named_rows(wanted, page, min(offset, MAX_ROWS))
            )
        if unreadable:
            logger.warning(
                "the store %s holds conversations whose state cannot be read (delete them or "
                "restore them): %s",
                self._name,
                ", ".join(map(repr, unreadable)),
            )
        return infos

    def page(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> StorePage:
        """One page of the listing: the next ``limit`` stored conversations, oldest first.

        The page is read off the listing index (``created_at``, then id):
        ``limit + 1`` rows from ``cursor`` (the ``next_cursor`` of the page
        before), so its cost does not grow with the store; ``offset`` skips
        rows first (it costs the rows it skips). The rows the page covers
        whose state cannot be read are in ``unreadable``, not in ``items``:
        paging through the whole listing reports each of them once, and no
        listing reads a row outside its page. From a cursor, every
        conversation stored before the first page and not deleted meanwhile
        is listed exactly once, whatever is created or deleted between
        pages; an id is never listed twice.

        >>> from cowconv import MemoryStore
        >>> MemoryStore().page(limit=20)
        StorePage(items=[], unreadable=[], next_cursor=None)
        """
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidValueError(f"limit must be an int >= 1, got {limit!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidValueError(f"offset must be an int >= 0, got {offset!r}")
        wanted = check_tags(tags)
        after = None if cursor is None else _place_of(cursor)
        limit = min(limit, MAX_ROWS - 1)
        with self._transaction(write=False) as rows:
            named = rows.named_rows(wanted, limit + 1, min(offset, MAX_ROWS), after)
            covered = named[:limit]
            infos, unreadable = self._infos(rows, covered)
        more = len(named) > limit
        return StorePage(infos, unreadable, _cursor_of(covered[-1]) if more else None)

    def _infos(
        self, rows: RowTransaction, named: Sequence[Row]
    ) -> tuple[builtins.list[ConversationInfo], builtins.list[str]]:
        infos, unreadable = [], []
        for row in named:
            try:
                infos.append(self._info(rows, row))
            except CorruptStoreError:
                unreadable.append(str(row.id))
        return infos, unreadable

    def unreadable(self) -> builtins.list[str]:
        """The ids of stored conversations whose state cannot be read (damage, an old bug).

        :meth:`list` leaves them out, :meth:`load` raises
        :class:`~cowconv.CorruptStoreError` naming them, :meth:`delete` removes them.

        >>> from cowconv import MemoryStore
        >>> MemoryStore().unreadable()
        []
        """
        unreadable = []
        with self._transaction(write=False) as rows:
            # A state this store found readable is not read again while its row keeps its
            # generation and version (every cowconv write changes them): a server that asks
            # on every listing reads and validates each stored state once.
            unknown = [
                (key, name, (generation, version))
                for key, name, generation, version in sorted(rows.named_versions())
                if self._readable.get(key) != (generation, version)
            ]
            # Many unknown (a store just opened): one query for every state, not one each.
            held = (
                {row.key: row for row in rows.named_rows({}, None, 0)} if len(unknown) > 64 else {}
            )
            for key, name, version in unknown:
                row = held.get(key) or rows.row_at(key)
                try:
                    self._state(None if row is None else row.state, EventLog(), name)
                except CorruptStoreError:
                    unreadable.append(name)
                    continue
                with self._cache_lock:
                    self._readable[key] = version
        return unreadable

    # -- writing -------------------------------------------------------------------

    def save(
        self,
        previous: ConversationState | None,
        current: ConversationState,
        *,
        guard: Callable[[RowTransaction], object] | None = None,
    ) -> None:
        """Make ``current`` durable in one transaction (the :class:`~cowconv.StateSink`).

        ``previous is None`` stores a new conversation, or a fork: when its
        parent is in this store, the fork is one row and no event is
        written. Otherwise ``previous`` must be the very write the store
        holds: every stored conversation carries a generation (new when it
        is created, so a deleted and re-created id is a different one) and a
        version (counted up by every write). A writer whose ``previous`` is
        not the stored generation and version (another writer, another
        process, or a delete came in between) gets
        :class:`~cowconv.StoreError` and nothing is written. A snapshot that would
        not load again (see :func:`~cowconv.core.storable.check_storable`) is
        refused before anything is written.

        ``guard(rows)``, if given, runs first in the same write transaction
        (a branch suite checks and records its claim there): if it raises,
        nothing is written.
        """
        check_storable(current, previous)  # whatever is stored loads again (core/storable.py)
        with self._lock:  # until remembered: a delete that frees the key comes after
            with self._transaction(write=True) as rows:
                if guard is not None:
                    guard(rows)
                if previous is None:
                    token = self._insert(rows, current, *self._fork_point(rows, current))
                else:
                    token = self._append(rows, previous, current)
            self._remember(token[0], current.branch)
        self._track(current, token)

    def _fork_point(self, rows: RowTransaction, state: ConversationState) -> tuple[int | None, int]:
        """Where ``state`` branches off a stored conversation: (parent key, events shared)."""
        parent_id, count = state.forked_from_conversation_id, state.forked_from_event_count
        if parent_id is None or not count or count > len(state.branch):
            return None, 0
        found = rows.row(str(parent_id))
        if found is None:
            return None, 0
        # The source's active branch, else one of its other branches (fork at an old event).
        for candidate in (found, *rows.branch_rows(str(parent_id))):
            if (
                count <= candidate.event_count
                and self._stored_common_prefix(rows, state.branch, candidate.key, count) == count
            ):
                return candidate.key, count
        return None, 0  # a different history under that id: share nothing

    def _event_id_at(self, rows: RowTransaction, key: int, position: int) -> str | None:
        while True:
            row = self._links(rows, key)
            if position >= row.fork_len or row.parent is None:
                break
            key = row.parent
        return rows.event_id(key, position)

    def _insert(
        self, rows: RowTransaction, state: ConversationState, parent: int | None, fork_len: int
    ) -> _Token:
        if rows.row(str(state.id)) is not None:
            raise ConversationExistsError(str(state.id))
        if fork_len == 0:
            parent = None
        # Random, not counted: a count would restart when the rows holding it are deleted.
        generation = secrets.randbits(63)
        row = Row(0, str(state.id), parent, fork_len, 0, dump_state_json(state), generation)
        key = self._insert_row(rows, row, state.branch)
        if state.other_branches:
            self._insert_branches(rows, state, key, generation)
        return (key, generation, 0)

    def _insert_branches(
        self, rows: RowTransaction, state: ConversationState, key: int, generation: int
    ) -> None:
        """Rows for the other branches of a new conversation (a fork carries its source's).

        Each shares what it can with the rows of the source and of the new
        conversation, so a fork of a tree writes rows, not events.
        """
        conversation_id = str(state.id)
        candidates = [(key, len(state.branch))]
        source = state.forked_from_conversation_id
        found = None if source is None else rows.row(str(source))
        if found is not None:
            candidates += [
                (row.key, row.event_count) for row in (found, *rows.branch_rows(str(source)))
            ]
        for order, log in enumerate(state.other_branches):
            parent, shared = _most_shared(
                (candidate, self._stored_common_prefix(rows, log, candidate, count))
                for candidate, count in candidates
            )
            branch = Row(0, None, parent, shared, 0, None, generation, 0, conversation_id, order)
            candidates.append((self._insert_row(rows, branch, log), len(log)))

    def _insert_row(self, rows: RowTransaction, row: Row, log: EventLog) -> int:
        """Insert ``row`` for the history ``log``: it holds the events from its ``fork_len`` on."""
        key = rows.insert(row._replace(event_count=len(log)))
        self._write_events(rows, key, log, row.fork_len)
        return key

    def _stored_common_prefix(
        self, rows: RowTransaction, log: EventLog, key: int, count: int
    ) -> int:
        """How many first events ``log`` shares with the stored history of row ``key``."""
        return shared_prefix_length(
            min(len(log), count),
            lambda position: self._event_id_at(rows, key, position) == log[position].id,
        )

    def _base(self, rows: RowTransaction, row: Row, previous: ConversationState) -> _Token | None:
        """The stored write ``previous`` is, or None if it is not the stored one."""
        known = self._bases.get(id(previous))
        if known is not None:
            return known
        # A snapshot this store object never saw (built elsewhere): it is the stored write
        # only if it is that write, event for event and field for field.
        count = len(previous.branch)
        if row.event_count != count or row.state != dump_state_json(previous):
            return None
        if count and self._event_id_at(rows, row.key, count - 1) != previous.branch[count - 1].id:
            return None
        return _token(row)

    def _conflict(self, conversation_id: str, why: str) -> StoreError:
        return StoreError(
            f"conversation {conversation_id!r} was {why} since this writer read it; nothing was "
            "written (load it again to continue)"
        )

    def _append(
        self, rows: RowTransaction, previous: ConversationState, current: ConversationState
    ) -> _Token:
        if current.id != previous.id:
            raise InvalidValueError(f"cannot save conversation {current.id!r} over {previous.id!r}")
        start = len(previous.branch)
        row = rows.row(str(current.id))
        if row is None:
            raise StoreError(
                f"conversation {current.id!r} was deleted since this writer read it; nothing "
                "was written"
            )
        base = self._base(rows, row, previous)
        if base != _token(row) or row.event_count != start:
            raise self._conflict(
                str(current.id),
                "deleted and created again"
                if base is None or base[:2] != _token(row)[:2]
                else f"changed by another writer (stored version {row.version}, this writer's "
                f"{base[2]})",
            )
        if not _only_grows(previous, current):
            return self._restructure(rows, row, previous, current)
        written = row._replace(
            event_count=len(current.branch),
            state=dump_state_json(current),
            version=row.version + 1,
        )
        if not rows.update(written, expected=row):
            raise self._conflict(str(current.id), "changed by another writer")
        self._write_events(rows, row.key, current.branch, start)
        return _token(written)

    def _restructure(
        self,
        rows: RowTransaction,
        row: Row,
        previous: ConversationState,
        current: ConversationState,
    ) -> _Token:
        """Store a conversation whose branches changed (``navigate_to``): rows, not copies.

        Each branch (the active one first) is kept in the row that already
        holds exactly its history, or gets a new row forked off the stored
        history it shares the most events with; rows no branch uses any more
        become tombstones and are reclaimed. The conversation's id moves to
        the row of its active branch; the other branches' rows name it in
        ``branch_of``, in order.
        """
        conversation_id = str(current.id)
        old_keys = [row.key, *(branch.key for branch in rows.branch_rows(conversation_id))]
        old_logs = [previous.branch, *previous.other_branches]
        if len(old_keys) != len(old_logs):
            raise StoreError(
                f"the branches of conversation {conversation_id!r} in the store do not match "
                "this writer's; nothing was written (load it again to continue)"
            )
        # Release the id first (checked: this is the write that refuses a stale writer).
        if not rows.update(row._replace(id=None, state=None), expected=row):
            raise self._conflict(conversation_id, "changed by another writer")
        new_keys: builtins.list[int] = []
        for log in (current.branch, *current.other_branches):
            commons = [log.common_prefix_length(old) for old in old_logs]
            same = [
                key
                for key, common, old in zip(old_keys, commons, old_logs, strict=True)
                if common == len(log) == len(old) and key not in new_keys
            ]
            if same:
                new_keys.append(same[0])  # this branch's history is stored exactly there
                continue
            parent, shared = _most_shared(zip(old_keys, commons, strict=True))
            branch = Row(0, None, parent, shared, 0, None, row.generation)
            new_keys.append(self._insert_row(rows, branch, log))
        for order, key in enumerate(new_keys):
            held = self._links(rows, key)
            if order == 0:
                written = held._replace(
                    id=conversation_id,
                    state=dump_state_json(current),
                    generation=row.generation,
                    version=row.version + 1,
                    branch_of=None,
                    branch_order=0,
                )
                rows.update(written)
            else:
                rows.update(
                    held._replace(
                        id=None, state=None, branch_of=conversation_id, branch_order=order - 1
                    )
                )
        self._bury(rows, [key for key in old_keys if key not in new_keys])
        return (new_keys[0], row.generation, row.version + 1)

    def _bury(self, rows: RowTransaction, keys: builtins.list[int]) -> None:
        """Make the rows ``keys`` tombstones (id, state, branch erased), then reclaim them and
        the tombstones above them as far as no fork reaches their events."""
        for key in keys:
            held = self._links(rows, key)
            rows.update(held._replace(id=None, state=None, branch_of=None, branch_order=0))
        for key in keys:
            self._reclaim_up(rows, key)
        self._forget()  # a reclaimed key may be handed out again: forget what was loaded

    def _reclaim_up(self, rows: RowTransaction, key: int | None) -> None:
        """Reclaim the tombstone ``key`` and the tombstones above it that nothing reaches."""
        while key is not None:
            row = rows.row_at(key)
            if row is None or not row.is_tombstone:
                return
            self._reclaim(rows, row)
            key = row.parent

    def _reclaim(self, rows: RowTransaction, row: Row) -> None:
        children = rows.children(row.key)
        # A fork reaches min(its own reach, its fork_len) events of its parent.
        needed = max((min(child.event_count, child.fork_len) for child in children), default=0)
        rows.trim_events(row.key, needed)
        if needed <= row.fork_len:
            # None of its own events is reached: its forks inherit from its parent directly.
            for child in children:
                rows.update(child._replace(parent=row.parent))
            rows.delete(row.key)
        else:
            rows.update(row._replace(event_count=needed))

    def _write_events(self, rows: RowTransaction, key: int, events: EventLog, start: int) -> None:
        if start < len(events):
            rows.write_events(
                key, start, (events[position] for position in range(start, len(events)))
            )

    def delete(self, conversation_id: ConversationID) -> None:
        """Forget a conversation; forks of it keep their histories.

        Its rows stay as hidden tombstones (id and state, secrets included,
        erased) holding the events that forks still reach; events nothing
        reaches are deleted, here and up the chain of tombstones.

        >>> from cowconv import LLM, Agent, Conversation, MemoryStore
        >>> store = MemoryStore()
        >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".",
        ...                       store=store)
        >>> _ = source.send_message("hi")
        >>> fork = source.fork(title="B")
        >>> store.delete(source.id)
        >>> [(info.title, info.event_count) for info in store.list()]  # B still has both
        [('B', 2)]
        """
        with self._transaction(write=True) as rows:
            row = self._row(rows, conversation_id)
            branches = rows.branch_rows(id_text(conversation_id))
            self._bury(rows, [row.key, *(branch.key for branch in branches)])

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

        >>> from cowconv import LLM, Agent, Conversation, MemoryStore
        >>> store, copy = MemoryStore(), MemoryStore()
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o"))
        >>> source = Conversation(agent=agent, workspace=".", store=store)
        >>> _ = source.send_message("hi")
        >>> fork = source.fork()
        >>> document = store.export_conversation(source.id, with_forks=True)
        >>> copy.import_conversations(document) == [source.id, fork.id]
        True
        """
        with self._transaction(write=False) as rows:
            root = self._row(rows, conversation_id)
            state = self._tree_state(rows, root, id_text(conversation_id))
            records = [ExportRecord(state)]
            # Forks hang off the rows of the active branch and of the other branches, and
            # forks of tombstones and branch rows belong to the nearest exported ancestor;
            # each shares with its exported parent what it reaches of the active branch.
            pending = [(root.key, str(state.id), root.event_count)] if with_forks else []
            if with_forks:
                branches = zip(rows.branch_rows(str(state.id)), state.other_branches, strict=True)
                pending += [
                    (branch.key, str(state.id), state.branch.common_prefix_length(log))
                    for branch, log in branches
                ]
            visited = {key for key, _, _ in pending}
            while pending:
                key, ancestor, shared = pending.pop(0)
                for child in rows.children(key):
                    if child.key in visited:
                        continue
                    visited.add(child.key)
                    reach = min(shared, child.fork_len)
                    if child.id is None:
                        pending.append((child.key, ancestor, reach))
                        continue
                    child_state = self._tree_state(rows, child, child.id)
                    records.append(ExportRecord(child_state, ancestor, reach))
                    pending.append((child.key, child.id, child.event_count))
        return export_document(records, include_secrets=include_secrets)

    def import_conversations(self, data: str | bytes) -> builtins.list[ConversationID]:
        """Store the conversations of an export, forks sharing as they did; returns their ids.

        All or nothing: a bad document or an id already stored raises
        ``ValueError`` and stores nothing.

        >>> from cowconv import MemoryStore
        >>> MemoryStore().import_conversations('{"format": "zip"}')  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: not a cowconv export (no 'format': ...)
        """
        records = parse_export(data)
        keys: dict[str, int] = {}
        with self._transaction(write=True) as rows:
            for record in records:
                parent = None if record.parent is None else keys[record.parent]
                fork_len = record.fork_len if parent is not None else 0
                keys[str(record.state.id)] = self._insert(rows, record.state, parent, fork_len)[0]
        return [public_id(key) for key in keys]

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        """Release the database; the store cannot be used afterwards. Idempotent."""
        self._rows.close()
        self._forget()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"


class StorePage(NamedTuple):
    """A page of a store's listing (:meth:`TreeStore.page`).

    ``next_cursor`` is where the next page starts, ``None`` after the last.
    """

    items: builtins.list[ConversationInfo]
    unreadable: builtins.list[str]
    next_cursor: str | None


def _cursor_of(row: Row) -> str:
    """The cursor just past ``row`` in the listing's order: its ``created_at``, a space, its id.

    Readable, and any text is a place in that order (a cursor never fails to parse).
    """
    try:
        created = decode_json(row.state or "").get("created_at")
    except (ValueError, AttributeError):
        created = None  # a database's index cannot hold such a row; be safe all the same
    return f"{created if isinstance(created, str) else ''} {row.id}"


def _place_of(cursor: object) -> tuple[str, str]:
    """The ``(created_at, id)`` a cursor names: the text before its first space, and after.

    >>> _place_of(_cursor_of(Row(1, "c 1", None, 0, 0, '{"created_at": "2026-12-02T16:12Z"}')))
    ('2026-12-02T16:12Z', 'c 1')
    >>> _place_of(5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: a listing cursor is text of up to 4096 characters ...
    """
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR or "\x00" in cursor:
        raise InvalidValueError(
            f"a listing cursor is text of up to {MAX_CURSOR} characters without NUL, "
            f"got {repr(cursor)[:80]}"
        )
    created, _, name = cursor.partition(" ")
    return created, name


def _most_shared(shares: Iterable[tuple[int, int]]) -> tuple[int | None, int]:
    """The ``(row key, events shared)`` sharing the most events (the first of equals), or
    ``(None, 0)`` if none shares any: where a new row forks off.

    >>> _most_shared([(1, 0), (2, 3), (3, 3)]), _most_shared([(1, 0)])
    ((2, 3), (None, 0))
    """
    key, shared = max(shares, key=lambda share: share[1], default=(None, 0))
    return (key, shared) if shared else (None, 0)


def _only_grows(previous: ConversationState, current: ConversationState) -> bool:
    """Whether ``current`` only adds new events to ``previous``'s active branch (the common case).

    The active branch also grows when ``navigate_to`` moves its leaf forward
    along another branch; those events are stored already, in that branch's
    rows, so that change is a restructure (rows, not copies).
    """
    if previous.other_branches != current.other_branches:
        return False
    start = len(previous.branch)
    if len(current.branch) < start or not current.branch.starts_with(previous.branch):
        return False
    return len(current.branch) == start or not any(
        current.branch.common_prefix_length(branch) > start for branch in current.other_branches
    )
