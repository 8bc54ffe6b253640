"""``EventLog``: the persistent, structurally shared event history.

An ``EventLog`` never changes. ``append`` returns a new log that shares every
existing event with the old one, so keeping a reference to a log *is* a fork
of it: O(1) time and memory, and isolated like a deep copy because nothing
either side can reach will ever change.

>>> from cowconv import MessageEvent
>>> base = EventLog().append(MessageEvent(source="user", role="user", content="a"))
>>> left = base.append(MessageEvent(source="user", role="user", content="b"))
>>> right = base.append(MessageEvent(source="user", role="user", content="c"))
>>> [e.text for e in left], [e.text for e in right], len(base)
(['a', 'b'], ['a', 'c'], 1)

Layout
------
A log is a short tuple of *chunks*, each a ``pyrsistent.PVector`` (a 32-way
trie with a tail) of which the log uses a prefix. A fresh log has one chunk
and appends go to it (amortised O(1), ~0.2 µs) until it holds
``_CHUNK_LIMIT`` events; then a new chunk starts. The limit is for the
garbage collector: it cannot see that vectors share their trie, so each new
vector an append makes is traversed in full (every event in it) by the
collections of the young generation, which happen every few dozen appends.
Without the limit an append to a million-event history cost ~50× more with
the collector on than off. ``take(k)`` (fork at an
earlier event) does not copy: it keeps the chunks before position ``k`` and
records that only a prefix of the last one is used, in O(log c) for ``c``
chunks. The next append to such a log starts a new chunk, except that a used
prefix of at most ``_COPY_LIMIT`` events is copied instead so a deep tree of
small forks does not fragment.

A chunk may also be any other immutable ``Sequence`` of events (the store
loads a stored history as one chunk whose events are validated from JSON on
first access); such a chunk is *sealed*: appends after it start a new one.

The trade-off of a prefix view: a log made by ``take(k)`` keeps the events
after ``k`` of the chunk it views alive (they are shared with the source, so
this costs nothing while the source lives). Indexing is O(log c + log n);
iteration chains the chunks in C and runs at list speed.

Every log also names its *line*: the sequence of events it is a prefix of.
An append that extends a log at the end of its line keeps the line; an
append to any other log (a fork appending after its source did, or a log
made by ``take``) starts a child line that records where it branched. So
two logs on one line at the same length hold the same events, and
:func:`cowconv.agent.messages.render` can cache work per line and reuse it for
every log that extends it (a fork's first step reuses its source's), in
O(1) instead of comparing events.

Event ids are indexed in an ``immutables.Map`` (a C HAMT, ~0.1 µs a set),
so ``index_of`` and ``up_to`` are O(log n). The index is shared with the logs
a log was taken from and may name events beyond a prefix: every lookup is
checked against the event actually at that position.
"""

from __future__ import annotations

import threading
import weakref
from abc import abstractmethod
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Any, Generic, TypeVar, overload

import immutables
from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema
from pyrsistent import PVector, pvector

from cowconv._exceptions import (
    EventIndexError,
    EventNotFoundError,
    InvalidTypeError,
    InvalidValueError,
)
from cowconv.core.events import AnyEvent, Event

__all__ = [
    "VECTOR_IMPLEMENTATION",
    "EventLog",
    "EventSequence",
    "PrefixCache",
    "event_position",
    "shared_prefix_length",
]

VECTOR_IMPLEMENTATION = "C extension" if type(pvector()).__module__ == "pvectorc" else "pure Python"
"""Which pyrsistent vector holds the histories.

pyrsistent 0.20 ships no C extension for Python 3.13+ (built from its sdist
there, the extension crashes), so histories fall back to its pure-Python vector:
the same behaviour, several times slower to index and iterate.
``cowconv --version`` and the benchmark report say which one is in use.
"""

