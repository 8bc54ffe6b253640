"""The seams between the layers: what a conversation needs from what holds it.

* :class:`Backend`: where a :class:`~cowconv.Conversation` keeps its
  snapshots. :class:`~cowconv.backends.local.LocalBackend` keeps them in
  this process, in memory only or written through a :class:`StateSink`
  (a :class:`~cowconv.Store`); :class:`~cowconv.backends.remote.RemoteBackend`
  keeps them on an agent server and speaks HTTP. Both apply the named
  changes of :mod:`cowconv.core.changes`.
* :class:`StateSink`: where a local backend writes its snapshots.
* :class:`ForkSpec`, :data:`EventCallback`: what a fork is asked for, and
  who hears about new events.

>>> from cowconv import LLM, Agent, Conversation
>>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> isinstance(conversation.backend, Backend)
True
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from cowconv.core.agent import Agent
from cowconv.core.changes import Change
from cowconv.core.events import Event, MessageEvent
from cowconv.core.ids import ConversationID
from cowconv.core.state import ConversationState
from cowconv.core.workspace import Workspace

if TYPE_CHECKING:
    from cowconv.branches.wire import BranchJob, SharedPrefix

__all__ = [
    "BranchExecutor",
    "Backend",
    "EventCallback",
    "ForkSpec",
    "Row",
    "RowStore",
    "RowTransaction",
    "StateSink",
    "StateStore",
    "SuiteRow",
    "notify",
]

logger = logging.getLogger("cowconv")

EventCallback = Callable[[Event], None]
"""Called with every event a conversation records, in order."""


def notify(callbacks: Iterable[EventCallback], event: Event) -> None:
    """Hand ``event`` to each callback; one that raises is logged and skipped.

    >>> from cowconv import MessageEvent
    >>> seen = []
    >>> event = MessageEvent(source="user", role="user", content="hi")
    >>> notify([lambda e: 1 / 0, seen.append], event)
    >>> [event.text for event in seen]
    ['hi']
    """
    for callback in callbacks:
        try:
            callback(event)
        except Exception:
            # A failing printer or visualiser must not lose the event or stop a run.
            logger.exception("event callback %r failed on event %s", callback, event.id)


class StateSink(Protocol):
    """Where a conversation writes its snapshots (a persistent store).

    ``save(previous, current)`` must make ``current`` durable before it
    returns; ``previous`` is ``None`` for a new conversation or a fork. A
    raised exception aborts the change: the conversation keeps ``previous``.

    >>> from cowconv import LLM, Agent, Conversation
    >>> class Printer:
    ...     def save(self, previous, current):
    ...         print(len(current.events), "events")
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> printed = Conversation(agent=conversation.agent, workspace=".", store=Printer())
    0 events
    >>> _ = printed.send_message("hi")  # the system prompt first, in the same save
    2 events
    """

    def save(self, previous: ConversationState | None, current: ConversationState) -> None: ...


@runtime_checkable
class StateStore(StateSink, Protocol):
    """A :class:`StateSink` that also reads conversations back: what resuming needs.

    Every :class:`~cowconv.Store` is one.

    >>> from cowconv import MemoryStore
    >>> isinstance(MemoryStore(), StateStore)
    True
    """

    def exists(self, conversation_id: ConversationID) -> bool:
        """Whether the store holds ``conversation_id``."""
        ...

    def load(self, conversation_id: ConversationID) -> ConversationState:
        """The stored snapshot (:class:`~cowconv.ConversationNotFoundError` if none)."""
        ...


class Row(NamedTuple):
    """One conversation row of a :class:`RowStore`: a conversation, a branch, or a tombstone.

    A row holds the events ``fork_len .. event_count - 1`` of its history
    itself and inherits the first ``fork_len`` from row ``parent``. A
    conversation's row has its ``id`` and ``state`` (the JSON of
    :func:`~cowconv.core.state.dump_state_json`); each other branch of its
    tree is a row with ``branch_of`` (the conversation id) and
    ``branch_order``; a row with none of these is a tombstone, kept while
    forks reach its events. ``generation`` (random, set at creation) and
    ``version`` (counted up by every write) tell which write a snapshot is.

    >>> Row(key=1, id="c1", parent=None, fork_len=0, event_count=2, state="{}").is_tombstone
    False
    """

    key: int
    id: str | None
    parent: int | None
    fork_len: int
    event_count: int
    state: str | None
    generation: int = 0
    version: int = 0
    branch_of: str | None = None
    branch_order: int = 0

    @property
    def is_tombstone(self) -> bool:
        """Whether no conversation or branch uses the row any more."""
        return self.id is None and self.branch_of is None


class SuiteRow(NamedTuple):
    """One branch of a recorded branch suite (``run_branches(..., suite_id=...)``), as stored.

    ``branch`` is the branch's index in the suite (``-1``: the suite's own row, whose
    ``conversation`` is the source and ``detail`` what the suite was asked);
    ``state`` is ``pending``, ``running``, ``done`` or ``lost``; ``owner``
    names the runner holding a ``running`` branch and ``beat`` counts its
    heartbeats (a stalled count is a dead owner). ``detail`` is JSON text.

    >>> SuiteRow("s1", 0, "c-1", "pending").owner is None
    True
    """

    suite: str
    branch: int
    conversation: str
    state: str
    owner: str | None = None
    beat: int = 0
    detail: str = "{}"


class RowTransaction(Protocol):
    """The row operations of one transaction of a :class:`RowStore`.

    Keys are handed out by :meth:`insert`; events are written once at
    ``(key, position)`` and only ever trimmed from the end.
    """

    def row(self, conversation_id: str) -> Row | None:
        """The row of the conversation ``conversation_id``, if it is stored."""
        ...

    def row_at(self, key: int) -> Row | None:
        """The row ``key``, whatever it holds."""
        ...

    def written(self, conversation_id: str) -> tuple[int, int, int] | None:
        """``(key, generation, version)`` of the conversation's row, without its state."""
        ...

    def branch_rows(self, conversation_id: str) -> Sequence[Row]:
        """The rows of the other branches of a conversation, by ``branch_order``."""
        ...

    def children(self, key: int) -> Sequence[Row]:
        """The rows whose parent is ``key``, in key order."""
        ...

    def insert(self, row: Row) -> int:
        """Store ``row`` under a new key (``row.key`` is ignored) and return the key.

        A taken ``row.id`` raises :class:`~cowconv.ConversationExistsError`.
        """
        ...

    def update(self, row: Row, *, expected: Row | None = None) -> bool:
        """Write every field of ``row`` at ``row.key``.

        With ``expected``, only if the stored generation and version are
        still ``expected``'s (the check that refuses a stale writer);
        returns whether the row was written.
        """
        ...

    def delete(self, key: int) -> None:
        """Remove the row ``key`` (its events must be gone)."""
        ...

    def write_events(self, key: int, start: int, events: Iterable[Event]) -> None:
        """Store ``events`` at positions ``start, start + 1, ...`` of row ``key``."""
        ...

    def read_events(self, key: int, start: int, stop: int) -> tuple[Sequence[str], Sequence[Event]]:
        """The ids and events at positions ``start .. stop - 1`` of row ``key`` (only its own).

        The events may be validated lazily (:class:`~cowconv.stores.lazy.LazyEvents`).
        """
        ...

    def event_id(self, key: int, position: int) -> str | None:
        """The id of the event row ``key`` itself holds at ``position``, if any."""
        ...

    def trim_events(self, key: int, keep: int) -> None:
        """Delete the events of row ``key`` from position ``keep`` on."""
        ...

    def named_rows(
        self,
        tags: Mapping[str, str],
        limit: int | None,
        offset: int,
        after: tuple[str, str] | None = None,
    ) -> Sequence[Row]:
        """Conversation rows carrying all ``tags``, by the ``created_at`` of their state, then id.

        ``limit`` and ``offset`` (both checked, ``offset < 2**63``) page through them;
        ``after``, a ``(created_at, id)`` place in that order, starts just past it (a
        cursor: read off an index, its cost does not grow with the rows before it). Ids
        compare by code point, as Python compares strings.
        """
        ...

    def named_versions(self) -> Sequence[tuple[int, str, int, int]]:
        """``(key, id, generation, version)`` of every conversation row.

        What tells a changed state from one already checked, without reading states.
        """
        ...

    def epoch(self) -> object:
        """A token that changes when another connection may have reused a freed key."""
        ...

    def suite_rows(self, suite: str) -> Sequence[SuiteRow]:
        """The rows of the branch suite ``suite``, by ``branch`` (empty if it is not recorded)."""
        ...

    def put_suite_row(self, row: SuiteRow) -> None:
        """Write ``row`` (insert, or replace the row of its suite and branch)."""
        ...


