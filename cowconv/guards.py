"""What ``conversation.state`` hands out: the snapshot, guarded against OpenHands' SDK idioms.

In OpenHands' SDK ``conversation.state`` is live and mutable; in cowconv it is
an immutable snapshot, so OpenHands' SDK's in-place idioms would build a new value
and drop it. None of them is silently lost here:

* ``conversation.state.events.append(event)`` (and ``extend``) records the
  event on the conversation as given (not stamped, the leaf not moved: OpenHands'
  SDK's raw log append), and returns the conversation's new history; the
  snapshot itself still never changes;
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
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from pyrsistent import PMap

from cowconv._exceptions import InvalidTypeError
from cowconv.core.events import Event
from cowconv.core.history import EventLog

if TYPE_CHECKING:
    from cowconv.conversation import Conversation
    from cowconv.core.state import ConversationState

__all__ = ["guarded"]


class ConversationEvents(EventLog):
    """The history of ``conversation.state``: ``append``/``extend`` record on the conversation.

    ``path_to_root(event_id)`` finds the event on any branch of the
    snapshot's tree, as OpenHands' ``state.events.path_to_root`` does.
    """

    __slots__ = ("_owner", "_others")

    _owner: weakref.ReferenceType[Conversation]
    _others: tuple[EventLog, ...]

    def path_to_root(self, event_id: str | None, limit: int | None = None) -> list[Event]:
        """The path from the root to ``event_id``, on whichever branch holds it.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = conversation.send_message("one")
        >>> second = conversation.send_message("two")
        >>> conversation.navigate_to(first.id)
        >>> [e.text for e in conversation.state.events.path_to_root(second.id)[1:]]
        ['one', 'two']
        """
        if event_id is not None and self.position_of(event_id) is None:
            for branch in self._others:
                if branch.position_of(event_id) is not None:
                    return branch.path_to_root(event_id, limit)
        return super().path_to_root(event_id, limit)

    def _conversation(self) -> Conversation:
        conversation = self._owner()
        if conversation is None:
            raise InvalidTypeError(
                "this history belonged to a conversation that no longer exists; "
                "EventLog(...) builds a free-standing history"
            )
        return conversation

    def append(self, event: Event) -> EventLog:
        """Record ``event`` on the conversation as given, as OpenHands' SDK's log append does.

        Not stamped with a ``parent_id``, and the leaf not moved to it
        (``conversation.append_event`` does both); returns the conversation's
        new active branch.
        """
        conversation = self._conversation()
        conversation._append_as_given(event)
        return conversation.state.branch

    record_on_conversation = append  # what the tree of conversation.state.events appends with

    def _remote_only(self, method: str, refusal: str) -> Any:
        # A RemoteConversation's method, or the refusal a local conversation gets.
        found = getattr(self._conversation(), method, None)
        if found is None:
            raise InvalidTypeError(refusal)
        return found

    def state_update_on_conversation(self, update: Any) -> None:
        """Hand ``update`` to the conversation (``state.update_state_from_event``)."""
        self._remote_only(
            "update_state_from_event",
            "only a RemoteConversation keeps a server's state updates; a local "
            "conversation's state is its own history (record events with append_event)",
        )(update)

    def add_event(self, event: Event) -> None:
        """Hand ``event`` to a remote conversation as received (OpenHands' ``add_event``)."""
        self._remote_only(
            "receive_event",
            "only a RemoteConversation receives events; a local conversation records "
            "them with append_event",
        )(event)

    def persistence_dir_of_conversation(self) -> str | None:
        """The conversation's ``persistence_dir`` (``state.persistence_dir``)."""
        directory: str | None = self._conversation().persistence_dir
        return directory

    def extend(self, events: Iterable[Event]) -> EventLog:
        """Record ``events`` on the conversation, in order; its new active branch."""
        conversation = self._conversation()
        for event in events:
            conversation._append_as_given(event)
        return conversation.state.branch


_HINTS = {
    "tags": "conversation.set_tag(key, value)",
    "agent_state": "conversation.update_agent_state({key: value})",
}


class SnapshotMap(Mapping[str, Any]):
    """``state.tags`` or ``state.agent_state`` of a conversation: reads and pyrsistent's
    persistent methods go to the frozen map it wraps; dict writes raise with a hint.

    >>> from pyrsistent import pmap
    >>> tags = SnapshotMap(pmap({"owner": "ci"}), "tags")
    >>> tags["owner"], tags == {"owner": "ci"}, sorted(tags.set("k", "v"))
    ('ci', True, ['k', 'owner'])
    """

    __slots__ = ("_map", "_field")

    def __init__(self, value: PMap[str, Any], field: str) -> None:
        self._map = value
        self._field = field

    def __getitem__(self, key: str) -> Any:
        return self._map[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __eq__(self, other: object) -> bool:
        return self._map == (other._map if isinstance(other, SnapshotMap) else other)

    def __hash__(self) -> int:
        return hash(self._map)

    def __repr__(self) -> str:
        return repr(self._map)

    def set(self, key: str, value: Any) -> PMap[str, Any]:
        """A new frozen map with ``key`` set (the snapshot is unchanged)."""
        return self._map.set(key, value)

    def discard(self, key: str) -> PMap[str, Any]:
        """A new frozen map without ``key`` (the snapshot is unchanged)."""
        return self._map.discard(key)

    def remove(self, key: str) -> PMap[str, Any]:
        """A new frozen map without ``key`` (``KeyError`` if absent)."""
        return self._map.remove(key)

    def evolver(self) -> Any:
        """pyrsistent's batch editor over the frozen map (its result is a new map)."""
        return self._map.evolver()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise InvalidTypeError(
            f"state.{self._field} is an immutable snapshot: use {_HINTS[self._field]}"
        )

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse


def guarded(state: ConversationState, conversation: Conversation) -> ConversationState:
    """``state`` with its events, tags and agent state guarded for ``conversation``, in O(1)."""
    history = state.branch.retyped(ConversationEvents)
    history._owner = weakref.ref(conversation)
    history._others = state.other_branches
    return state._replace(
        branch=history,
        tags=SnapshotMap(state.tags, "tags"),
        agent_state=SnapshotMap(state.agent_state, "agent_state"),
    )
