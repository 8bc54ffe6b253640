"""The conversation tree: every branch a conversation had, and the one it is on.

A conversation's ``state.events`` is its *active branch*: the history the
agent sees and the next message extends. Every event appended to it gets
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
>>> state = state._replace(events=extend_active(state, [root, a1]))
>>> state = navigate(state, root.id)  # back to the root: the next event starts a new branch
>>> state = state._replace(events=extend_active(state, [b1]))
>>> [[e.text for e in branch] for branch in branches(state)]
[['r', 'a'], ['r', 'b']]
>>> [e.parent_id == root.id for e in state.events[1:]], state.events[0].parent_id is None
([True], True)
>>> [e.text for e in history_to(state, a1.id)]  # what fork(from_event_id=a1.id) takes
['r', 'a']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from cowconv._exceptions import EventNotFoundError, InvalidTypeError, InvalidValueError
from cowconv.core.events import ROOT_PARENT_ID, Event
from cowconv.core.history import EventLog

if TYPE_CHECKING:
    from cowconv.core.state import ConversationState

__all__ = [
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
    cowconv._exceptions.EventNotFoundError: no branch of conversation 'c1' has ... 'nope'
    """
    for branch in (state.events, *state.other_branches):
        event = branch.get(event_id)
        if event is not None:
            return branch.up_to(event_id)
    raise EventNotFoundError(
        f"no branch of conversation {state.id!r} has an event with id {event_id!r}"
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
    current = state.events
    if len(target) == len(current) and current.starts_with(target):
        return state
    others = list(state.other_branches)
    if not target.starts_with(current) and not any(b.starts_with(current) for b in others):
        others.append(current)
    kept = tuple(branch for branch in others if not target.starts_with(branch))
    return state._replace(events=target, other_branches=kept)


def branches(state: ConversationState) -> tuple[EventLog, ...]:
    """Every branch of the conversation, each up to its leaf; the active one last.

    When the active branch was moved back and nothing was added yet, it is
    part of another branch and is not listed on its own.
    """
    others = state.other_branches
    if any(branch.starts_with(state.events) for branch in others):
        return others
    return (*others, state.events)


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
    >>> state = state._replace(events=extend_active(state, [MessageEvent(content="a")]))
    >>> head_is_empty(state), head_is_empty(navigate(state, None))
    (False, True)
    """
    return not state.events and bool(state.other_branches)


def next_parent_id(state: ConversationState) -> str | None:
    """The ``parent_id`` the next event appended to ``state`` gets.

    The last event of the active branch; with an empty active branch,
    ``None`` for a conversation without events and
    :data:`~cowconv.ROOT_PARENT_ID` after ``navigate_to(None)`` (a new root
    beside the other branches, as OpenHands' SDK stamps it).
    """
    last_id = state.events.last_id  # a stored history's last event is not loaded for it
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
    >>> state = state._replace(events=extend_active(state, [first]))
    >>> second = extend_active(state, [MessageEvent(role="user", content="b")])[1]
    >>> state.events[0] is first, second.parent_id
    (True, 'e1')
    >>> bad = MessageEvent(role="user", content="b", parent_id="e7")
    >>> extend_active(state, [bad])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: event ... parent_id 'e7', but it would follow 'e1' ...
    """
    log = state.events
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
    >>> state = state._replace(events=extend_active(state, [first, second]))
    >>> recorded(state, second).parent_id == first.id, second.parent_id
    (True, None)
    """
    for branch in (state.events, *state.other_branches):
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
    >>> state = state._replace(events=extend_active(
    ...     state, [MessageEvent(role="user", content=t) for t in "abc"]))
    >>> [e.text for e in active_branch(state)], [e.text for e in active_branch(state, limit=1)]
    (['a', 'b', 'c'], ['c'])
    """
    events = state.events
    if limit is None:
        return list(events)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidTypeError(f"limit must be an int or None, got {type(limit).__name__}")
    if limit < 0:
        raise InvalidValueError(f"limit must be at least 0, got {limit}")
    length = len(events)
    return [events[position] for position in range(max(length - limit, 0), length)]