_COPY_LIMIT = 32
_MAX_WALK = 64  # lines walked up before a lineage question falls back to the events
_CHUNK_LIMIT = 4096
_EMPTY_CHUNK: PVector[Event] = pvector()
_PVECTOR_TYPE = type(_EMPTY_CHUNK)
_EMPTY_IDS: immutables.Map[str, int] = immutables.Map()
# Claims of a line's tip are compare-and-set; appends hold it for two attribute accesses.
_CLAIM_LOCK = threading.Lock()


_Log = TypeVar("_Log", bound="EventLog")


class _Line:
    """A sequence of events that logs are prefixes of (see the module docstring).

    ``parent`` and ``at``: this line starts with the first ``at`` events of
    ``parent``. ``tip``: the length of the longest log made on this line so
    far; only a log of exactly that length may extend the line.
    """

    __slots__ = ("parent", "at", "tip", "__weakref__")

    def __init__(self, parent: _Line | None, at: int, tip: int) -> None:
        self.parent = parent
        self.at = at
        self.tip = tip

    def extended(self, length: int, count: int) -> _Line:
        """The line of a log of ``length + count`` events made from one of ``length`` here."""
        with _CLAIM_LOCK:
            if self.tip == length:
                self.tip = length + count
                return self
        return _Line(self, length, length + count)


