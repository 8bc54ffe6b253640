"""The conversation tree: every branch a conversation had, and the one it is on.

A conversation's ``state.branch`` is its *active branch*: the history the
agent sees and the next message extends; ``state.events`` is every event of
the tree, abandoned branches included (an :class:`EventTree`, or the active
branch itself while the conversation has only one). Every event appended to it gets
its ``parent_id`` (:func:`extend_active`): the id of the event before it on
the branch, ``None`` for the first event of a conversation, and
:data:`~cowconv.ROOT_PARENT_ID` for a new root started after
``navigate_to(None)``, as in OpenHands' SDK. :func:`navigate` moves the active
branch back to an earlier event (or to an event of another branch); the
branch it leaves is kept in ``state.other_branches`` unless it is part of
the new one. Branches share their common prefix, so navigating copies
nothing: O(b log n) for ``b`` branches of at most ``n`` events (each branch
is compared once, by lineage or by one event).

>>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
>>> state = ConversationState(
...     id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=Workspace(working_dir=".")
... )
>>> root, a1, b1 = (MessageEvent(source="user", role="user", content=t) for t in ("r", "a", "b"))
>>> state = state._replace(branch=extend_active(state, [root, a1]))
>>> state = navigate(state, root.id)  # back to the root: the next event starts a new branch
>>> state = state._replace(branch=extend_active(state, [b1]))
>>> [[e.text for e in branch] for branch in branches(state)]
[['r', 'a'], ['r', 'b']]
>>> [e.parent_id == root.id for e in state.branch[1:]], state.branch[0].parent_id is None
([True], True)
>>> [e.text for e in history_to(state, a1.id)]  # what fork(from_event_id=a1.id) takes
['r', 'a']
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cowconv._exceptions import (
    EventNotFoundError,
    InvalidTypeError,
    InvalidValueError,
)
from cowconv.core.events import ROOT_PARENT_ID, Event
from cowconv.core.history import EventLog, EventSequence

if TYPE_CHECKING:
    from cowconv.core.state import ConversationState

__all__ = [
    "EventTree",
    "active_branch",
    "branches",
    "extend_active",
    "head_is_empty",
    "history_to",
    "navigate",
    "next_parent_id",
    "recorded",
]

_EMPTY = EventLog()
_E = TypeVar("_E", bound=Event)


def history_to(state: ConversationState, event_id: str) -> EventLog:
    """The history up to and including ``event_id``, on whichever branch holds it.

    The active branch is searched first, then the other branches in order.
    ``fork(from_event_id=...)`` and :func:`navigate` both use this, so "the
    history up to an event" means the same for both. ``KeyError`` if no
    branch has the event.

    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> state = ConversationState(
    ...     id="c1", agent=Agent(llm=LLM(model="m")), workspace=Workspace(working_dir=".")
    ... )
    >>> history_to(state, "nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.EventNotFoundError: unknown event_id 'nope': no branch of ... 'c1' has it
    """
    for branch in (state.branch, *state.other_branches):
        event = branch.get(event_id)
        if event is not None:
            return branch.up_to(event_id)
    raise EventNotFoundError(
        f"unknown event_id {event_id!r}: no branch of conversation {state.id!r} has it"
    )


def navigate(state: ConversationState, event_id: str | None) -> ConversationState:
    """``state`` with its active branch ending at ``event_id`` (``None``: empty); O(b log n).

    The branch left behind joins ``other_branches`` unless the new active
    branch or another kept branch contains it; a kept branch the new active
    branch now contains is dropped from ``other_branches`` (its events are
    active again). Navigating to where the state already is returns it
    unchanged. ``KeyError`` if no branch has the event.
    """
    target = _EMPTY if event_id is None else history_to(state, event_id)
    current = state.branch
    if len(target) == len(current) and current.starts_with(target):
        return state
    others = list(state.other_branches)
    if not target.starts_with(current) and not any(b.starts_with(current) for b in others):
        others.append(current)
    kept = tuple(branch for branch in others if not target.starts_with(branch))
    return state._replace(branch=target, other_branches=kept)


def branches(state: ConversationState) -> tuple[EventLog, ...]:
    """Every branch of the conversation, each up to its leaf; the active one last.

    When the active branch was moved back and nothing was added yet, it is
    part of another branch and is not listed on its own.
    """
    others = state.other_branches
    if any(branch.starts_with(state.branch) for branch in others):
        return others
    return (*others, state.branch)


def head_is_empty(state: ConversationState) -> bool:
    """Whether the active branch was emptied by ``navigate_to(None)`` (OpenHands' field).

    ``True`` when the active branch has no event but the conversation has
    (on another branch): the next event starts a new root. A conversation
    that never had an event is not "emptied": ``False``.

    >>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
    >>> state = ConversationState(
    ...     id="c1", agent=Agent(llm=LLM(model="m")), workspace=Workspace(working_dir=".")
    ... )
    >>> head_is_empty(state)
    False
    >>> state = state._replace(branch=extend_active(state, [MessageEvent(content="a")]))
    >>> head_is_empty(state), head_is_empty(navigate(state, None))
    (False, True)
    """
    return not state.branch and bool(state.other_branches)


def next_parent_id(state: ConversationState) -> str | None:
    """The ``parent_id`` the next event appended to ``state`` gets.

    The last event of the active branch; with an empty active branch,
    ``None`` for a conversation without events and
    :data:`~cowconv.ROOT_PARENT_ID` after ``navigate_to(None)`` (a new root
    beside the other branches, as OpenHands' SDK stamps it).
    """
    last_id = state.branch.last_id  # a stored history's last event is not loaded for it
    if last_id is not None:
        return last_id
    return ROOT_PARENT_ID if state.other_branches else None


def _is_root_parent(parent_id: str | None) -> bool:
    return parent_id is None or parent_id == ROOT_PARENT_ID


def extend_active(state: ConversationState, events: Iterable[Event]) -> EventLog:
    """The active branch of ``state`` with ``events`` appended, each stamped with its parent.

    An event without ``parent_id`` gets the previous event's id
    (:func:`next_parent_id` for the first); the stamped event is a copy
    (``model_copy``), with the same id and timestamp. An event that already
    names a parent must name that one (a root may say ``None`` or
    :data:`~cowconv.ROOT_PARENT_ID`): anything else would put it on another
    branch than the one it is appended to, an ``InvalidValueError`` naming
    the parent it needs (``navigate_to`` the parent first). Every append of
    cowconv goes through here, so on every branch each event's parent is the
    event before it.

    >>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
    >>> state = ConversationState(
    ...     id="c1", agent=Agent(llm=LLM(model="m")), workspace=Workspace(working_dir=".")
    ... )
    >>> first = MessageEvent(id="e1", role="user", content="a")
    >>> state = state._replace(branch=extend_active(state, [first]))
    >>> second = extend_active(state, [MessageEvent(role="user", content="b")])[1]
    >>> state.events[0] is first, second.parent_id
    (True, 'e1')
    >>> bad = MessageEvent(role="user", content="b", parent_id="e7")
    >>> extend_active(state, [bad])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: event ... parent_id 'e7', but it would follow 'e1' ...
    """
    log = state.branch
    parent = next_parent_id(state)
    for event in events:
        if not isinstance(event, Event):
            raise InvalidTypeError(f"EventLog holds events, got {type(event).__name__}")
        named = event.parent_id
        if named is None:
            if parent is not None:
                event = event.model_copy(update={"parent_id": parent})
        elif named != parent and not (_is_root_parent(parent) and _is_root_parent(named)):
            where = "the start of the conversation" if _is_root_parent(parent) else repr(parent)
            raise InvalidValueError(
                f"event {event.id!r} names parent_id {named!r}, but it would follow {where} "
                f"on the active branch; navigate_to({named!r}) first to append after that event"
            )
        log = log.append(event)
        parent = event.id
    return log


def recorded(state: ConversationState, event: _E) -> _E:
    """``event`` as ``state`` holds it: stamped with its ``parent_id`` when it was appended.

    Looked up by id on the active branch, then on the other branches; an
    event ``state`` does not hold is returned unchanged.

    >>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
    >>> state = ConversationState(
    ...     id="c1", agent=Agent(llm=LLM(model="m")), workspace=Workspace(working_dir=".")
    ... )
    >>> first, second = MessageEvent(content="a"), MessageEvent(content="b")
    >>> state = state._replace(branch=extend_active(state, [first, second]))
    >>> recorded(state, second).parent_id == first.id, second.parent_id
    (True, None)
    """
    for branch in (state.branch, *state.other_branches):
        found = branch.get(event.id)
        if found is not None and isinstance(found, type(event)):
            return found
    return event


def active_branch(state: ConversationState, limit: int | None = None) -> list[Event]:
    """The events of the active branch, root first; with ``limit``, only its last ``limit``.

    OpenHands' ``state.active_branch(limit=...)``: O(``limit``), not O(n).

    >>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
    >>> state = ConversationState(
    ...     id="c1", agent=Agent(llm=LLM(model="m")), workspace=Workspace(working_dir=".")
    ... )
    >>> state = state._replace(branch=extend_active(
    ...     state, [MessageEvent(role="user", content=t) for t in "abc"]))
    >>> [e.text for e in active_branch(state)], [e.text for e in active_branch(state, limit=1)]
    (['a', 'b', 'c'], ['c'])
    """
    events = state.branch
    if limit is None:
        return list(events)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidTypeError(f"limit must be an int or None, got {type(limit).__name__}")
    if limit < 0:
        raise InvalidValueError(f"limit must be at least 0, got {limit}")
    length = len(events)
    return [events[position] for position in range(max(length - limit, 0), length)]


class EventTree(EventSequence):
    """Every event of a conversation tree once: what ``state.events`` is after a branch was left.

    OpenHands' SDK keeps the events of branches that ``navigate_to`` left in
    ``state.events``; so does cowconv. The tree is a read-only view over the
    branches a snapshot already holds (their shared prefixes are not
    repeated), built in O(b² log n) for ``b`` branches and copying nothing.
    Branch by branch (the abandoned ones in the order they were left, the
    active one last), each event comes once, at its first branch: the order
    OpenHands' SDK stores them in until a conversation goes back to a branch
    it left and extends it (then that branch's new events come after the
    branches left since, not at the end). Events are found by id on any
    branch (``in``, :meth:`get`, :meth:`path_to_root`).

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> first = conversation.send_message("one")
    >>> second = conversation.send_message("two")
    >>> conversation.navigate_to(first.id)
    >>> third = conversation.send_message("three")
    >>> events = conversation.state.events
    >>> [e.text for e in events[1:]], second.id in events
    (['one', 'two', 'three'], True)
    >>> [e.text for e in events.path_to_root(third.id)[1:]]
    ['one', 'three']
    >>> [e.text for e in conversation.state.view.events[1:]]  # what the agent sees
    ['one', 'three']
    """

    __slots__ = ("_branches", "_skips", "_starts", "_len")

    def __init__(self, active: EventLog, others: Sequence[EventLog]) -> None:
        branches = (*others, active)
        skips: list[int] = []
        starts: list[int] = []
        total = 0
        for position, branch in enumerate(branches):
            shared = max(
                (branch.common_prefix_length(earlier) for earlier in branches[:position]),
                default=0,
            )
            skips.append(shared)
            starts.append(total)
            total += len(branch) - shared
        self._branches = branches
        self._skips = tuple(skips)
        self._starts = tuple(starts)
        self._len = total

    @property
    def active(self) -> EventLog:
        """The active branch (``state.branch``)."""
        return self._branches[-1]

    @property
    def others(self) -> tuple[EventLog, ...]:
        """The branches left by ``navigate_to`` (``state.other_branches``)."""
        return self._branches[:-1]

    def __len__(self) -> int:
        return self._len

    def _event_at(self, position: int) -> Event:
        which = bisect_right(self._starts, position) - 1  # empty segments share a start
        return self._branches[which][self._skips[which] + position - self._starts[which]]

    def __iter__(self) -> Iterator[Event]:
        for branch, skip in zip(self._branches, self._skips, strict=True):
            for position in range(skip, len(branch)):
                yield branch[position]

    def _locate(self, event_id: str) -> tuple[int, int] | None:
        # (branch number, position on that branch) of the segment that holds the event.
        for which, branch in enumerate(self._branches):
            position = branch.position_of(event_id)
            if position is not None and position >= self._skips[which]:
                return which, position
        return None

    def __contains__(self, event: object) -> bool:
        """Whether the tree holds ``event``, or an event with that id (a ``str``)."""
        if isinstance(event, str):
            return self._locate(event) is not None
        if not isinstance(event, Event):
            return False
        return self.get(event.id) == event

    def position_of(self, event_id: str) -> int | None:
        """The position of the event with this id in the tree, or ``None``."""
        found = self._locate(event_id)
        if found is None:
            return None
        which, position = found
        return self._starts[which] + position - self._skips[which]

    def index_of(self, event_id: str) -> int:
        """The position of the event with this id; ``EventNotFoundError`` if there is none."""
        position = self.position_of(event_id)
        if position is None:
            raise EventNotFoundError(f"no event with id {event_id!r} in this conversation tree")
        return position

    def get_index(self, event_id: str) -> int:
        """OpenHands' name for :meth:`index_of`."""
        return self.index_of(event_id)

    def get_id(self, index: int) -> str:
        """The id of the event at ``index`` (OpenHands' name)."""
        return self[index].id

    def get(self, event_id: str) -> Event | None:
        """The event with this id on any branch, or ``None``."""
        found = self._locate(event_id)
        return None if found is None else self._branches[found[0]][found[1]]

    def path_to_root(self, event_id: str | None, limit: int | None = None) -> list[Event]:
        """The events from the root to ``event_id``, on whichever branch holds it.

        ``None`` is the empty path; ``limit`` keeps the last ``limit`` events.
        ``EventNotFoundError`` (a ``ValueError`` and a ``KeyError``) if no
        branch has the event.
        """
        if event_id is not None:
            found = self._locate(event_id)
            if found is None:
                raise EventNotFoundError(f"no event with id {event_id!r} in this conversation tree")
            return self._branches[found[0]].path_to_root(event_id, limit)
        return self.active.path_to_root(None, limit)

    def _effective_parent_id(self, index: int, event: Event) -> str | None:
        """OpenHands' private rule, for code that reads it: a root's parent is ``None``."""
        del index  # every event cowconv records names its parent; none is inferred
        parent = event.parent_id
        return None if parent == ROOT_PARENT_ID else parent

    @property
    def last(self) -> Event | None:
        """The newest event of the active branch, or ``None`` when it is empty."""
        return self.active.last

    def append(self, event: Event) -> Any:
        """On ``conversation.state.events``: record ``event`` on the conversation.

        A snapshot's tree never changes: elsewhere this is an ``InvalidTypeError``.
        """
        appender = getattr(self.active, "record_on_conversation", None)
        if appender is None:
            raise InvalidTypeError(
                "an event tree of a snapshot is immutable: record events with "
                "conversation.append_event(event)"
            )
        return appender(event)

    def extend(self, events: Iterable[Event]) -> Any:
        """:meth:`append` for each of ``events``, in order."""
        result: Any = self
        for event in events:
            result = self.append(event)
        return result

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, EventTree | EventLog):
            return NotImplemented
        return len(self) == len(other) and all(
            a is b or a == b for a, b in zip(self, other, strict=True)
        )

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"EventTree(<{self._len} events on {len(self._branches)} branches>)"


def events_of(state: ConversationState) -> EventLog | EventTree:
    """``state.events``: the active branch while it is the only one, else an :class:`EventTree`."""
    others = state.other_branches
    if not others:
        return state.branch
    return EventTree(state.branch, others)
