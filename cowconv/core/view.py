"""``View``: what the agent sees of its active branch, as OpenHands' SDK defines it.

``state.view`` is the events of the active branch the model is shown, in
order, after every :class:`~cowconv.Condensation` on the branch is applied
the way OpenHands' ``View.from_events`` applies it: the events a
condensation forgets leave the view, and its summary, if it has one and a
``summary_offset``, enters it at that offset as a
:class:`CondensationSummaryEvent`. Events the model never sees (a
:class:`~cowconv.PauseEvent`, an event kind of your own that is not an
:class:`~cowconv.LLMConvertibleEvent`) are left out. Abandoned branches
never appear: the view is built from ``state.branch``, the active branch.

>>> from cowconv import Condensation, EventLog, MessageEvent, PauseEvent
>>> m0, m1 = (MessageEvent(id=f"m{i}", role="user", content=f"m{i}") for i in range(2))
>>> condensation = Condensation(id="c", forgotten_event_ids=["m0"], summary="said m0",
...                             summary_offset=0)
>>> view = view_of(EventLog([m0, PauseEvent(), m1, condensation]))
>>> [event.id for event in view.events], view[0].summary
(['c-summary', 'm1'], 'said m0')

A view is immutable (its ``events`` is a tuple) and computed incrementally:
a history that extends one whose view was computed before (the same branch
a step later, or a fork's first step after its source's) applies only the
events since.
"""

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from pyrsistent import PVector, pvector

from cowconv.core.events import (
    ActionEvent,
    AgentErrorEvent,
    Condensation,
    Event,
    LLMConvertibleEvent,
    Message,
    ObservationEvent,
    SourceType,
    SystemPromptEvent,
    TextContent,
)
from cowconv.core.history import EventLog, PrefixCache

__all__ = ["CondensationSummaryEvent", "View", "view_of"]


class CondensationSummaryEvent(LLMConvertibleEvent):
    """The summary of a :class:`~cowconv.Condensation`, as it stands in a view (OpenHands' class).

    It is never recorded in a history: a view makes it from the condensation,
    with the id ``"<condensation id>-summary"``.

    >>> CondensationSummaryEvent(summary="Listed files.").to_llm_message().role
    'user'
    """

    summary: str
    source: SourceType = "environment"

    def to_llm_message(self) -> Message:
        """A user message holding the summary."""
        return Message(role="user", content=(TextContent(text=self.summary),))


# The kinds the model is shown. OpenHands makes them all LLMConvertibleEvent subclasses;
# cowconv's agent renders these (cowconv.agent.messages), whatever their base class.
_SEEN: tuple[type[Event], ...] = (
    LLMConvertibleEvent,
    SystemPromptEvent,
    ActionEvent,
    ObservationEvent,
    AgentErrorEvent,
)
_REQUEST_KIND = "CondensationRequest"  # cowconv.CondensationRequest, OpenHands' event


class View:
    """The events the agent sees, after condensation (OpenHands' ``View``; read only).

    ``len(view)``, ``view[i]`` and ``view[i:j]`` read ``view.events``.
    ``unhandled_condensation_request`` is whether the branch holds a
    :class:`~cowconv.CondensationRequest` no condensation answered yet (the
    next step of a run then condenses).

    >>> View().events, len(View()), View().unhandled_condensation_request
    ((), 0, False)
    """

    __slots__ = ("_events", "_unhandled", "_tuple")

    def __init__(
        self, events: Iterable[Event] = (), unhandled_condensation_request: bool = False
    ) -> None:
        self._events: PVector[Event] = pvector(events)
        self._unhandled = unhandled_condensation_request
        self._tuple: tuple[Event, ...] | None = None

    @property
    def events(self) -> tuple[Event, ...]:
        """The events the model sees, in order (built on first read, then kept)."""
        built = self._tuple
        if built is None:
            built = self._tuple = tuple(self._events)
        return built

    @property
    def unhandled_condensation_request(self) -> bool:
        """Whether a condensation was requested and none recorded since."""
        return self._unhandled

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    @overload
    def __getitem__(self, key: int) -> Event: ...

    @overload
    def __getitem__(self, key: slice) -> list[Event]: ...

    def __getitem__(self, key: int | slice) -> Event | list[Event]:
        if isinstance(key, slice):
            return list(self._events[key])
        return self._events[key]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, View):
            return NotImplemented
        return self._events == other._events and self._unhandled == other._unhandled

    def __repr__(self) -> str:
        return f"View(<{len(self._events)} events>)"

    def extended(self, events: Iterable[Event]) -> "View":
        """This view with the next events of the history applied (a new view).

        >>> from cowconv import MessageEvent
        >>> len(View().extended([MessageEvent(role="user", content="hi")]))
        1
        """
        seen = self._events
        unhandled = self._unhandled
        for event in events:
            if isinstance(event, Condensation):
                seen = _condensed(seen, event)
                unhandled = False
            elif event.kind == _REQUEST_KIND:
                unhandled = True
            elif isinstance(event, _SEEN):
                seen = seen.append(event)
        view = View.__new__(View)
        view._events = seen
        view._unhandled = unhandled
        view._tuple = None
        return view

    @staticmethod
    def from_events(events: Sequence[Event]) -> "View":
        """The view of a branch given as its events (OpenHands' constructor).

        >>> from cowconv import MessageEvent, PauseEvent
        >>> len(View.from_events([MessageEvent(role="user", content="hi"), PauseEvent()]))
        1
        """
        return view_of(events)


def _condensed(seen: PVector[Event], condensation: Condensation) -> PVector[Event]:
    """OpenHands' ``Condensation.apply``: drop the forgotten events, insert the summary."""
    forgotten = set(condensation.forgotten_event_ids)
    kept = [event for event in seen if event.id not in forgotten]
    if condensation.summary is not None and condensation.summary_offset is not None:
        summary = CondensationSummaryEvent(
            id=f"{condensation.id}-summary",
            summary=condensation.summary,
            source=condensation.source,
        )
        kept.insert(condensation.summary_offset, summary)
    return pvector(kept)


_EMPTY_VIEW = View()
_views: PrefixCache[View] = PrefixCache()


def view_of(events: Sequence[Event]) -> View:
    """The :class:`View` of a branch; for an :class:`~cowconv.EventLog`, incremental and cached.

    Continues from the view of the longest prefix seen before (this
    branch's, or its source's before a fork) and applies only the events
    after it: O(events since) plus the cost of any condensation among them.

    >>> from cowconv import EventLog, MessageEvent
    >>> log = EventLog([MessageEvent(role="user", content="hi")])
    >>> view_of(log) is view_of(log)
    True
    """
    if not isinstance(events, EventLog):
        return _EMPTY_VIEW.extended(events)
    known, found = _views.find(events)
    start = _EMPTY_VIEW if found is None else found
    length = len(events)
    if known == length:
        return start
    view = start.extended(events[position] for position in range(known, length))
    _views.keep(events, view)
    return view
