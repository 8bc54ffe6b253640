"""OpenHands' on-disk event log: one JSON file per event, in OpenHands' SDK's layout.

A conversation of OpenHands' SDK keeps its events as files named
``event-<5-digit index>-<event id>.json`` in an ``events`` directory of a
:class:`~cowconv.io.FileStore`. :class:`FileEventLog` (OpenHands' name:
``EventLog``, importable as such from this module) reads and appends such a
log, with OpenHands' tree rules: an event's parent is its ``parent_id``,
:data:`~cowconv.ROOT_PARENT_ID` marks a root, and an event written before
OpenHands' SDK had a tree (no ``parent_id``, not first) hangs under the event
stored before it. It is how an OpenHands persistence directory is read into
cowconv (``cowconv.EventLog(log.path_to_root(leaf))``), and what code
written against ``openhands.sdk.conversation.event_store`` uses.

Unlike :class:`cowconv.EventLog` (a conversation's immutable, shareable
history), this log changes in place: ``append`` writes a file.

>>> from cowconv import MessageEvent
>>> from cowconv.io import InMemoryFileStore
>>> log = FileEventLog(InMemoryFileStore())
>>> for event_id, parent in (("a", None), ("b", "a"), ("c", "a")):
...     _ = log.append(MessageEvent(id=event_id, parent_id=parent, content=event_id))
>>> [e.id for e in log.path_to_root("c")], len(log), "b" in log
(['a', 'c'], 3, True)
>>> FileEventLog(log.file_store).get_id(2)  # another reader finds the files
'c'
"""

from __future__ import annotations

import re

from cowconv._exceptions import (
    EventNotFoundError,
    InvalidTypeError,
    InvalidValueError,
)
from cowconv.core.events import ROOT_PARENT_ID, Event
from cowconv.core.history import EventSequence
from cowconv.io import FileStore

__all__ = [
    "EVENTS_DIR",
    "EVENT_FILE_PATTERN",
    "EventLog",
    "FileEventLog",
    "ROOT_PARENT_ID",
]

EVENTS_DIR = "events"
"""The directory of a conversation's event files (OpenHands' SDK's name)."""
EVENT_FILE_PATTERN = "event-{idx:05d}-{event_id}.json"
"""An event file's name: its position (5 digits or more) and its id."""
_EVENT_FILE = re.compile(r"^event-(?P<idx>\d{5,})-(?P<event_id>.+)\.json$")


