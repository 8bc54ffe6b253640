"""``LocalBackend``: a conversation's snapshot in this process, swapped atomically.

Every change builds a new :class:`~cowconv.ConversationState` and swaps it in
under a lock that only writers take; readers and :meth:`LocalBackend.fork`
read the current snapshot without taking it. In memory a fork therefore
never waits for a writer. With a ``sink`` (a :class:`~cowconv.Store`) every
change is durable before it is seen, and forks go to the same store: a
fork is saved before ``fork()`` returns, and that save waits for the
store's other writers as any write does.

>>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
>>> from cowconv.ports import ForkSpec
>>> from cowconv.core.changes import AppendEvent
>>> state = ConversationState(
...     id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=Workspace(working_dir=".")
... )
>>> backend = LocalBackend(state)
>>> _ = backend.commit(AppendEvent(MessageEvent(source="user", role="user", content="hi")))
>>> fork = backend.fork(ForkSpec(conversation_id="f1"), callbacks=())
>>> len(fork.snapshot().events), fork.snapshot().forked_from_conversation_id
(1, 'c1')
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from pyrsistent import PMap, pmap

from cowconv._exceptions import EventNotFoundError, InvalidTypeError
from cowconv.agent.oversight import submit_prompt
from cowconv.agent.prompt import local_dir, system_prompt_event, user_message_event
from cowconv.agent.runtime import Runner, run_hook_agent
from cowconv.core.changes import ActivateSkill, Change, SendMessage
from cowconv.core.events import Event, Message, MessageEvent, utc_now
from cowconv.core.ids import ConversationID, id_text, new_uuid_int
from cowconv.core.state import (
    DEFAULT_MAX_ITERATION_PER_RUN,
    NO_STATS,
    ConversationState,
    ExecutionStatus,
    check_max_iteration_per_run,
)
from cowconv.core.tree import extend_active, history_to, recorded
from cowconv.core.usage import Usage
from cowconv.core.workspace import Workspace
from cowconv.ports import (
    EventCallback,
    ForkSpec,
    StateSink,
    StateStore,
    notify,
)

__all__ = ["LocalBackend"]


_BUILD_LOCK = threading.Lock()
_new_backend = object.__new__
_new_tuple = tuple.__new__


class _PendingFork(NamedTuple):
    """What a fork's first snapshot is made of, until it is first read.

    A fork asked for without an id gets its ``number`` at the fork
    (:func:`~cowconv.core.ids.new_uuid_int`), made into a ``uuid.UUID`` when
    first read. A tuple: the fork makes it with ``tuple.__new__``, as
    namedtuple's ``_make`` does, without a call to an ``__init__``.
    """

    source: ConversationState
    spec: ForkSpec
    created: float
    number: int

    @property
    def conversation_id(self) -> ConversationID:
        given = self.spec.conversation_id
        return uuid.UUID(int=self.number) if given is None else given

    def build(self) -> ConversationState:
        state, spec = self.source, self.spec
        events = state.branch
        if spec.from_event_id is not None:
            try:
                events = history_to(state, spec.from_event_id)  # on any branch
            except KeyError:
                raise EventNotFoundError(
                    f"cannot fork: unknown from_event_id {spec.from_event_id!r}, no such "
                    f"event in conversation {str(state.id)!r}"
                ) from None
        created = datetime.fromtimestamp(self.created, UTC)
        return state._replace(
            id=self.conversation_id,
            agent=state.agent if spec.agent is None else spec.agent,
            branch=events,
            tags=pmap(spec.tags) if spec.tags else _NO_TAGS,
            stats=NO_STATS if spec.reset_metrics else state.stats,
            # A whole fork of a conversation waiting for confirmation waits for the same calls.
            execution_status=ExecutionStatus.WAITING_FOR_CONFIRMATION
            if state.execution_status == ExecutionStatus.WAITING_FOR_CONFIRMATION
            and spec.from_event_id is None
            else ExecutionStatus.IDLE,
            forked_from_conversation_id=state.id,
            # As OpenHands' SDK: the event id of a fork at an event; None for a whole fork.
            forked_from_event_id=spec.from_event_id,
            forked_from_event_count=len(events),
            workspace=spec.workspace if isinstance(spec.workspace, Workspace) else state.workspace,
            created_at=created,
            updated_at=created,
            other_branches=state.other_branches if spec.from_event_id is None else (),
        )


_NO_TAGS: PMap[str, str] = pmap()


def _resumed(store: StateStore, state: ConversationState) -> ConversationState:
    # The caller's agent and workspace win: they may bring a new API key.
    stored = store.load(state.id)
    if stored.agent == state.agent and stored.workspace == state.workspace:
        return stored
    resumed = stored._replace(agent=state.agent, workspace=state.workspace, updated_at=utc_now())
    store.save(stored, resumed)
    return resumed


def _appended(
    state: ConversationState, events: Sequence[Event], spent: Sequence[tuple[str, Usage]]
) -> ConversationState:
    stats = state.stats
    for usage_id, usage in spent:
        stats = stats.record(usage_id, usage)
    return state._replace(branch=extend_active(state, events), stats=stats)


class LocalBackend:
    """A conversation held in this process, in memory or written through a store.

    :meth:`open` is how one is made (it saves a new conversation first);
    a fork saves itself.

    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"))
    >>> state = ConversationState(id="c1", agent=agent, workspace=Workspace(working_dir="."))
    >>> LocalBackend(state).snapshot() is state
    True
    """

    __slots__ = (
        "_state",
        "_pending",
        "sink",
        "_callbacks",
        "max_iteration_per_run",
        "_lock",
        "_runner",
        "_unnotified",
        "_notifying",
        "__weakref__",
    )

    def __init__(
        self,
        state: ConversationState,
        *,
        sink: StateSink | None = None,
        callbacks: Iterable[EventCallback] = (),
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
    ) -> None:
        check_max_iteration_per_run(max_iteration_per_run)
        self._state: ConversationState | None = state
        self._pending: _PendingFork | None = None
        self.sink = sink
        self._callbacks = tuple(callbacks)
        self.max_iteration_per_run = max_iteration_per_run
        # Made on first use (a commit, a run): a fork that is never changed stays small.
        self._lock: threading.RLock | None = None
        self._runner: Runner | None = None
        # Events committed but not yet handed to the callbacks, and whether a commit up the
        # stack is handing them out.
        self._unnotified: deque[Event] | None = None
        self._notifying = False

    @classmethod
    def open(
        cls,
        state: ConversationState | str,
        *,
        store: StateSink | None = None,
        callbacks: Iterable[EventCallback] = (),
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
        resume: bool = True,
    ) -> LocalBackend:
        """The one way a conversation comes to be held in this process: new, resumed or reopened.

        ``Conversation(...)``, ``Conversation.resume(...)`` and the agent
        server all open their conversations here.

        * ``state``, the first snapshot of a new conversation: if ``store``
          (a :class:`~cowconv.ports.StateStore`) holds its id, that stored
          conversation is resumed with the agent and workspace of ``state``
          (they may bring a new API key), or, with ``resume=False``, refused
          (:class:`~cowconv.ConversationExistsError`); otherwise ``state`` is
          saved to ``store`` first.
        * an id: the conversation ``store`` holds under it, as stored
          (:class:`~cowconv.ConversationNotFoundError` if none).

        >>> from cowconv import LLM, Agent, ConversationState, MemoryStore, Workspace
        >>> store = MemoryStore()
        >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
        ...                           workspace=Workspace(working_dir="."))
        >>> LocalBackend.open(state, store=store).snapshot() is state
        True
        >>> LocalBackend.open("c1", store=store).snapshot().id
        'c1'
        """
        check_max_iteration_per_run(max_iteration_per_run)  # before anything is saved
        if isinstance(state, str):
            if not isinstance(store, StateStore):
                raise InvalidTypeError("reopening a conversation by id needs a store to read it")
            state = store.load(state)
        elif resume and isinstance(store, StateStore) and store.exists(state.id):
            state = _resumed(store, state)
        elif store is not None:
            store.save(None, state)
        return cls(
            state, sink=store, callbacks=callbacks, max_iteration_per_run=max_iteration_per_run
        )

    @property
    def id(self) -> str:
        """The conversation id (its text)."""
        pending = self._pending
        if pending is not None:
            return id_text(pending.conversation_id)
        return id_text(self.snapshot().id)

    def snapshot(self) -> ConversationState:
        """The current snapshot; no lock (a swap is atomic).

        A fork's first snapshot is built on first read (O(1), once): a fork
        that is never read costs only its backend.
        """
        state = self._state
        return state if state is not None else self._built()

    def _built(self) -> ConversationState:
        with _BUILD_LOCK:  # a fork is built once, whichever thread reads it first
            state = self._state
            if state is None:
                pending = self._pending
                assert pending is not None
                state = self._state = pending.build()
                self._pending = None
            return state

    def _locked(self) -> threading.RLock:
        lock = self._lock
        if lock is None:
            with _BUILD_LOCK:
                lock = self._lock
                if lock is None:
                    lock = self._lock = threading.RLock()
        return lock

    def commit(self, change: Change) -> None:
        """Apply ``change`` to the current snapshot, persist it, swap it in, notify."""
        with self._locked():
            previous = self.snapshot()
            current = change(previous)
            if current is previous:
                return
            current = current._replace(updated_at=utc_now())
            if self.sink is not None:
                self.sink.save(previous, current)
            self._state = current
            if self._callbacks:
                if self._unnotified is None:  # made on first use: forks stay small
                    self._unnotified = deque()
                self._unnotified.extend(
                    current.branch[position]
                    for position in range(len(previous.branch), len(current.branch))
                )
                self._notify_in_order()

    def send_message(self, message: str | Message, sender: str | None = None) -> MessageEvent:
        """Record a user message, after the agent's system prompt if it is not current.

        ``message`` is its text or an LLM :class:`~cowconv.Message` of role
        ``user``; ``sender`` is kept on the event. Returns the event as
        recorded (with its ``parent_id``).
        """
        if isinstance(message, str):
            message = Message(role="user", content=message)
        # The prompt first, so that its timestamp is not later than the message it precedes
        # (OpenHands' client orders the events a WebSocket delivers by timestamp).
        snapshot = self.snapshot()
        prompt = system_prompt_event(snapshot.agent, local_dir(snapshot))
        event = user_message_event(snapshot, message, sender)
        # UserPromptSubmit hooks run before the message is recorded: the context they add
        # goes with it, and their runs (a block included) right after it, in the same commit.
        event, hook_runs, spent = submit_prompt(snapshot, event, run_hook_agent)
        send = SendMessage(event, prompt)
        activations = [ActivateSkill(name) for name in event.activated_skills]
        if not activations and not hook_runs:
            self.commit(send)
        else:

            def send_and_record(state: ConversationState) -> ConversationState:
                # One commit: the message, the skills it activated (OpenHands' state list)
                # and the hooks' runs (with what prompt or agent hooks spent).
                state = send(state)
                for activate in activations:
                    state = activate(state)
                return _appended(state, hook_runs, spent) if hook_runs else state

            self.commit(send_and_record)
        return recorded(self.snapshot(), event)

    def _settle(self, status: ExecutionStatus) -> None:
        # The sink refused to record how a run ended: show it here without saving (the
        # stored snapshot says running, which loads as paused).
        with self._locked():
            self._state = self.snapshot()._replace(execution_status=status, updated_at=utc_now())

    def _notify_in_order(self) -> None:
        # A callback may commit too (send_message): its events queue behind the ones not yet
        # delivered and the outermost commit delivers them, so every callback sees every
        # event in history order. Called under the lock, so one thread delivers at a time.
        if self._notifying or self._unnotified is None:
            return
        self._notifying = True
        try:
            while self._unnotified:
                notify(self._callbacks, self._unnotified.popleft())
        finally:
            self._notifying = False

    def fork(self, spec: ForkSpec, callbacks: Iterable[EventCallback]) -> LocalBackend:
        """A new backend with an O(1) fork of the current snapshot (same sink).

        The fork is of the snapshot current now, whatever this conversation
        does next. In memory its first snapshot is built when first read; with
        a sink it is built and saved here, before this returns (durable first).
        """
        state = self.snapshot()  # one consistent snapshot; no lock needed
        number = new_uuid_int() if spec.conversation_id is None else 0
        pending = _new_tuple(_PendingFork, (state, spec, time.time(), number))
        if spec.from_event_id is not None or self.sink is not None:
            forked = pending.build()  # an unknown event fails here, at the fork
            if self.sink is not None:
                self.sink.save(None, forked)
            return LocalBackend(
                forked,
                sink=self.sink,
                callbacks=callbacks,
                max_iteration_per_run=self.max_iteration_per_run,
            )
        fork = _new_backend(LocalBackend)
        fork._state = None
        fork._pending = pending
        fork.sink = None
        fork._callbacks = tuple(callbacks)
        fork.max_iteration_per_run = self.max_iteration_per_run  # checked when first given
        fork._lock = None
        fork._runner = None
        fork._unnotified = None
        fork._notifying = False
        return fork

    def run(self) -> None:
        """Run the agent in this thread (one run at a time)."""
        runner = self._runner
        if runner is None:
            with self._locked():
                if self._runner is None:
                    self._runner = Runner(
                        self.snapshot, self.commit, self.max_iteration_per_run, self._settle
                    )
                runner = self._runner
        runner.run()

    def pause(self) -> None:
        """Ask a run to stop after its current step (no-op when idle)."""
        if self._runner is not None:
            self._runner.pause()

    def interrupt(self) -> None:
        """End a run now (no-op when idle); see :meth:`Conversation.interrupt`."""
        if self._runner is not None:
            self._runner.interrupt()

    def close(self) -> None:
        """Stop a run after its step and kill the tools' processes."""
        if self._runner is not None:
            self._runner.close()

    @property
    def runner(self) -> Runner | None:
        """The runner, once ``run()`` made one."""
        return self._runner
