"""``LazyEvents``: stored events that become event objects on first access.

Validating JSON into frozen pydantic events costs ~5-15 µs an event, so a
100,000-event history would take over a second to open. The store instead
hands :class:`~cowconv.EventLog` one sealed chunk of raw JSON per stored
segment; an event is validated when it is first read and kept, and its JSON is dropped.

>>> from cowconv import EventLog, MessageEvent
>>> stored = [MessageEvent(source="user", role="user", content=t) for t in "ab"]
>>> chunk = LazyEvents([event.model_dump_json() for event in stored])
>>> log = EventLog().extend_sealed(chunk, [event.id for event in stored])
>>> chunk.validated, log[1] == stored[1], chunk.validated
(0, True, 1)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast, overload

from pydantic import ValidationError

from cowconv._exceptions import CorruptStoreError
from cowconv.core.events import Event, legacy_kind_names

__all__ = ["LazyEvents"]


class LazyEvents(Sequence[Event]):
    """An immutable sequence of events held as JSON until each is first read.

    Reading is thread-safe: two threads may validate the same event at once
    and keep equal objects; either is a correct answer.
    """

    __slots__ = ("_raw", "_events")

    def __init__(self, raw: Sequence[str]) -> None:
        self._raw: list[str | None] = list(raw)
        self._events: list[Event | None] = [None] * len(self._raw)

    def __len__(self) -> int:
        return len(self._events)

    @property
    def validated(self) -> int:
        """How many events have been validated so far."""
        return sum(event is not None for event in self._events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        event = self._events[index]
        if event is None:
            event = self._validate(index % len(self._events))
        return event

    def __iter__(self) -> Iterator[Event]:
        # One at a time, so islice(chunk, 3) validates three events.
        events = self._events
        for position, event in enumerate(events):
            yield self._validate(position) if event is None else event

    def might_be(self, index: int, kind: str) -> bool:
        """Whether event ``index`` may be of ``kind``, judged without validating it.

        ``False`` is certain (its JSON never names that kind); ``True`` asks
        the reader to validate the event and look.

        >>> from cowconv import MessageEvent
        >>> hi = MessageEvent(source="user", role="user", content="hi")
        >>> chunk = LazyEvents([hi.model_dump_json()])
        >>> chunk.might_be(0, "SystemPromptEvent"), chunk.might_be(0, "MessageEvent")
        (False, True)
        >>> chunk.validated
        0
        """
        event = self._events[index]
        if event is not None:
            return event.kind == kind
        raw = self._raw[index]
        # cowconv 0.1 wrote other kind names ("system_prompt"): either may be there.
        return raw is None or any(f'"{name}"' in raw for name in legacy_kind_names(kind))

    def _validate(self, position: int) -> Event:
        raw = self._raw[position]
        if raw is None:  # another thread validated it meanwhile (it set the event first)
            return cast(Event, self._events[position])
        try:
            event: Event = Event.model_validate_json(raw)
        except (ValidationError, ValueError) as error:
            raise CorruptStoreError(f"a stored event is damaged: {error}") from error
        self._events[position] = event
        self._raw[position] = None
        return event
