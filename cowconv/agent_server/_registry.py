"""``ConversationRegistry``: the server's live conversations, backed by a store.

Live :class:`~cowconv.Conversation` objects stay in memory; with a store
every change is written through it, so after a restart each conversation is
reopened from the store the first time it is asked for. Every live
conversation reports its events to a :class:`_Hub`, which wakes the event
streams subscribed to it.

>>> from cowconv import LLM, Agent, Workspace
>>> registry = ConversationRegistry()
>>> agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-1"))
>>> source = registry.create(agent, Workspace(working_dir="."), conversation_id="c1")
>>> fork = registry.fork("c1", title="Try B")
>>> fork.state.forked_from_conversation_id, fork.agent.llm.api_key.get_secret_value()
('c1', 'sk-1')
>>> registry.close()
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from cowconv._agent import Agent
from cowconv._conversation import Conversation
from cowconv._events import Event
from cowconv._exceptions import ConversationNotFoundError, CowconvError
from cowconv._ids import ConversationID, id_text
from cowconv._state import ConversationInfo, ConversationState
from cowconv._store import Store
from cowconv._tree import history_to
from cowconv._workspace import Workspace

__all__ = ["ConversationConflictError", "ConversationRegistry", "EventNotFoundError"]

logger = logging.getLogger("cowconv.agent_server")

Waker = Callable[[], None]


class ConversationConflictError(CowconvError):
    """The request clashes with the conversation's current state (id taken, already running).

    The agent server answers it with 409.

    >>> from cowconv import LLM, Agent, Workspace
    >>> registry = ConversationRegistry()
    >>> agent, workspace = Agent(llm=LLM(model="openai/gpt-4o")), Workspace(working_dir=".")
    >>> _ = registry.create(agent, workspace, conversation_id="c1")
    >>> registry.create(agent, workspace, conversation_id="c1")
    Traceback (most recent call last):
    ...
    cowconv.agent_server._registry.ConversationConflictError: ...
    """


class EventNotFoundError(CowconvError, KeyError):
    """No event of the conversation has the given id (404 on the agent server).

    >>> str(EventNotFoundError("c1", "e9"))
    "conversation 'c1' has no event with id 'e9'"
    """

    def __init__(self, conversation_id: str, event_id: str) -> None:
        super().__init__(f"conversation {conversation_id!r} has no event with id {event_id!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class _Hub:
    """The wakers of the event streams that follow one conversation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakers: list[Waker] = []

    def add(self, waker: Waker) -> None:
        with self._lock:
            self._wakers.append(waker)

    def discard(self, waker: Waker) -> None:
        with self._lock:
            if waker in self._wakers:
                self._wakers.remove(waker)

    def notify(self, _event: Event | None = None) -> None:
        # Streams read the events from the conversation's snapshot, so a wake-up carries
        # no payload and a slow subscriber can never miss or reorder an event.
        with self._lock:
            wakers = tuple(self._wakers)
        for waker in wakers:
            waker()


