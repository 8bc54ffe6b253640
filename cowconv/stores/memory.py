"""``MemoryStore``: a :class:`~cowconv.Store` that keeps snapshots in this process.

Saving a snapshot keeps a reference to it, so forks share their histories
for free, and nothing survives the process. The agent server uses it when it
has no data directory, so its registry has one code path for both cases.

>>> from cowconv import LLM, Agent, Conversation
>>> store = MemoryStore()
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", store=store)
>>> _ = source.send_message("hi")
>>> fork = source.fork(title="B")
>>> [(info.title, info.event_count) for info in store.list()]  # the system prompt, "hi"
[(None, 2), ('B', 2)]
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Mapping

from cowconv._exceptions import (
    ConversationExistsError,
    ConversationNotFoundError,
    InvalidValueError,
    StoreError,
)
from cowconv.core.ids import ConversationID, id_text
from cowconv.core.state import ConversationInfo, ConversationState, check_tags
from cowconv.core.storable import check_storable
from cowconv.stores.base import ExportRecord, export_document, parse_export

__all__ = ["MemoryStore"]


class MemoryStore:
    """Conversations in a dict, oldest first; safe across threads.

    >>> MemoryStore().exists("nope")
    False
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, ConversationState] | None = {}

    def _held(self) -> dict[str, ConversationState]:
        if self._states is None:
            raise StoreError("the memory store is closed")
        return self._states

    def save(self, previous: ConversationState | None, current: ConversationState) -> None:
        """Keep ``current``, checked as :meth:`SQLiteStore.save <cowconv.SQLiteStore.save>` does."""
        check_storable(current, previous)  # whatever is kept loads again (core/storable.py)
        with self._lock:
            states = self._held()
            key = id_text(current.id)
            if previous is None:
                if key in states:
                    raise ConversationExistsError(key)
            else:
                if current.id != previous.id:
                    raise InvalidValueError(
                        f"cannot save conversation {current.id!r} over {previous.id!r}"
                    )
                held = states.get(key)
                if held is None:
                    raise ConversationNotFoundError(key)
                if held is not previous:
                    raise StoreError(
                        f"conversation {current.id!r} was changed by another writer since this "
                        "writer read it"
                    )
            states[key] = current

    def exists(self, conversation_id: ConversationID) -> bool:
        """Whether a conversation with this id is kept."""
        with self._lock:
            return id_text(conversation_id) in self._held()

    def load(self, conversation_id: ConversationID) -> ConversationState:
        """The kept snapshot; ``ConversationNotFoundError`` if there is none."""
        key = id_text(conversation_id)
        with self._lock:
            state = self._held().get(key)
        if state is None:
            raise ConversationNotFoundError(key)
        return state

    def info(self, conversation_id: ConversationID) -> ConversationInfo:
        """The kept conversation's summary."""
        return ConversationInfo.of(self.load(conversation_id))

    def unreadable(self) -> builtins.list[str]:
        """Always empty: what a memory store holds was validated when it came in.

        >>> MemoryStore().unreadable()
        []
        """
        return []

    def list(
        self, *, tags: Mapping[str, str] | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[ConversationInfo]:
        """Summaries of the conversations carrying all ``tags``, oldest first."""
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidValueError(f"limit must be an int >= 0 or None, got {limit!r}")
        if not isinstance(offset, int) or offset < 0:
            raise InvalidValueError(f"offset must be an int >= 0, got {offset!r}")
        wanted = check_tags(tags)
        with self._lock:
            states = builtins.list(self._held().values())
        chosen = [
            state
            for state in states
            if all(state.tags.get(key) == value for key, value in wanted.items())
        ]
        end = None if limit is None else offset + limit
        return [ConversationInfo.of(state) for state in chosen[offset:end]]

    def delete(self, conversation_id: ConversationID) -> None:
        """Forget a conversation; its forks keep their histories (they share, not refer)."""
        key = id_text(conversation_id)
        with self._lock:
            if self._held().pop(key, None) is None:
                raise ConversationNotFoundError(key)

    def export_conversation(
        self,
        conversation_id: ConversationID,
        *,
        with_forks: bool = False,
        include_secrets: bool = False,
    ) -> str:
        """A conversation (and with ``with_forks`` its fork tree) as versioned JSON."""
        root = self.load(conversation_id)
        records = [ExportRecord(root)]
        if with_forks:
            with self._lock:
                states = builtins.list(self._held().values())
            exported = {id_text(root.id): root}
            for state in states:  # oldest first: a parent comes before its forks
                source = state.forked_from_conversation_id
                parent = None if source is None else exported.get(id_text(source))
                if parent is None or id_text(state.id) in exported:
                    continue
                # What it shares with its parent's active branch as exported now (the parent
                # may have navigated since the fork).
                shared = parent.events.common_prefix_length(state.events)
                records.append(ExportRecord(state, id_text(parent.id), shared))
                exported[id_text(state.id)] = state
        return export_document(records, include_secrets=include_secrets)

    def import_conversations(self, data: str | bytes) -> builtins.list[ConversationID]:
        """Keep the conversations of an export (all or nothing); returns their ids."""
        records = builtins.list(parse_export(data))
        with self._lock:
            states = self._held()
            for record in records:
                if id_text(record.state.id) in states:
                    raise ConversationExistsError(id_text(record.state.id))
            for record in records:
                states[id_text(record.state.id)] = record.state
        return [record.state.id for record in records]

    def close(self) -> None:
        """Drop every conversation; the store cannot be used afterwards."""
        with self._lock:
            self._states = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "MemoryStore()"