class FileEventLog(EventSequence):
    """Events stored one file each in ``file_store`` under ``dir_path``; appends write a file.

    Reading validates an event from its file once and keeps it
    (``_event_cache``, by position). ``append`` refuses an id the log has
    and a ``parent_id`` naming an event it does not have (``ValueError``);
    a root may say ``None`` or :data:`~cowconv.ROOT_PARENT_ID`.

    >>> from cowconv import MessageEvent
    >>> from cowconv.io import InMemoryFileStore
    >>> log = FileEventLog(InMemoryFileStore())
    >>> log.append(MessageEvent(id="a", content="hi")), log.file_store.list("events")
    (0, ['events/event-00000-a.json'])
    """

    def __init__(self, file_store: FileStore, dir_path: str = EVENTS_DIR) -> None:
        self.file_store = file_store
        self.dir_path = dir_path.rstrip("/")
        self._event_cache: dict[int, Event] = {}
        self._ids: list[str] = []
        self._positions: dict[str, int] = {}
        self._scan()

    def _scan(self) -> None:
        found: dict[int, str] = {}
        for path in self.file_store.list(self.dir_path):
            match = _EVENT_FILE.match(path.rsplit("/", 1)[-1])
            if match is not None:
                found[int(match["idx"])] = match["event_id"]
        if sorted(found) != list(range(len(found))):
            missing = sorted(set(range(max(found, default=-1) + 1)) - set(found))
            raise InvalidValueError(
                f"the event files under {self.dir_path!r} skip positions {missing[:5]}"
            )
        self._ids = [found[position] for position in range(len(found))]
        self._positions = {event_id: position for position, event_id in enumerate(self._ids)}

    def _path(self, position: int) -> str:
        name = EVENT_FILE_PATTERN.format(idx=position, event_id=self._ids[position])
        return f"{self.dir_path}/{name}"

    # -- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    def _event_at(self, position: int) -> Event:
        cached = self._event_cache.get(position)
        if cached is None:
            cached = Event.model_validate_json(self.file_store.read(self._path(position)))
            self._event_cache[position] = cached
        return cached

    def __contains__(self, item: object) -> bool:
        """Whether the log has this event, or an event with this id (a ``str``)."""
        if isinstance(item, str):
            return item in self._positions
        if isinstance(item, Event):
            return item.id in self._positions
        return False

    def get_index(self, event_id: str) -> int:
        """The position of the event with this id; ``EventNotFoundError`` (a ``KeyError``)."""
        try:
            return self._positions[event_id]
        except KeyError:
            raise EventNotFoundError(f"no event with id {event_id!r} in this log") from None

    def get_id(self, index: int) -> str:
        """The id of the event at ``index`` (read from its file name, not its file)."""
        return self._ids[index]

    def _effective_parent_id(self, idx: int, event: Event) -> str | None:
        """The parent of ``event`` at position ``idx`` under OpenHands' rules (``None``: a root).

        A named parent wins; :data:`~cowconv.ROOT_PARENT_ID` is a root; an
        event without one is the root if first, else the child of the event
        stored before it (a log written before OpenHands' SDK had a tree).
        """
        parent = event.parent_id
        if parent == ROOT_PARENT_ID:
            return None
        if parent is not None:
            return parent
        return None if idx == 0 else self.get_id(idx - 1)

    def path_to_root(self, leaf_id: str | None, limit: int | None = None) -> list[Event]:
        """The events from the root down to ``leaf_id``, root first (``None``: none).

        ``limit`` keeps the last ``limit`` of them. ``EventNotFoundError``
        (a ``KeyError``) for an unknown leaf; a ``ValueError`` if the
        parents loop (a corrupted log).
        """
        path: list[Event] = []
        seen: set[str] = set()
        current = leaf_id
        while current is not None and (limit is None or len(path) < limit):
            if current in seen:
                raise InvalidValueError(f"Cycle in event tree at event {current!r}")
            seen.add(current)
            position = self.get_index(current)
            event = self[position]
            path.append(event)
            current = self._effective_parent_id(position, event)
        path.reverse()
        return path

    # -- writing -------------------------------------------------------------

    def append(self, event: Event) -> int:
        """Write ``event`` as the next file; its position.

        >>> from cowconv import MessageEvent
        >>> from cowconv.io import InMemoryFileStore
        >>> log = FileEventLog(InMemoryFileStore())
        >>> log.append(MessageEvent(id="a", parent_id="nope", content="x"))
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: Parent event 'nope' does not exist in this log
        """
        if not isinstance(event, Event):
            raise InvalidTypeError(f"an event log holds events, got {type(event).__name__}")
        with self.file_store.lock(f"{self.dir_path}/.eventlog.lock"):
            self._scan()  # another writer may have appended
            if event.id in self._positions:
                raise InvalidValueError(f"an event with id {event.id!r} is already in this log")
            parent = event.parent_id
            if parent not in (None, ROOT_PARENT_ID) and parent not in self._positions:
                raise InvalidValueError(f"Parent event {parent!r} does not exist in this log")
            position = len(self._ids)
            self._ids.append(event.id)
            self._positions[event.id] = position
            try:
                self.file_store.write(self._path(position), event.model_dump_json())
            except BaseException:
                self._ids.pop()
                del self._positions[event.id]
                raise
            self._event_cache[position] = event
        return position


EventLog = FileEventLog
"""OpenHands' name for :class:`FileEventLog` in this module (``cowconv.EventLog`` is another class:
a conversation's immutable history)."""
