"""The conversation tree: every branch a conversation had, and the one it is on.

A conversation's ``state.events`` is its *active branch*: the history the
agent sees and the next message extends. :func:`navigate` moves the active
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
>>> state = state._replace(events=state.events.extend([root, a1]))
>>> state = navigate(state, root.id)  # back to the root: the next event starts a new branch
>>> state = state._replace(events=state.events.append(b1))
>>> [[e.text for e in branch] for branch in branches(state)]
[['r', 'a'], ['r', 'b']]
>>> [e.text for e in history_to(state, a1.id)]  # what fork(from_event_id=a1.id) takes
['r', 'a']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cowconv._exceptions import EventNotFoundError
from cowconv.core.history import EventLog

if TYPE_CHECKING:
    from cowconv.core.state import ConversationState

__all__ = ["branches", "history_to", "navigate"]

_EMPTY = EventLog()


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
