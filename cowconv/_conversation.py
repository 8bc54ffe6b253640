"""``Conversation``: the current snapshot of a conversation, swapped atomically.

>>> from cowconv import LLM, Agent, Conversation
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> _ = source.send_message("Analyse the sales report.")
>>> fork = source.fork(title="Follow-up exploration", tags={"variant": "B"})
>>> _ = fork.send_message("Now focus on the EMEA region.")
>>> len(source.state.events), len(fork.state.events), sorted(fork.state.tags.items())
(1, 2, [('title', 'Follow-up exploration'), ('variant', 'B')])

Every change builds a new :class:`ConversationState` and swaps it in under a
lock that only writers take; readers and :meth:`Conversation.fork` read the
current snapshot without locking, so a fork never waits for a writer and
never holds a lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from pyrsistent import PMap, pmap

from cowconv._agent import Agent
from cowconv._events import Event, MessageEvent, _now
from cowconv._exceptions import EventNotFoundError
from cowconv._frozen import check_text, freeze
from cowconv._guards import guarded, unguarded
from cowconv._ids import ConversationID, id_text, new_id, public_id
from cowconv._runtime import DEFAULT_MAX_ITERATION_PER_RUN, Runner, check_max_iteration_per_run
from cowconv._state import ConversationState, ConversationStats, ExecutionStatus
from cowconv._store import SQLiteStore, Store
from cowconv._tree import history_to, navigate
from cowconv._visualizer import (
    DEFAULT_VISUALIZER,
    ConversationVisualizerBase,
    VisualizerSetting,
    make_visualizer,
)
from cowconv._workspace import Workspace

__all__ = ["Conversation", "EventCallback", "LocalConversation", "StateSink", "notify"]

logger = logging.getLogger("cowconv")

EventCallback = Callable[[Event], None]
"""Called with every event a conversation records, in order."""

_NO_STATS = ConversationStats()
_NO_TAGS: PMap[str, str] = pmap()


def notify(callbacks: Iterable[EventCallback], event: Event) -> None:
    """Hand ``event`` to each callback; one that raises is logged and skipped."""
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
    >>> printed = Conversation._from_state(conversation.state, sink=Printer())
    0 events
    >>> _ = printed.send_message("hi")
    1 events
    """

    def save(self, previous: ConversationState | None, current: ConversationState) -> None: ...


def _check_tags(tags: Mapping[str, str] | None) -> dict[str, str]:
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise TypeError(f"tags must be a mapping of str to str, got {type(tags).__name__}")
    for key, value in tags.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"tags must map str to str, got {key!r}: {value!r}")
        check_text(key, "a tag key")
        check_text(value, "a tag value")
    return dict(tags)


def _check_id(conversation_id: ConversationID | None) -> ConversationID:
    return public_id(new_id() if conversation_id is None else id_text(conversation_id))


def _store_for(persistence_dir: str | os.PathLike[str] | None, store: Store | None) -> Store | None:
    if persistence_dir is not None and store is not None:
        raise ValueError("pass persistence_dir or store, not both")
    if persistence_dir is None:
        return store
    directory = Path(persistence_dir).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    return SQLiteStore(directory / "cowconv.db")


def _resumed(
    store: Store, conversation_id: str, agent: Agent, workspace: Workspace
) -> ConversationState:
    # The caller's agent and workspace win: they may bring a new API key.
    stored = store.load(conversation_id)
    if stored.agent == agent and stored.workspace == workspace:
        return stored
    state = stored._replace(agent=agent, workspace=workspace, updated_at=_now())
    store.save(stored, state)
    return state