class EventLog(Sequence[Event]):
    """An immutable, structurally shared sequence of events.

    >>> from cowconv import MessageEvent
    >>> log = EventLog([MessageEvent(source="user", role="user", content=t) for t in "abc"])
    >>> len(log), log[-1].text, [e.text for e in log[:2]]
    (3, 'c', ['a', 'b'])
    >>> log.index_of(log[1].id)
    1
    >>> log.take(1) == log[:1]
    True
    """

    __slots__ = ("_chunks", "_starts", "_len", "_ids", "_line", "_tail_id")

    _chunks: tuple[Sequence[Event], ...]
    _starts: tuple[int, ...]
    _len: int
    _ids: immutables.Map[str, int]
    _line: _Line
    _tail_id: str | None  # the last event's id when known without reading it (else None)

    def __init__(self, events: Iterable[Event] = ()) -> None:
        chunk = pvector(events)
        ids = _EMPTY_IDS
        if chunk:
            with ids.mutate() as mutable:
                for position, event in enumerate(chunk):
                    if not isinstance(event, Event):
                        raise InvalidTypeError(f"EventLog holds events, got {type(event).__name__}")
                    if event.id in mutable:
                        raise InvalidValueError(f"event id {event.id!r} appears twice")
                    mutable[event.id] = position
                ids = mutable.finish()
        layout = ((chunk,), (0,)) if chunk else ((), ())
        tail_id = chunk[-1].id if chunk else None
        self._set(layout, len(chunk), ids, _Line(None, 0, len(chunk)), tail_id)

    def _set(
        self,
        layout: tuple[tuple[Sequence[Event], ...], tuple[int, ...]],
        length: int,
        ids: immutables.Map[str, int],
        line: _Line,
        tail_id: str | None,
    ) -> None:
        self._chunks, self._starts = layout
        self._len = length
        self._ids = ids
        self._line = line
        self._tail_id = tail_id

    @classmethod
    def _make(
        cls,
        chunks: tuple[Sequence[Event], ...],
        starts: tuple[int, ...],
        length: int,
        ids: immutables.Map[str, int],
        line: _Line,
        tail_id: str | None,
    ) -> EventLog:
        log = cls.__new__(cls)
        log._set((chunks, starts), length, ids, line, tail_id)
        return log

    # -- reading -----------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> EventLog: ...

    def __getitem__(self, index: int | slice) -> Event | EventLog:
        """Index (negative too) in O(log n); ``log[:k]`` is ``take(k)``.

        Other slices build a new log from the selected events in O(k).
        """
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if start == 0 and step == 1:
                return self.take(stop)
            return EventLog(self[i] for i in range(start, stop, step))
        length = self._len
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise EventIndexError(f"event index out of range (history has {length} events)")
        starts = self._starts
        if len(starts) == 1:
            return self._chunks[0][index]
        chunk = bisect_right(starts, index) - 1
        return self._chunks[chunk][index - starts[chunk]]

    def __iter__(self) -> Iterator[Event]:
        chunks = self._chunks
        if len(chunks) <= 1 and (not chunks or len(chunks[0]) == self._len):
            return iter(chunks[0] if chunks else ())
        return chain.from_iterable(self._used_chunks())

    def __reversed__(self) -> Iterator[Event]:
        for position in range(self._len - 1, -1, -1):
            yield self[position]

    def retyped(self, cls: type[_Log]) -> _Log:
        """This history as an instance of ``cls``, a subclass of ``EventLog``, in O(1).

        The events and their structure are shared, nothing is copied; the
        subclass adds behaviour (``conversation.state.events`` records
        ``append`` on its conversation).

        >>> class Marked(EventLog):
        ...     __slots__ = ()
        >>> log = EventLog()
        >>> type(log.retyped(Marked)).__name__, log.retyped(Marked) == log
        ('Marked', True)
        """
        same = cls.__new__(cls)
        same._set((self._chunks, self._starts), self._len, self._ids, self._line, self._tail_id)
        return same

    # -- lineage -----------------------------------------------------------

    def _ancestry(self, max_walk: int = _MAX_WALK) -> Iterator[tuple[_Line, int]]:
        """This log's line and the lines it branched from, nearest first, each with how
        many of that line's first events this log holds (at most ``max_walk`` lines)."""
        line: _Line | None = self._line
        reach = self._len
        for _ in range(max_walk):
            if line is None:
                return
            yield line, reach
            reach = min(reach, line.at)
            line = line.parent

    def starts_with(self, prefix: EventLog) -> bool:
        """Whether this log's first ``len(prefix)`` events are ``prefix``'s, in O(log n).

        O(1) for a log made from ``prefix`` (or from a log it is a prefix of)
        by appends and ``take``: their lines connect, and two logs holding a
        line's first ``n`` events hold the same events. Otherwise (an
        unpickled copy, a log loaded from a store) the last event of
        ``prefix`` is compared with the event at its position here: the
        histories of one conversation tree that hold the same event at the
        same position hold the same events before it (event ids are unique).

        >>> from cowconv import MessageEvent
        >>> log = EventLog([MessageEvent(source="user", role="user", content=t) for t in "ab"])
        >>> log.starts_with(log.take(1)), log.take(1).starts_with(log), log.starts_with(EventLog())
        (True, False, True)
        """
        count = prefix._len
        if count > self._len:
            return False
        if count == 0 or self is prefix:
            return True
        target = prefix._line
        for line, reach in self._ancestry():
            if line is target:
                if count <= reach:
                    return True  # decided without reading an event (stored ones load lazily)
                break
        mine, theirs = prefix[count - 1], self[count - 1]
        return mine is theirs or mine == theirs

    def is_prefix_of(self, other: EventLog) -> bool:
        """Whether ``other`` starts with this log (``other.starts_with(self)``).

        >>> from cowconv import MessageEvent
        >>> log = EventLog([MessageEvent(source="user", role="user", content="a")])
        >>> EventLog().is_prefix_of(log), log.is_prefix_of(EventLog())
        (True, False)
        """
        return other.starts_with(self)

    def common_prefix_length(self, other: EventLog) -> int:
        """How many first events this log and ``other`` share.

        O(lines walked) when their lines connect (a fork and its source,
        branches of one tree built in this process); otherwise O(log n)
        comparisons of event ids by bisection, which holds for histories of
        one conversation tree (event ids are unique).

        >>> from cowconv import MessageEvent
        >>> base = EventLog([MessageEvent(source="user", role="user", content="a")])
        >>> left = base.append(MessageEvent(source="user", role="user", content="b"))
        >>> right = base.append(MessageEvent(source="user", role="user", content="c"))
        >>> left.common_prefix_length(right), left.common_prefix_length(left.take(2))
        (1, 2)
        """
        if self is other:
            return self._len
        mine = dict(self._ancestry())
        for line, reach in other._ancestry():
            known = mine.get(line)
            if known is not None:
                return min(known, reach)
        return shared_prefix_length(
            min(self._len, other._len), lambda position: self[position].id == other[position].id
        )

    def _used_chunks(self) -> Iterator[Iterable[Event]]:
        ends = (*self._starts[1:], self._len) if self._starts else ()
        for chunk, start, end in zip(self._chunks, self._starts, ends, strict=True):
            yield chunk if len(chunk) == end - start else islice(chunk, end - start)

    def __contains__(self, event: object) -> bool:
        """Whether this log holds ``event``, or an event with that id (a ``str``, as in OpenHands).

        >>> from cowconv import MessageEvent
        >>> event = MessageEvent(source="user", role="user", content="a")
        >>> log = EventLog([event])
        >>> event in log, event.id in log, "nope" in log
        (True, True, False)
        """
        if isinstance(event, str):
            return self.position_of(event) is not None
        if not isinstance(event, Event):
            return False
        position = self.position_of(event.id)
        return position is not None and self[position] == event

    def position_of_last(self, kind: str, start: int = 0) -> int | None:
        """The position of the last event of ``kind`` at or after ``start`` (``None``: none).

        A stored history answers without validating the events that cannot
        be of that kind (see :meth:`~cowconv.stores.lazy.LazyEvents.might_be`).

        >>> from cowconv import MessageEvent, SystemPromptEvent
        >>> log = EventLog([SystemPromptEvent(system_prompt="Be brief."),
        ...                 MessageEvent(source="user", role="user", content="hi")])
        >>> log.position_of_last("SystemPromptEvent"), log.position_of_last("PauseEvent")
        (0, None)
        """
        chunks, starts = self._chunks, self._starts
        for position in range(self._len - 1, max(start, 0) - 1, -1):
            index = bisect_right(starts, position) - 1
            chunk, offset = chunks[index], position - starts[index]
            might_be = getattr(chunk, "might_be", None)
            if might_be is not None and not might_be(offset, kind):
                continue
            if chunk[offset].kind == kind:
                return position
        return None

    def position_of(self, event_id: str) -> int | None:
        """The position of the event with this id, or ``None``, in O(log n).

        >>> EventLog().position_of("nope") is None
        True
        """
        position = self._ids.get(event_id)
        if position is None or position >= self._len or self[position].id != event_id:
            return None
        return position

    def index_of(self, event_id: str) -> int:
        """The position of the event with this id, in O(log n).

        Raises ``KeyError`` naming the id when no event of this log has it.

        >>> EventLog().index_of("nope")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.EventNotFoundError: no event with id 'nope' in this history
        """
        position = self.position_of(event_id)
        if position is None:
            raise EventNotFoundError(f"no event with id {event_id!r} in this history")
        return position

    def get(self, event_id: str) -> Event | None:
        """The event with this id, or ``None``."""
        position = self.position_of(event_id)
        return None if position is None else self[position]

    def get_index(self, event_id: str) -> int:
        """OpenHands' name for :meth:`index_of`."""
        return self.index_of(event_id)

    def get_id(self, index: int) -> str:
        """The id of the event at ``index`` (OpenHands' name).

        >>> from cowconv import MessageEvent
        >>> EventLog([MessageEvent(id="e1", source="user", role="user", content="a")]).get_id(-1)
        'e1'
        """
        return self[index].id

    def path_to_root(self, event_id: str | None, limit: int | None = None) -> list[Event]:
        """The events from the first to ``event_id``, root first (OpenHands' ``path_to_root``).

        In a log every event's parent is the event before it, so this is the
        log up to that event; ``None`` is the empty path, ``limit`` keeps the
        last ``limit`` events (O(limit)). ``EventNotFoundError`` (a
        ``ValueError``) if the log has no such event.

        >>> from cowconv import MessageEvent
        >>> log = EventLog([MessageEvent(id=i, source="user", role="user", content=i)
        ...                 for i in ("a", "b", "c")])
        >>> [e.id for e in log.path_to_root("b")], log.path_to_root(None)
        (['a', 'b'], [])
        >>> [e.id for e in log.path_to_root("c", limit=1)]
        ['c']
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidTypeError(f"limit must be an int or None, got {type(limit).__name__}")
        if limit is not None and limit < 0:
            raise InvalidValueError(f"limit must be at least 0, got {limit}")
        if event_id is None:
            return []
        end = self.index_of(event_id) + 1
        start = 0 if limit is None else max(end - limit, 0)
        return [self[position] for position in range(start, end)]

    @property
    def last_id(self) -> str | None:
        """The id of the newest event (``None`` for an empty log), read without the event when
        the log knows it (a stored history's last event is not loaded for it).

        >>> from cowconv import MessageEvent
        >>> EventLog([MessageEvent(id="e1", source="user", role="user", content="a")]).last_id
        'e1'
        """
        tail_id = self._tail_id
        if tail_id is None and self._len:
            return self[self._len - 1].id
        return tail_id

    @property
    def last(self) -> Event | None:
        """The newest event, or ``None`` for an empty log."""
        return self[self._len - 1] if self._len else None

    # -- new logs ------------------------------------------------------------

    def append(self, event: Event) -> EventLog:
        """A new log with ``event`` at the end; this log is unchanged.

        Event ids are unique within a log: appending an id already present is
        a ``ValueError``.
        """
        if not isinstance(event, Event):
            raise InvalidTypeError(f"EventLog holds events, got {type(event).__name__}")
        if self.position_of(event.id) is not None:
            raise InvalidValueError(f"event id {event.id!r} is already in this history")
        length = self._len
        chunks, starts = self._chunks, self._starts
        ids = self._ids.set(event.id, length)
        line = self._line.extended(length, 1)
        if not chunks:
            return EventLog._make((pvector((event,)),), (0,), 1, ids, line, event.id)
        last = chunks[-1]
        used = length - starts[-1]
        if len(last) == used and type(last) is _PVECTOR_TYPE:
            if used < _CHUNK_LIMIT:
                chunks = (*chunks[:-1], last.append(event))
                return EventLog._make(chunks, starts, length + 1, ids, line, event.id)
        elif used <= _COPY_LIMIT:
            copied = pvector(islice(last, used)).append(event)
            chunks = (*chunks[:-1], copied)
            return EventLog._make(chunks, starts, length + 1, ids, line, event.id)
        chunks, starts = (*chunks, pvector((event,))), (*starts, length)
        return EventLog._make(chunks, starts, length + 1, ids, line, event.id)

    def extend(self, events: Iterable[Event]) -> EventLog:
        """A new log with ``events`` appended in order."""
        log = self
        for event in events:
            log = log.append(event)
        return log

    def extend_sealed(self, chunk: Sequence[Event], event_ids: Iterable[str]) -> EventLog:
        """This log followed by ``chunk`` as one sealed chunk; no event of it is read.

        For trusted histories whose events load lazily (a store, an agent
        server): ``event_ids`` are the chunk's ids in order, unique and not
        in this log. Appends after a sealed chunk start a new one.

        >>> from cowconv import MessageEvent
        >>> event = MessageEvent(source="user", role="user", content="a")
        >>> EventLog().extend_sealed((event,), [event.id]).index_of(event.id)
        0
        """
        if not chunk:
            return self
        length = self._len
        tail_id: str | None = None
        with self._ids.mutate() as mutable:
            for offset, event_id in enumerate(event_ids):
                mutable[event_id] = length + offset
                tail_id = event_id
            ids = mutable.finish()
        line = self._line.extended(length, len(chunk))
        layout = ((*self._chunks, chunk), (*self._starts, length))
        return EventLog._make(*layout, length + len(chunk), ids, line, tail_id)

    def take(self, count: int) -> EventLog:
        """The first ``count`` events as a new log, sharing structure: O(log c).

        >>> EventLog().take(0) == EventLog()
        True
        """
        if count < 0:
            raise InvalidValueError(f"take() needs a count >= 0, got {count}")
        if count >= self._len:
            return self
        if count == 0:
            return _EMPTY
        keep = bisect_right(self._starts, count - 1)
        # Same line, shorter: an append to it starts a child line (the tip is longer). Its last
        # id is left to last_id (one read when asked), so fork(from_event_id=...) pays nothing.
        return EventLog._make(
            self._chunks[:keep], self._starts[:keep], count, self._ids, self._line, None
        )

    def up_to(self, event_id: str) -> EventLog:
        """The events up to and including the one with ``event_id``.

        ``KeyError`` when no event of this log has that id.
        """
        return self.take(self.index_of(event_id) + 1)

    # -- value semantics -----------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, EventLog):
            return NotImplemented
        if self._len != other._len:
            return False
        if self._chunks == other._chunks and self._starts == other._starts:
            return True
        return all(a is b or a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"EventLog(<{self._len} events>)"

    def __copy__(self) -> EventLog:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> EventLog:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # The used part of each chunk, as a tuple: a worker that unpickles a long history gets
        # the same chunk layout back (appends stay O(1) with the collector on), and a view
        # made by take(k) ships only its k events.
        return (_restore, (tuple(tuple(chunk) for chunk in self._used_chunks()),))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        events_schema = handler.generate_schema(list[AnyEvent])
        from_events = core_schema.no_info_after_validator_function(EventLog, events_schema)
        return core_schema.json_or_python_schema(
            json_schema=from_events,
            python_schema=core_schema.union_schema(
                [core_schema.is_instance_schema(EventLog), from_events]
            ),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda log, info: [event.model_dump(mode=info.mode) for event in log],
                info_arg=True,
            ),
        )


_EMPTY = EventLog()


def event_position(index: object, length: int) -> int:
    """The position ``index`` names among ``length`` events (negative counts from the end).

    The one check every position-indexed event view makes: an ``int`` (not a
    ``bool``) in range, or a clear error.

    >>> event_position(-1, 3)
    2
    >>> event_position(3, 3)
    Traceback (most recent call last):
    cowconv._exceptions.EventIndexError: event position 3 out of range for 3 events
    """
    if isinstance(index, bool) or not isinstance(index, int):
        raise InvalidTypeError(f"event positions are ints, got {type(index).__name__}")
    position = index + length if index < 0 else index
    if not 0 <= position < length:
        raise EventIndexError(f"event position {index} out of range for {length} events")
    return position


class EventSequence(Sequence[Event]):
    """A read-only sequence of events that a subclass reads one position at a time.

    A subclass gives ``__len__`` and ``_event_at(position)`` (``0 <= position <
    len(self)``, already checked); this class gives indexing with negative
    positions and slices (a list) and iteration, the same for every view.

    >>> from cowconv import MessageEvent
    >>> class Repeat(EventSequence):
    ...     def __init__(self, event: Event, times: int) -> None:
    ...         self.event, self.times = event, times
    ...     def __len__(self) -> int:
    ...         return self.times
    ...     def _event_at(self, position: int) -> Event:
    ...         return self.event
    >>> view = Repeat(MessageEvent(source="user", role="user", content="hi"), 3)
    >>> view[-1].text, len(view[1:]), len(list(view))
    ('hi', 2, 3)
    """

    __slots__ = ()

    @abstractmethod
    def _event_at(self, position: int) -> Event:
        """The event at ``position``, which is in range."""

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return [self._event_at(p) for p in range(*index.indices(len(self)))]
        return self._event_at(event_position(index, len(self)))

    def __iter__(self) -> Iterator[Event]:
        for position in range(len(self)):
            yield self._event_at(position)


def shared_prefix_length(length: int, same_at: Callable[[int], bool]) -> int:
    """The largest ``k <= length`` with ``same_at(k - 1)``, by bisection: O(log n) calls.

    For two histories of one conversation tree, ``same_at(i)`` (the events
    at position ``i`` have the same id) holds exactly for the positions of
    their common prefix, so this is its length. Stores use it on stored ids.

    >>> shared_prefix_length(10, lambda position: position < 4)
    4
    """
    low, high = 0, length
    if high and same_at(high - 1):
        return high  # the usual case (one is a prefix of the other), decided with one call
    while low < high:
        middle = (low + high + 1) // 2
        if same_at(middle - 1):
            low = middle
        else:
            high = middle - 1
    return low


T = TypeVar("T")


class PrefixCache(Generic[T]):
    """Values computed for prefixes of histories, found again for any log that extends one.

    Values are kept per *line* of an :class:`~cowconv.EventLog` (see
    ``cowconv.core.history``): a value kept for a log of length ``n`` on a line
    holds for every log with that line and at least ``n`` events, and for
    the logs of child lines that branched at ``n`` or later. A line's
    entries go when the line does; each line keeps its ``per_line`` most
    recently used values.

    >>> from cowconv import EventLog, MessageEvent
    >>> counts: PrefixCache[int] = PrefixCache()
    >>> log = EventLog([MessageEvent(source="user", role="user", content="a")])
    >>> counts.find(log)
    (0, None)
    >>> counts.keep(log, 1)
    >>> counts.find(log.append(MessageEvent(source="user", role="user", content="b")))
    (1, 1)
    """

    def __init__(self, per_line: int = 16, max_walk: int = _MAX_WALK) -> None:
        self._per_line = per_line
        self._max_walk = max_walk
        self._kept: weakref.WeakKeyDictionary[_Line, dict[int, T]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def find(self, log: EventLog) -> tuple[int, T | None]:
        """The longest kept prefix of ``log``: (its length, its value), or (0, None)."""
        with self._lock:
            for line, limit in log._ancestry(self._max_walk):
                kept = self._kept.get(line)
                if kept:
                    best = max((n for n in kept if n <= limit), default=None)
                    if best is not None:
                        value = kept.pop(best)
                        kept[best] = value  # most recently used last
                        return best, value
        return 0, None

    def keep(self, log: EventLog, value: T) -> None:
        """Remember ``value`` for ``log`` (all its events)."""
        line, length = log._line, log._len
        with self._lock:
            kept = self._kept.get(line)
            if kept is None:
                kept = self._kept[line] = {}
            kept.pop(length, None)
            kept[length] = value
            while len(kept) > self._per_line:
                del kept[next(iter(kept))]


def _restore(chunks: tuple[tuple[Event, ...], ...]) -> EventLog:
    """An unpickled log: one vector per pickled chunk, ids indexed again."""
    vectors = tuple(pvector(chunk) for chunk in chunks if chunk)
    starts = []
    length = 0
    with _EMPTY_IDS.mutate() as mutable:
        for chunk in vectors:
            starts.append(length)
            for event in chunk:
                if event.id in mutable:
                    raise InvalidValueError(f"event id {event.id!r} appears twice")
                mutable[event.id] = length
                length += 1
        ids = mutable.finish()
    if not vectors:
        return _EMPTY
    # A line of its own: in this process nothing else is known to hold these events.
    tail_id = vectors[-1][-1].id
    return EventLog._make(vectors, tuple(starts), length, ids, _Line(None, 0, length), tail_id)