@runtime_checkable
class RowStore(Protocol):
    """What a database offers a :class:`~cowconv.stores.tree.TreeStore`: transactions on rows.

    A read transaction sees one consistent snapshot; a write transaction is
    atomic, durable when it ends, and serialised with every other writer of
    the database. An exception inside rolls it back.

    >>> from cowconv.stores.memory import MemoryRows
    >>> isinstance(MemoryRows(), RowStore)
    True
    """

    def transaction(self, *, write: bool) -> AbstractContextManager[RowTransaction]:
        """One read snapshot or one atomic write."""
        ...

    def close(self) -> None:
        """Release the connections; further transactions raise :class:`~cowconv.StoreError`."""
        ...


class ForkSpec(NamedTuple):
    """What a fork is asked for, checked by :meth:`Conversation.fork <cowconv.Conversation.fork>`.

    ``tags`` already holds the title; ``agent`` is ``None`` to keep the
    source's agent; ``conversation_id`` is ``None`` for a new UUID, which the
    backend draws.

    >>> ForkSpec(conversation_id="f1").reset_metrics
    True
    """

    conversation_id: ConversationID | None = None
    agent: Agent | None = None
    tags: Mapping[str, str] = MappingProxyType({})
    title: str | None = None
    reset_metrics: bool = True
    from_event_id: str | None = None
    # The fork's own workspace (a copy of the files: cowconv.workspaces); None shares the
    # source's; "copy" asks an agent server to make the copy there.
    workspace: Workspace | str | None = None