class ConversationRegistry:
    """The conversations an agent server serves, by id.

    Without a ``store`` the conversations live in memory only. Methods raise
    :class:`~cowconv.ConversationNotFoundError`, :class:`ConversationConflictError`
    and :class:`EventNotFoundError`; the app maps them to 404, 409 and 404.

    >>> from cowconv import LLM, Agent, Workspace
    >>> registry = ConversationRegistry()
    >>> source = registry.create(Agent(llm=LLM(model="openai/gpt-4o")), Workspace(working_dir="."))
    >>> _ = source.send_message("hi")
    >>> fork = registry.fork(source.id, title="B")
    >>> registry.get(fork.id) is fork, len(fork.state.events)
    (True, 1)
    """

    def __init__(self, store: Store | None = None) -> None:
        self._store = store
        self._lock = threading.RLock()
        self._live: dict[str, Conversation] = {}
        self._hubs: dict[str, _Hub] = {}
        self._reserved: set[str] = set()
        self._runs: dict[str, threading.Thread] = {}
        self._closed = False

    # -- finding -------------------------------------------------------------

    def _hub(self, conversation_id: str) -> _Hub:
        with self._lock:
            hub = self._hubs.get(conversation_id)
            if hub is None:
                hub = self._hubs[conversation_id] = _Hub()
            return hub

    def _taken(self, conversation_id: str) -> bool:
        return (
            conversation_id in self._live
            or conversation_id in self._reserved
            or (self._store is not None and self._store.exists(conversation_id))
        )

    def get(self, conversation_id: ConversationID) -> Conversation:
        """The live conversation ``conversation_id``, reopened from the store if needed."""
        conversation_id = id_text(conversation_id)
        with self._lock:
            conversation = self._live.get(conversation_id)
            if conversation is not None:
                return conversation
            if self._store is None or conversation_id in self._reserved:
                raise ConversationNotFoundError(conversation_id)
            if not self._store.exists(conversation_id):
                raise ConversationNotFoundError(conversation_id)
            conversation = self._reopen(conversation_id)
            self._live[conversation_id] = conversation
            return conversation

    def _reopen(self, conversation_id: str) -> Conversation:
        assert self._store is not None
        return Conversation.resume(
            self._store, conversation_id, callbacks=[self._hub(conversation_id).notify]
        )

    def find(self, conversation_id: str) -> Conversation | None:
        """The conversation if it exists, else ``None``."""
        try:
            return self.get(conversation_id)
        except ConversationNotFoundError:
            return None

    def list(
        self, *, tags: Mapping[str, str] | None = None, limit: int = 100, offset: int = 0
    ) -> list[ConversationInfo]:
        """Summaries, oldest first, of the conversations carrying all ``tags``."""
        if self._store is not None:
            return self._store.list(tags=tags, limit=limit, offset=offset)
        wanted = dict(tags or {})
        with self._lock:
            states = [conversation.state for conversation in self._live.values()]
        chosen = [
            state
            for state in states
            if all(state.tags.get(key) == value for key, value in wanted.items())
        ]
        chosen.sort(key=lambda state: (state.created_at, str(state.id)))
        return [ConversationInfo.of(state) for state in chosen[offset : offset + limit]]

    def is_running(self, conversation_id: str) -> bool:
        """Whether a run started through :meth:`run` is still going."""
        with self._lock:
            return conversation_id in self._runs

    # -- creating --------------------------------------------------------------

    def _reserve(self, conversation_id: str | None) -> str:
        chosen = conversation_id or str(uuid.uuid4())
        with self._lock:
            if self._closed:
                raise ConversationConflictError("the server is shutting down")
            if self._taken(chosen):
                raise ConversationConflictError(f"a conversation with id {chosen!r} already exists")
            self._reserved.add(chosen)
        return chosen

    def _adopt(self, conversation: Conversation) -> Conversation:
        with self._lock:
            self._reserved.discard(str(conversation.state.id))
            self._live[str(conversation.state.id)] = conversation
        return conversation

    def create(
        self,
        agent: Agent,
        workspace: Workspace,
        *,
        conversation_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """A new conversation; :class:`ConversationConflictError` if the id is taken."""
        chosen = self._reserve(conversation_id)
        try:
            extra: dict[str, Any] = dict(options or {})
            if self._store is not None:
                extra["store"] = self._store
            conversation = Conversation(
                agent,
                workspace,
                conversation_id=chosen,
                tags=tags,
                callbacks=[self._hub(chosen).notify],
                visualizer=None,  # a server prints no events
                **extra,
            )
        except BaseException:
            with self._lock:
                self._reserved.discard(chosen)
            raise
        return self._adopt(conversation)

    def fork(
        self,
        conversation_id: ConversationID,
        *,
        fork_id: str | None = None,
        title: str | None = None,
        tags: Mapping[str, str] | None = None,
        reset_metrics: bool = True,
        from_event_id: str | None = None,
    ) -> Conversation:
        """Fork ``conversation_id`` (O(1)); the fork keeps the agent and its credentials."""
        source = self.get(conversation_id)
        if from_event_id is not None:
            try:
                history_to(source.state, from_event_id)
            except KeyError:
                raise EventNotFoundError(str(conversation_id), from_event_id) from None
        chosen = self._reserve(fork_id)
        try:
            fork = source.fork(
                conversation_id=chosen,
                title=title,
                tags=tags,
                reset_metrics=reset_metrics,
                from_event_id=from_event_id,
                callbacks=[self._hub(chosen).notify],
            )
        except BaseException:
            with self._lock:
                self._reserved.discard(chosen)
            raise
        return self._adopt(fork)

    # -- running ---------------------------------------------------------------

    def run(self, conversation_id: str) -> ConversationState:
        """Start a run in a background thread; the snapshot it starts from.

        :class:`ConversationConflictError` if a run is already going.
        """
        conversation = self.get(conversation_id)
        with self._lock:
            if self._closed:
                raise ConversationConflictError("the server is shutting down")
            if conversation_id in self._runs:
                raise ConversationConflictError(
                    f"conversation {conversation_id!r} is already running"
                )
            thread = threading.Thread(
                target=self._run,
                args=(conversation,),
                name=f"cowconv-run-{conversation_id}",
                daemon=True,
            )
            self._runs[conversation_id] = thread
            state = conversation.state
            thread.start()
        return state

    def _run(self, conversation: Conversation) -> None:
        try:
            conversation.run()
        except Exception:
            # The runtime turns agent failures into events; this is a bug, keep serving.
            logger.exception("run of conversation %s failed", conversation.id)
        finally:
            with self._lock:
                self._runs.pop(str(conversation.state.id), None)
            self._hub(str(conversation.state.id)).notify()

    def append_event(self, conversation_id: str, event: Event) -> Event:
        """Record ``event``; :class:`ConversationConflictError` if its id is taken."""
        conversation = self.get(conversation_id)
        try:
            return conversation.append_event(event)
        except ValueError as error:
            if "already in this history" not in str(error):
                raise
            raise ConversationConflictError(str(error)) from None

    def navigate(self, conversation_id: str, event_id: str | None) -> ConversationState:
        """Move the active branch to ``event_id`` (thread-safe); the new snapshot.

        :class:`ConversationConflictError` while a run is going.
        """
        conversation = self.get(conversation_id)
        with self._lock:
            if conversation_id in self._runs:
                raise ConversationConflictError(
                    f"conversation {conversation_id!r} is running; pause it before navigating"
                )
            try:
                conversation.navigate_to(event_id)
            except KeyError:
                raise EventNotFoundError(conversation_id, str(event_id)) from None
        return conversation.state

    def pause(self, conversation_id: str) -> ConversationState:
        """Ask a running conversation to pause (thread-safe); the current snapshot."""
        conversation = self.get(conversation_id)
        conversation.pause()
        return conversation.state

    # -- streaming ---------------------------------------------------------------

    def subscribe(self, conversation_id: str, waker: Waker) -> Callable[[], None]:
        """Call ``waker`` on every change of the conversation; returns the unsubscriber."""
        hub = self._hub(conversation_id)
        hub.add(waker)
        return lambda: hub.discard(waker)

    # -- removing ----------------------------------------------------------------

    def delete(self, conversation_id: str) -> None:
        """Remove a conversation; :class:`ConversationConflictError` while it runs."""
        conversation = self.get(conversation_id)
        with self._lock:
            if conversation_id in self._runs:
                raise ConversationConflictError(
                    f"conversation {conversation_id!r} is running; pause it before deleting it"
                )
            del self._live[conversation_id]
            if self._store is not None:
                self._store.delete(conversation_id)
            hub = self._hubs.pop(conversation_id, None)
        conversation.close()
        if hub is not None:
            hub.notify()

    def close(self, *, timeout: float = 10.0) -> None:
        """Pause the running conversations and wait for them; the store stays open."""
        with self._lock:
            self._closed = True
            runs = dict(self._runs)
            hubs = list(self._hubs.values())
        for conversation_id, thread in runs.items():
            self.pause(conversation_id)
            thread.join(timeout)
        for hub in hubs:
            hub.notify()
        with self._lock:
            live = list(self._live.values())
        for conversation in live:
            conversation.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed
