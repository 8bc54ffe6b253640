"""``ConversationRegistry``: the server's live conversations, backed by a store.

Live :class:`~cowconv.Conversation` objects stay in memory, at most
``max_live`` of them (the least recently used idle ones are evicted); every
change is written through the store, so a conversation is reopened from it
the next time it is asked for, after an eviction or a restart. Before a live
conversation is served, the store is asked whether it still holds that
very write (three numbers of one row): when another server on the same
store changed or deleted it, it is reloaded (or gone), never served stale.
Every live conversation reports its events to a :class:`_Hub`, which wakes
the event streams subscribed to it.

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

import builtins
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from pydantic import ValidationError

from cowconv._exceptions import (
    ConversationConflictError,
    ConversationNotFoundError,
    ConversationRunError,
    CorruptStoreError,
    InvalidValueError,
)
from cowconv.backends.local import LocalBackend
from cowconv.conversation import Conversation, check_conversation_id
from cowconv.core.agent import Agent
from cowconv.core.events import Event
from cowconv.core.ids import ConversationID, id_text
from cowconv.core.state import ConversationInfo, ConversationState, check_tags
from cowconv.core.workspace import Workspace
from cowconv.stores import MemoryStore, Store
from cowconv.stores.tree import TreeStore
from cowconv.workspaces.recording import materialize_workspace

__all__ = ["DEFAULT_MAX_LIVE", "ConversationRegistry", "ListingPage"]

DEFAULT_MAX_LIVE = 256
"""How many conversations a registry keeps in memory by default (``--max-live-conversations``).