class Conversation:
    """A conversation between a user and an agent, forkable in O(1).

    >>> from cowconv import LLM, Agent
    >>> conversation = Conversation(
    ...     agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", tags={"owner": "ci"}
    ... )
    >>> _ = conversation.send_message("Analyse the sales report.")
    >>> len(conversation.state.events), conversation.state.execution_status.value
    (1, 'idle')

    ``Conversation(agent=..., workspace=...)`` starts an empty conversation
    in ``workspace`` (a path or a :class:`Workspace`). ``state`` is the
    current immutable snapshot.

    With ``persistence_dir`` (a directory; the store is its ``cowconv.db``)
    or a ``store``, every change is durable before it is seen, and forks go
    to the same store. If that store holds ``conversation_id``, the
    conversation resumes from it with the ``agent`` and ``workspace`` given
    here; ``tags`` only apply to a new conversation.

    ``visualizer`` shows each event as it is recorded (see
    :class:`~cowconv.DefaultConversationVisualizer`): by default only when
    running interactively, ``None`` for never. ``stuck_detection`` is
    accepted for the seed SDK's sake; a cowconv run is ``stuck`` when it
    reaches ``max_iteration_per_run``.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Conversation:
        # A Workspace with host= lives on an agent server: hand back its client instead.
        # It is no Conversation subclass, so Python will not call __init__ on it again.
        # (Typed as Conversation so the constructor keeps its type in the local case.)
        workspace = kwargs.get("workspace", args[1] if len(args) > 1 else None)
        if cls is Conversation and isinstance(workspace, Workspace) and workspace.is_remote:
            from cowconv._remote import RemoteConversation

            return cast(Conversation, RemoteConversation(*args, **kwargs))
        return object.__new__(cls)

    def __init__(
        self,
        agent: Agent,
        workspace: Workspace | str | os.PathLike[str],
        *,
        conversation_id: ConversationID | None = None,
        tags: Mapping[str, str] | None = None,
        callbacks: Iterable[EventCallback] = (),
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
        persistence_dir: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        visualizer: VisualizerSetting = DEFAULT_VISUALIZER,
        stuck_detection: bool = True,
    ) -> None:
        if not isinstance(stuck_detection, bool):
            raise TypeError(f"stuck_detection must be a bool, got {stuck_detection!r}")
        if not isinstance(agent, Agent):
            raise TypeError(f"agent must be a cowconv.Agent, got {type(agent).__name__}")
        workspace = Workspace.coerce(workspace).require_directory()
        sink = _store_for(persistence_dir, store)
        if conversation_id is not None:
            conversation_id = id_text(conversation_id)
        if sink is not None and conversation_id is not None and sink.exists(conversation_id):
            state = _resumed(sink, conversation_id, agent, workspace)
        else:
            state = ConversationState(
                id=_check_id(conversation_id),
                agent=agent,
                workspace=workspace,
                tags=_check_tags(tags),
            )
            if sink is not None:
                sink.save(None, state)
        shown = make_visualizer(visualizer)
        self._setup(
            state,
            sink=sink,
            callbacks=callbacks if shown is None else (shown, *callbacks),
            max_iteration_per_run=max_iteration_per_run,
        )
        if shown is not None:
            shown.initialize(self)
        self._visualizer: ConversationVisualizerBase | None = shown

    @classmethod
    def resume(
        cls,
        store: Store,
        conversation_id: ConversationID,
        *,
        callbacks: Iterable[EventCallback] = (),
    ) -> Conversation:
        """Reopen a stored conversation with the agent and workspace it was stored with.

        ``ConversationNotFoundError`` if ``store`` has no such conversation. A
        conversation stored while ``running`` comes back ``paused``.

        >>> from cowconv import LLM, Agent, SQLiteStore
        >>> store = SQLiteStore(":memory:")
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-kept"))
        >>> _ = Conversation(agent=agent, workspace=".", store=store, conversation_id="c1")
        >>> resumed = Conversation.resume(store, "c1")
        >>> resumed.agent.llm.api_key.get_secret_value()
        'sk-kept'
        """
        state = store.load(id_text(conversation_id))
        conversation = cls.__new__(cls)
        conversation._setup(state, sink=store, callbacks=callbacks)
        return conversation

    def _setup(
        self,
        state: ConversationState,
        *,
        sink: StateSink | None,
        callbacks: Iterable[EventCallback],
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
    ) -> None:
        check_max_iteration_per_run(max_iteration_per_run)
        # The runner (a lock, tool processes) is made on first use: forks that never run
        # stay under a kilobyte.
        self._runner: Runner | None = None
        self._max_iteration_per_run = max_iteration_per_run
        self._state = state
        self._visualizer = None
        self._view: tuple[ConversationState, ConversationState] | None = None
        self._sink = sink
        self._callbacks = tuple(callbacks)
        self._lock = threading.RLock()

    @classmethod
    def _from_state(
        cls,
        state: ConversationState,
        *,
        sink: StateSink | None = None,
        callbacks: Iterable[EventCallback] = (),
    ) -> Conversation:
        conversation = cls.__new__(cls)
        state = unguarded(state)
        if sink is not None:
            sink.save(None, state)
        conversation._setup(state, sink=sink, callbacks=callbacks)
        return conversation

    # -- reading -------------------------------------------------------------

    @property
    def state(self) -> ConversationState:
        """The current snapshot. It never changes; read it again for news.

        Seed idioms that would change it in place do not get lost:
        ``state.events.append(event)`` records the event on this
        conversation, and writes to ``state.tags`` or ``state.agent_state``
        raise ``TypeError`` naming the method to call.
        """
        state = self._state
        view = self._view
        if view is None or view[0] is not state:
            view = self._view = (state, guarded(state, self))
        return view[1]

    @property
    def id(self) -> ConversationID:
        """The conversation id: a ``uuid.UUID`` (as in the seed SDK) or the string it was given.

        Auto-generated ids are UUIDs. ``str(conversation.id)`` is its text
        form everywhere (``state.id``, stores, URLs).
        """
        return self._state.id

    @property
    def agent(self) -> Agent:
        """The agent that runs this conversation."""
        return self._state.agent

    @property
    def workspace(self) -> Workspace:
        """The workspace the agent's tools act in."""
        return self._state.workspace

    def __repr__(self) -> str:
        state = self._state
        return (
            f"<{type(self).__name__} {state.id} events={len(state.events)} "
            f"status={state.execution_status.value}>"
        )

    # -- changing ------------------------------------------------------------

    def _commit(
        self, change: Callable[[ConversationState], ConversationState]
    ) -> ConversationState:
        """Apply ``change`` to the current snapshot, persist it, swap it in, notify."""
        with self._lock:
            previous = self._state
            current = change(previous)
            if current is previous:
                return current
            current = current._replace(updated_at=_now())
            if self._sink is not None:
                self._sink.save(previous, current)
            self._state = current
            if self._callbacks:
                for position in range(len(previous.events), len(current.events)):
                    self._notify(current.events[position])
            return current

    def _notify(self, event: Event) -> None:
        notify(self._callbacks, event)

    def append_event(self, event: Event) -> Event:
        """Record ``event`` at the end of the history and return it."""
        if not isinstance(event, Event):
            raise TypeError(f"expected an Event, got {type(event).__name__}")
        self._commit(lambda state: state._replace(events=state.events.append(event)))
        return event

    def send_message(self, text: str) -> MessageEvent:
        """Record a user message and return its event."""
        if not isinstance(text, str):
            raise TypeError(f"send_message() takes a str, got {type(text).__name__}")
        check_text(text, "the message")
        event = MessageEvent(source="user", role="user", content=text)
        self.append_event(event)
        return event

    def set_tag(self, key: str, value: str | None) -> None:
        """Set tag ``key`` to ``value``; ``None`` removes it."""
        _check_tags({key: value if value is not None else ""})

        def change(state: ConversationState) -> ConversationState:
            tags = state.tags.discard(key) if value is None else state.tags.set(key, value)
            return state if tags is state.tags else state._replace(tags=tags)

        self._commit(change)

    def update_agent_state(self, changes: Mapping[str, Any]) -> None:
        """Merge JSON-like ``changes`` into ``state.agent_state``."""
        frozen = freeze(changes)
        if not isinstance(changes, Mapping):
            raise TypeError(f"agent state changes must be a mapping, got {type(changes).__name__}")
        self._commit(lambda state: state._replace(agent_state=state.agent_state.update(frozen)))

    def activate_skill(self, name: str) -> None:
        """Add a knowledge skill to ``state.activated_knowledge_skills`` (once)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"skill name must be a non-empty string, got {name!r}")

        def change(state: ConversationState) -> ConversationState:
            skills = state.activated_knowledge_skills
            return (
                state
                if name in skills
                else state._replace(activated_knowledge_skills=(*skills, name))
            )

        self._commit(change)

    def navigate_to(self, event_id: str | None) -> None:
        """Move the active branch back to end at ``event_id`` (``None``: empty), in O(1).

        The next message starts a new branch from there; the branch left
        behind stays in ``state.branches`` and can be navigated back to.
        ``event_id`` may be on any branch. ``ValueError`` (and ``KeyError``)
        if no branch has it.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = conversation.send_message("one")
        >>> second = conversation.send_message("two")
        >>> conversation.navigate_to(first.id)
        >>> conversation.state.leaf_event_id == first.id, len(conversation.state.branches)
        (True, 1)
        """
        if event_id is not None and not isinstance(event_id, str):
            raise TypeError(f"event_id must be a str or None, got {type(event_id).__name__}")

        def change(state: ConversationState) -> ConversationState:
            if state.execution_status is ExecutionStatus.RUNNING:
                raise RuntimeError(
                    f"conversation {state.id} is running; pause() it before navigate_to()"
                )
            try:
                return navigate(state, event_id)
            except KeyError as error:
                raise EventNotFoundError(str(error.args[0])) from None

        self._commit(change)

    # -- forking -------------------------------------------------------------

    def fork(
        self,
        *,
        conversation_id: ConversationID | None = None,
        agent: Agent | None = None,
        title: str | None = None,
        tags: Mapping[str, str] | None = None,
        reset_metrics: bool = True,
        from_event_id: str | None = None,
        callbacks: Iterable[EventCallback] = (),
    ) -> Conversation:
        """A new, independent conversation with this one's history, in O(1).

        The fork shares the source's events, agent state and skills (all
        immutable), keeps the agent unless ``agent`` replaces it, shares the
        workspace, gets fresh ``tags`` (``title`` becomes ``tags["title"]``),
        starts ``idle``, and starts its stats at zero unless
        ``reset_metrics=False``. ``from_event_id`` forks the history up to and
        including that event. Nothing done to either side afterwards is seen
        by the other. ``callbacks`` are the fork's own (the source's are not
        inherited).

        >>> from cowconv import LLM, Agent, Conversation
        >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = source.send_message("one")
        >>> _ = source.send_message("two")
        >>> early = source.fork(from_event_id=first.id)
        >>> [e.text for e in early.state.events], early.state.forked_from_event_id == first.id
        (['one'], True)
        """
        state = self._state  # one consistent snapshot; no lock needed
        new_id = _check_id(conversation_id)
        if new_id == state.id:
            raise ValueError(f"a fork needs its own id; {new_id!r} is the source's id")
        if agent is not None and not isinstance(agent, Agent):
            raise TypeError(f"agent must be a cowconv.Agent, got {type(agent).__name__}")
        if title is not None and not isinstance(title, str):
            raise TypeError(f"title must be a str, got {type(title).__name__}")
        fork_tags = _check_tags(tags)
        if title is not None:
            fork_tags["title"] = title
        events = state.events
        if from_event_id is not None:
            try:
                events = history_to(state, from_event_id)
            except KeyError:
                raise EventNotFoundError(
                    f"cannot fork from event {from_event_id!r}: no such event in conversation "
                    f"{state.id!r}"
                ) from None
        now = _now()
        forked = state._replace(
            id=new_id,
            agent=state.agent if agent is None else agent,
            events=events,
            tags=pmap(fork_tags) if fork_tags else _NO_TAGS,
            stats=_NO_STATS if reset_metrics else state.stats,
            execution_status=ExecutionStatus.IDLE,
            forked_from_conversation_id=state.id,
            # As the seed: the event id of a fork at an event; None for a whole fork.
            forked_from_event_id=from_event_id,
            forked_from_event_count=len(events),
            created_at=now,
            updated_at=now,
            other_branches=state.other_branches if from_event_id is None else (),
        )
        # As the seed: the fork shows its events with a new visualiser of the source's kind.
        shown = None if self._visualizer is None else type(self._visualizer)()
        if shown is not None:
            callbacks = (shown, *callbacks)
        fork = type(self)._from_state(forked, sink=self._sink, callbacks=callbacks)
        fork._max_iteration_per_run = self._max_iteration_per_run
        if shown is not None:
            shown.initialize(fork)
            fork._visualizer = shown
        return fork

    # -- running -------------------------------------------------------------

    def run(self) -> None:
        """Run the agent until it answers, is paused, fails, or hits ``max_iteration_per_run``.

        Blocks; ``execution_status`` is ``running`` meanwhile and ends as
        ``finished`` (the model answered without tool calls), ``paused``,
        ``error`` (an LLM call failed after its retries, or a tool crashed:
        an :class:`~cowconv.AgentErrorEvent` says why) or ``stuck`` (the
        iteration limit; ``run()`` again grants as many more steps). Errors
        are recorded, not raised; ``run()`` again continues from the history.
        A run with nothing to answer just finishes. Only one ``run()`` at a
        time per conversation (another one is a ``RuntimeError``).

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.run()  # nothing to answer yet: no LLM call
        >>> conversation.state.execution_status.value
        'finished'
        """
        runner = self._runner
        if runner is None:
            with self._lock:
                if self._runner is None:
                    self._runner = Runner(self, self._max_iteration_per_run)
                runner = self._runner
        runner.run()

    def pause(self) -> None:
        """Stop a run after its current step, from any thread; ``run()`` resumes.

        The run then records a :class:`~cowconv.PauseEvent` and ends with
        status ``paused`` (or ``finished``, if that step was the final
        answer). Pausing a conversation that is not running does nothing.
        """
        if self._runner is not None:
            self._runner.pause()

    def close(self) -> None:
        """Release what this conversation holds (processes, connections)."""
        if self._runner is not None:
            self._runner.close()

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


LocalConversation = Conversation
"""The seed SDK's name for a conversation run in this process: an alias of :class:`Conversation`."""