@runtime_checkable
class Backend(Protocol):
    """What holds a conversation's snapshots: in memory, in a store, or on a server.

    ``snapshot()`` is the current :class:`~cowconv.ConversationState` (never
    changed afterwards); ``commit(change)`` applies a change, makes it
    durable where the backend keeps it and tells the callbacks about new
    events. A remote backend accepts only the named changes of
    :mod:`cowconv.core.changes` (each has a route: :mod:`cowconv.backends.wire`).

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> isinstance(conversation.backend, Backend)
    True
    """

    @property
    def id(self) -> str:
        """The conversation id."""
        ...

    @property
    def max_iteration_per_run(self) -> int:
        """How many steps one ``run()`` may take."""
        ...

    def snapshot(self) -> ConversationState:
        """The current snapshot."""
        ...

    def commit(self, change: Change) -> None:
        """Apply ``change``, persist it, notify the callbacks."""
        ...

    def send_message(self, text: str) -> MessageEvent:
        """Record a user message (after the agent's system prompt, see :class:`SendMessage`)."""
        ...

    def fork(self, spec: ForkSpec, callbacks: Iterable[EventCallback]) -> Backend:
        """A backend holding a new, independent fork of this conversation."""
        ...

    def run(self) -> None:
        """Run the agent until the run ends (see :meth:`Conversation.run`)."""
        ...

    def pause(self) -> None:
        """Ask a run to stop after its current step."""
        ...

    def interrupt(self) -> None:
        """End a run now: kill its running command, run no further tool call."""
        ...

    def close(self) -> None:
        """Release processes and connections."""
        ...


class BranchExecutor(Protocol):
    """Runs the jobs of a branch suite somewhere else (``cowconv.distributed`` has some).

    ``run_jobs`` ships ``prefix`` once per worker (``prefix.dumps()``),
    runs :func:`~cowconv.distributed.worker.run_branch_job` on a worker for every job, and yields
    ``(job.index, result)`` as each one ends: the bytes it returned, or the
    exception that stopped it (a job that cannot be pickled, a worker that
    died). It must not run a job twice. ``ship_api_keys`` (default ``True``)
    says whether LLM keys travel with the jobs.

    >>> from cowconv.distributed.worker import run_branch_job
    >>> class InThisThread:
    ...     def run_jobs(self, prefix, jobs):
    ...         data = prefix.dumps()
    ...         for job in jobs:
    ...             yield job.index, run_branch_job(job.dumps(), lambda: data)
    >>> from cowconv import LLM, Agent, Conversation, run_branches
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> forks = run_branches(source, [], executor=InThisThread())
    >>> len(forks)
    0
    """

    def run_jobs(
        self, prefix: SharedPrefix, jobs: Sequence[BranchJob]
    ) -> Iterable[tuple[int, bytes | BaseException]]: ...
