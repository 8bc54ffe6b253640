"""``Store``: what a persistent conversation store offers, whatever holds the data.

:class:`~cowconv.SQLiteStore` is the embedded implementation; a server
database can implement the same protocol. The export format is shared too,
so conversations move between stores of any kind.

>>> from cowconv import SQLiteStore
>>> isinstance(SQLiteStore(":memory:"), Store)
True
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from cowconv._exceptions import InvalidValueError
from cowconv.core.events import Event
from cowconv.core.frozen import decode_json
from cowconv.core.history import EventLog
from cowconv.core.ids import ConversationID
from cowconv.core.state import ConversationInfo, ConversationState, ExecutionStatus, dump_state

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "ExportRecord", "Store"]

EXPORT_FORMAT = "cowconv.conversations"
EXPORT_VERSION = 1


@runtime_checkable
class Store(Protocol):
    """A persistent store of conversations, forks sharing their histories.

    ``save`` is the :class:`~cowconv.StateSink` a conversation writes
    through: ``previous`` is ``None`` for a new conversation or a fork,
    otherwise the snapshot the store holds, and ``current`` must be durable
    when ``save`` returns. A conversation stored while ``running`` loads as
    ``paused``: the process that ran it is gone.

    >>> from cowconv import LLM, Agent, Conversation, SQLiteStore
    >>> store = SQLiteStore(":memory:")
    >>> isinstance(store, Store)
    True
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"))
    >>> source = Conversation(agent=agent, workspace=".", store=store)
    >>> _ = source.send_message("hi")
    >>> fork = source.fork(title="B")
    >>> sorted((info.title or "-", info.event_count) for info in store.list())
    [('-', 2), ('B', 2)]
    """

    def save(self, previous: ConversationState | None, current: ConversationState) -> None:
        """Make ``current`` durable; raise and store nothing if that fails."""
        ...

    def exists(self, conversation_id: ConversationID) -> bool:
        """Whether a conversation with this id is stored."""
        ...

    def load(self, conversation_id: ConversationID) -> ConversationState:
        """The stored snapshot; ``ConversationNotFoundError`` if there is none."""
        ...

    def info(self, conversation_id: ConversationID) -> ConversationInfo:
        """The stored conversation's summary, without reading its events."""
        ...

    def list(
        self, *, tags: Mapping[str, str] | None = None, limit: int | None = None, offset: int = 0
    ) -> builtins.list[ConversationInfo]:
        """Summaries of the stored conversations carrying all ``tags``, oldest first."""
        ...

    def unreadable(self) -> builtins.list[str]:
        """Ids of stored conversations that cannot be read; ``list`` leaves them out."""
        ...

    def delete(self, conversation_id: ConversationID) -> None:
        """Forget a conversation; forks of it keep their histories."""
        ...

    def export_conversation(
        self,
        conversation_id: ConversationID,
        *,
        with_forks: bool = False,
        include_secrets: bool = False,
    ) -> str:
        """A conversation (and with ``with_forks`` its fork tree) as versioned JSON."""
        ...

    def import_conversations(self, data: str | bytes) -> builtins.list[ConversationID]:
        """Store the conversations of an export; returns their ids."""
        ...

    def close(self) -> None:
        """Release the store's connections."""
        ...


def loaded_status(state: ConversationState) -> ConversationState:
    """``state`` as a new process sees it: a ``running`` run was cut off, so ``paused``."""
    if state.execution_status is ExecutionStatus.RUNNING:
        return state._replace(execution_status=ExecutionStatus.PAUSED)
    return state


# -- the export format -------------------------------------------------------


@dataclass(frozen=True)
class ExportRecord:
    """One conversation of an export: its state and the events it adds to ``parent``.

    ``parent`` names an earlier record of the same export whose first
    ``fork_len`` events this conversation shares; ``state.branch`` is the
    whole history.
    """

    state: ConversationState
    parent: str | None = None
    fork_len: int = 0


def _dump_events(events: EventLog, start: int) -> list[Any]:
    return [events[position].model_dump(mode="json") for position in range(start, len(events))]


def export_document(records: Iterable[ExportRecord], *, include_secrets: bool) -> str:
    """The versioned JSON text of ``records`` (parents before their forks)."""
    conversations = []
    for record in records:
        events = record.state.branch
        conversations.append(
            {
                "parent": record.parent,
                "fork_len": record.fork_len,
                "state": dump_state(
                    record.state, secrets="clear" if include_secrets else "dropped"
                ),
                "events": _dump_events(events, record.fork_len),
                # Each other branch of the conversation tree: what it shares with the active
                # branch, then its own events.
                "branches": [
                    {
                        "shared": (shared := events.common_prefix_length(branch)),
                        "events": _dump_events(branch, shared),
                    }
                    for branch in record.state.other_branches
                ],
            }
        )
    document = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "conversations": conversations}
    return json.dumps(document, ensure_ascii=False)


def parse_export(data: str | bytes) -> Iterator[ExportRecord]:
    """The records of an export, each history rebuilt on its parent's (``ValueError`` if bad).

    Everything is checked before the first record is yielded, so a caller
    that writes as it goes writes nothing for a bad document.
    """
    return iter(list(_parse_export(data)))


def _parse_export(data: str | bytes) -> Iterator[ExportRecord]:
    try:
        document = decode_json(data)
    except (ValueError, TypeError) as error:
        raise InvalidValueError(f"not a cowconv export: {error}") from None
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise InvalidValueError(f"not a cowconv export (no 'format': {EXPORT_FORMAT!r})")
    version = document.get("version")
    if version != EXPORT_VERSION:
        raise InvalidValueError(
            f"cowconv export version {version!r} is not supported (this cowconv reads "
            f"version {EXPORT_VERSION})"
        )
    records = document.get("conversations")
    if not isinstance(records, list):
        raise InvalidValueError("a cowconv export needs a 'conversations' list")
    seen: dict[str, ConversationState] = {}
    for number, record in enumerate(records):
        try:
            parent, fork_len = record["parent"], record["fork_len"]
            state = ConversationState.model_validate(record["state"])
            own = [Event.model_validate(event) for event in record["events"]]
        except (KeyError, TypeError, ValidationError) as error:
            raise InvalidValueError(
                f"conversation #{number} of the export is invalid: {error}"
            ) from None
        if parent is None:
            if fork_len != 0:
                raise InvalidValueError(
                    f"conversation {state.id!r} has fork_len {fork_len} but no parent"
                )
            base = state.branch
        elif parent not in seen:
            raise InvalidValueError(
                f"conversation {state.id!r} names parent {parent!r}, which does not come "
                "before it in the export"
            )
        elif not isinstance(fork_len, int) or not 0 <= fork_len <= len(seen[parent].branch):
            raise InvalidValueError(
                f"conversation {state.id!r} has an invalid fork_len {fork_len!r}"
            )
        else:
            base = seen[parent].branch.take(fork_len)
        if str(state.id) in seen:
            raise InvalidValueError(f"conversation {state.id!r} appears twice in the export")
        try:
            events = base.extend(own)
            branches = tuple(_parse_branch(events, branch) for branch in record.get("branches", ()))
            state = state._replace(branch=events, other_branches=branches)
        except (ValueError, KeyError, TypeError, ValidationError) as error:
            raise InvalidValueError(f"conversation {state.id!r}: {error}") from None
        seen[str(state.id)] = state
        yield ExportRecord(state, parent, fork_len)


def _parse_branch(events: EventLog, branch: Any) -> EventLog:
    """An other branch of an exported conversation: a prefix of ``events`` plus its own."""
    shared = branch["shared"]
    if not isinstance(shared, int) or isinstance(shared, bool) or not 0 <= shared <= len(events):
        raise InvalidValueError(f"a branch has an invalid 'shared' count {shared!r}")
    return events.take(shared).extend(Event.model_validate(event) for event in branch["events"])