A live conversation costs about 20 KiB besides what its history shares with
its forks; one reopened from the store costs a read of its rows.
"""

logger = logging.getLogger("cowconv.agent_server")

Waker = Callable[[], None]


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

    @property
    def followed(self) -> bool:
        """Whether any stream follows the conversation."""
        with self._lock:
            return bool(self._wakers)

    def notify(self, _event: Event | None = None) -> None:
        # Streams read the events from the conversation's snapshot, so a wake-up carries
        # no payload and a slow subscriber can never miss or reorder an event.
        with self._lock:
            wakers = tuple(self._wakers)
        for waker in wakers:
            waker()


class ListingPage(NamedTuple):
    """A page of the server's listing (:meth:`ConversationRegistry.page`), the fields of the
    listing's response: ``ConversationPage(**page._asdict())``.

    >>> ListingPage([], [], None, None).next_cursor is None
    True
    """

    items: builtins.list[ConversationInfo]
    unreadable: builtins.list[str]
    next_cursor: str | None
    next_offset: int | None


class ConversationRegistry:
    """The conversations an agent server serves, by id.

    Conversations are kept in ``store`` (a :class:`~cowconv.MemoryStore`
    when none is given). Methods raise
    :class:`~cowconv.ConversationNotFoundError`,
    :class:`~cowconv.ConversationConflictError` and
    :class:`~cowconv.EventNotFoundError`; the app maps them to 404, 409 and 404.

    >>> from cowconv import LLM, Agent, Workspace
    >>> registry = ConversationRegistry()
    >>> source = registry.create(Agent(llm=LLM(model="openai/gpt-4o")), Workspace(working_dir="."))
    >>> _ = source.send_message("hi")
    >>> fork = registry.fork(source.id, title="B")
    >>> registry.get(fork.id) is fork, [event.kind for event in fork.state.events]
    (True, ['SystemPromptEvent', 'MessageEvent'])
    """

    def __init__(self, store: Store | None = None, *, max_live: int = DEFAULT_MAX_LIVE) -> None:
        if not isinstance(max_live, int) or isinstance(max_live, bool) or max_live < 1:
            raise InvalidValueError(f"max_live must be an int >= 1, got {max_live!r}")
        self._store: Store = MemoryStore() if store is None else store
        self._max_live = max_live
        self._lock = threading.RLock()
        # Least recently used first: the idle ones at the front are evicted first.
        self._live: OrderedDict[str, Conversation] = OrderedDict()
        self._hubs: dict[str, _Hub] = {}
        self._runs: dict[str, threading.Thread] = {}
        self._closed = False

    # -- finding -------------------------------------------------------------

    def _hub(self, conversation_id: str) -> _Hub:
        with self._lock:
            hub = self._hubs.get(conversation_id)
            if hub is None:
                hub = self._hubs[conversation_id] = _Hub()
            return hub

    def _forget_hub(self, conversation_id: str) -> None:
        """Drop the hub of a conversation that is not live and that no stream follows."""
        with self._lock:
            hub = self._hubs.get(conversation_id)
            if hub is not None and conversation_id not in self._live and not hub.followed:
                del self._hubs[conversation_id]

    def get(self, conversation_id: ConversationID) -> Conversation:
        """The live conversation ``conversation_id``, reopened from the store if needed.

        A live one that the store no longer holds as this process last wrote
        or read it (another server wrote or deleted it) is reloaded first; a
        running one is never replaced.
        """
        conversation_id = id_text(conversation_id)
        with self._lock:
            conversation = self._live.get(conversation_id)
            if conversation is not None:
                self._live.move_to_end(conversation_id)
                if conversation_id in self._runs or not self._stale(conversation):
                    return conversation
                # Another writer came in between: serve what the store holds now.
                del self._live[conversation_id]
                logger.info("conversation %s changed in the store: reloading it", conversation_id)
            else:
                conversation = None
            try:
                # The hub is kept only for a conversation that exists: a GET of an unknown
                # id must not leave an entry behind.
                hub = self._hubs.get(conversation_id) or _Hub()
                fresh = Conversation.resume(self._store, conversation_id, callbacks=[hub.notify])
            except BaseException:
                self._forget_hub(conversation_id)
                raise
            finally:
                if conversation is not None:
                    conversation.close()
            self._hubs.setdefault(conversation_id, hub)
            self._live[conversation_id] = fresh
            self._evict()
            return fresh

    def _stale(self, conversation: Conversation) -> bool:
        """Whether the store holds another write of ``conversation`` than its snapshot."""
        if not isinstance(self._store, TreeStore):
            return False  # a store of another kind: this process is its only writer
        backend = conversation.backend
        state = backend.snapshot()
        if self._store.holds(state):
            return False
        # A write of this process that ended while the store was asked is not staleness.
        return backend.snapshot() is state

    def _evict(self) -> None:
        """Drop the least recently used idle conversations beyond ``max_live`` (lock held).

        A running one, or one an event stream follows, stays; the bound is
        exceeded only while more than ``max_live`` are held so.
        """
        excess = len(self._live) - self._max_live
        if excess <= 0:
            return
        evicted: builtins.list[Conversation] = []
        for conversation_id in builtins.list(self._live):
            if len(evicted) == excess:
                break
            hub = self._hubs.get(conversation_id)
            if conversation_id in self._runs or (hub is not None and hub.followed):
                continue
            evicted.append(self._live.pop(conversation_id))
            self._forget_hub(conversation_id)
        for conversation in evicted:
            conversation.close()  # its tools' processes, if it ever ran; the store keeps it

    @property
    def live_count(self) -> int:
        """How many conversations are held in memory now (at most ``max_live`` when idle)."""
        with self._lock:
            return len(self._live)

    @property
    def max_live(self) -> int:
        """How many idle conversations are kept in memory at most."""
        return self._max_live

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
        return self._store.list(tags=tags, limit=limit, offset=offset)

    def page(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> ListingPage:
        """A page of summaries, oldest first, read off the store's listing index.

        ``cursor`` is the ``next_cursor`` of the page before (its cost does not
        grow with the store); ``offset`` skips rows. ``unreadable`` names the
        conversations the page covers whose state cannot be read: paging
        through the listing reports each once, and a listing never reads a
        row outside its page (see :meth:`TreeStore.page
        <cowconv.stores.tree.TreeStore.page>`).

        >>> ConversationRegistry().page(limit=5)
        ListingPage(items=[], unreadable=[], next_cursor=None, next_offset=None)
        """
        if isinstance(self._store, TreeStore):
            found = self._store.page(tags=tags, limit=limit, offset=offset, cursor=cursor)
            more = found.next_cursor is not None
            return ListingPage(
                found.items,
                found.unreadable,
                found.next_cursor,
                offset + limit if more and cursor is None else None,
            )
        if cursor is not None:  # a store of another kind pages by offset only
            raise InvalidValueError(f"the store {self._store!r} pages by offset, not by cursor")
        items = self._store.list(tags=tags, limit=limit + 1, offset=offset)
        more = len(items) > limit
        return ListingPage(
            items[:limit], self._store.unreadable(), None, offset + limit if more else None
        )

    def unreadable(self) -> builtins.list[str]:
        """Ids of all stored conversations the store cannot read (reads every row's version)."""
        return self._store.unreadable()

    def is_running(self, conversation_id: str) -> bool:
        """Whether a run started through :meth:`run` is still going."""
        with self._lock:
            return conversation_id in self._runs

    # -- creating --------------------------------------------------------------

    def _adopt(
        self, make: Callable[[ConversationID], Conversation], conversation_id: str | None
    ) -> Conversation:
        # The store's save refuses a taken id (ConversationExistsError, a 409): the one check.
        chosen = check_conversation_id(conversation_id)
        with self._lock:
            if self._closed:
                raise ConversationConflictError("the server is shutting down")
            try:
                conversation = make(chosen)
            except BaseException:
                self._forget_hub(id_text(chosen))  # nothing was created: keep no hub for it
                raise
            self._live[id_text(chosen)] = conversation
            self._evict()
        return conversation

    def create(
        self,
        agent: Agent,
        workspace: Workspace | str,
        *,
        conversation_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        max_iteration_per_run: int | None = None,
        agent_state: Mapping[str, Any] | None = None,
        oversight: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """A new conversation; :class:`~cowconv.ConversationExistsError` if the id is taken.

        ``oversight`` holds the first snapshot's ``confirmation_policy``,
        ``security_analyzer`` and ``hook_config`` (those given).

        ``agent_state`` is part of the first snapshot: a value that cannot be stored refuses
        the whole conversation, which is then not stored at all.
        """
        state_tags = check_tags(tags)
        options = (
            {}
            if max_iteration_per_run is None
            else {"max_iteration_per_run": max_iteration_per_run}
        )

        def make(chosen: ConversationID) -> Conversation:
            try:
                state = ConversationState(
                    id=chosen,
                    agent=agent,
                    workspace=Workspace.coerce(workspace),
                    tags=state_tags,
                    agent_state=dict(agent_state or {}),
                    **dict(oversight or {}),
                )
            except ValidationError as error:  # a value from the request: the caller's fault
                raise InvalidValueError(f"the conversation cannot be stored: {error}") from None
            # The one open path of a conversation held in this process; a taken id is refused.
            backend = LocalBackend.open(
                state,
                store=self._store,
                callbacks=[self._hub(id_text(chosen)).notify],
                resume=False,
                **options,
            )
            return Conversation._holding(backend)

        return self._adopt(make, conversation_id)

    def fork(
        self,
        conversation_id: str,
        *,
        fork_id: str | None = None,
        title: str | None = None,
        tags: Mapping[str, str] | None = None,
        reset_metrics: bool = True,
        from_event_id: str | None = None,
        workspace: str = "shared",
        agent: Agent | None = None,
    ) -> Conversation:
        """Fork ``conversation_id`` (O(1)); the fork keeps the agent and its credentials,
        unless ``agent`` replaces them.

        ``workspace="copy"`` gives the fork its own directory on this machine
        (``Conversation.fork(workspace="copy")``)."""
        source = self.get(conversation_id)

        def make(chosen: ConversationID) -> Conversation:
            return source.fork(
                conversation_id=chosen,
                agent=agent,
                title=title,
                tags=tags,
                reset_metrics=reset_metrics,
                from_event_id=from_event_id,
                callbacks=[self._hub(id_text(chosen)).notify],
                workspace=workspace,
            )

        fork = self._adopt(make, fork_id)
        # A copy's files are written now, not on first use: the server's bash and file routes
        # take any path, so its directory must hold them before GET names it.
        materialize_workspace(fork.state.workspace)
        return fork

    # -- running ---------------------------------------------------------------

    def run(self, conversation_id: str) -> ConversationState:
        """Start a run in a background thread; the snapshot it starts from.

        :class:`ConversationConflictError` if a run is already going.
        """
        with self._lock:  # got and marked running at once: never evicted or replaced between
            conversation = self.get(conversation_id)
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
        except ConversationRunError:
            pass  # the run ended in error or stuck: the history and the status say so
        except Exception:
            # The runtime turns agent failures into events; this is a bug, keep serving.
            logger.exception("run of conversation %s failed", conversation.id)
        finally:
            with self._lock:
                self._runs.pop(id_text(conversation.id), None)
            self._hub(id_text(conversation.id)).notify()

    def navigate(self, conversation_id: str, event_id: str | None) -> ConversationState:
        """Move the active branch to ``event_id`` (thread-safe); the new snapshot.

        :class:`~cowconv.ConversationConflictError` while a run is going.
        """
        conversation = self.get(conversation_id)
        with self._lock:
            if id_text(conversation_id) in self._runs:
                raise ConversationConflictError(
                    f"conversation {conversation_id!r} is running; pause it before navigating"
                )
            conversation.navigate_to(event_id)
        return conversation.state

    def pause(self, conversation_id: str) -> ConversationState:
        """Ask a running conversation to pause (thread-safe); the current snapshot."""
        conversation = self.get(conversation_id)
        conversation.pause()
        return conversation.state

    def interrupt(self, conversation_id: str) -> ConversationState:
        """End a run now (its command killed); the current snapshot."""
        conversation = self.get(conversation_id)
        conversation.interrupt()
        return conversation.state

    # -- streaming ---------------------------------------------------------------

    def subscribe(self, conversation_id: str, waker: Waker) -> Callable[[], None]:
        """Call ``waker`` on every change of the conversation; returns the unsubscriber."""
        hub = self._hub(conversation_id)
        hub.add(waker)

        def unsubscribe() -> None:
            hub.discard(waker)
            self._forget_hub(conversation_id)  # a stream that outlived its conversation

        return unsubscribe

    # -- removing ----------------------------------------------------------------

    def delete(self, conversation_id: str) -> None:
        """Remove a conversation; :class:`ConversationConflictError` while it runs.

        One whose stored state cannot be read (:class:`~cowconv.CorruptStoreError`)
        is removed all the same.
        """
        try:
            conversation = self.get(conversation_id)
        except CorruptStoreError:
            with self._lock:
                self._store.delete(conversation_id)
                hub = self._hubs.pop(conversation_id, None)
            if hub is not None:
                hub.notify()
            return
        with self._lock:
            if conversation_id in self._runs:
                raise ConversationConflictError(
                    f"conversation {conversation_id!r} is running; pause it before deleting it"
                )
            del self._live[conversation_id]
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
