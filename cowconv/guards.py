"""What ``conversation.state`` hands out: the snapshot, guarded against seed idioms.

In the seed SDK ``conversation.state`` is live and mutable; in cowconv it is
an immutable snapshot, so the seed's in-place idioms would build a new value
and drop it. None of them is silently lost here:

* ``conversation.state.events.append(event)`` (and ``extend``) records the
  event on the conversation, as in the seed, and returns the conversation's
  new history; the snapshot itself still never changes;
* ``state.tags[key] = value``, ``state.agent_state[key] = value``, ``del``,
  ``update``, ``pop``, ``clear``, ``setdefault`` raise ``TypeError`` naming
  the conversation method that does it;
* ``state.field = value`` raises ``AttributeError`` (see
  :class:`~cowconv.ConversationState`).

>>> from cowconv import LLM, Agent, Conversation, MessageEvent
>>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> _ = conversation.state.events.append(MessageEvent(source="user", role="user", content="hi"))
>>> len(conversation.state.events)
1
>>> conversation.state.tags["owner"] = "ci"  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
cowconv._exceptions.InvalidTypeError: state.tags is an immutable snapshot: use ...set_tag(...)
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from pyrsistent import PMap

from cowconv._exceptions import InvalidTypeError
from cowconv.core.events import Event
from cowconv.core.history import EventLog

if TYPE_CHECKING:
    from cowconv.conversation import Conversation
    from cowconv.core.state import ConversationState

__all__ = ["guarded"]

_Log = TypeVar("_Log", bound=EventLog)


class ConversationEvents(EventLog):
    """The history of ``conversation.state``: ``append``/``extend`` record on the conversation."""

    __slots__ = ("_owner",)

    _owner: weakref.ReferenceType[Conversation]

    def _conversation(self) -> Conversation:
        conversation = self._owner()
        if conversation is None:
            raise InvalidTypeError(
                "this history belonged to a conversation that no longer exists; "
                "EventLog(...) builds a free-standing history"
            )
        return conversation

    def append(self, event: Event) -> EventLog:
        """Record ``event`` on the conversation (``append_event``); its new history."""
        conversation = self._conversation()
        conversation.append_event(event)
        return conversation.state.events

    def extend(self, events: Iterable[Event]) -> EventLog:
        """Record ``events`` on the conversation, in order; its new history."""
        conversation = self._conversation()
        for event in events:
            conversation.append_event(event)
        return conversation.state.events


_HINTS = {
    "tags": "conversation.set_tag(key, value)",
    "agent_state": "conversation.update_agent_state({key: value})",
}


class SnapshotMap(PMap[str, Any]):
    """``state.tags`` or ``state.agent_state`` of a conversation: dict writes raise with a hint."""

    __slots__ = ("_field",)

    _field: str

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise InvalidTypeError(
            f"state.{self._field} is an immutable snapshot: use {_HINTS[self._field]}"
        )

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse


def _rebuilt(cls: type[PMap[str, Any]], value: PMap[str, Any]) -> Any:
    # The same buckets under another class: O(1), nothing copied.
    make: Any = cls
    internals: Any = value
    return make(internals._size, internals._buckets)


def _same_log(cls: type[_Log], log: EventLog) -> _Log:
    # The same history under another class: O(1), its structure shared, nothing copied.
    same = cls.__new__(cls)
    for name in EventLog.__slots__:
        setattr(same, name, getattr(log, name))
    return same


def _map(value: PMap[str, Any], field: str) -> SnapshotMap:
    guarded_map: SnapshotMap = _rebuilt(SnapshotMap, value)
    guarded_map._field = field
    return guarded_map


def guarded(state: ConversationState, conversation: Conversation) -> ConversationState:
    """``state`` with its events, tags and agent state guarded for ``conversation``, in O(1)."""
    history = _same_log(ConversationEvents, state.events)
    history._owner = weakref.ref(conversation)
    return state._replace(
        events=history,
        tags=_map(state.tags, "tags"),
        agent_state=_map(state.agent_state, "agent_state"),
    )
