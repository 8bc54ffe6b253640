"""``Backend``: where a :class:`~cowconv.Conversation` keeps its snapshots.

A conversation is one class whatever holds it; what differs is its backend:

* :class:`~cowconv._local.LocalBackend` keeps the snapshot in this process,
  in memory only or written through a :class:`~cowconv.Store` (SQLite);
* :class:`~cowconv._remote.RemoteBackend` keeps it on an agent server and
  speaks HTTP.

Every change a conversation makes is a *change*: a function from one
snapshot to the next. The named changes below are plain values, so a remote
backend can send them over the wire; a local backend just calls them.

>>> from cowconv import LLM, Agent, ConversationState, Workspace
>>> state = ConversationState(
...     id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=Workspace(working_dir=".")
... )
>>> later = SetTag("owner", "ci")(ActivateSkill("sql")(state))
>>> dict(later.tags), later.activated_knowledge_skills
({'owner': 'ci'}, ('sql',))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pyrsistent import PMap

from cowconv._agent import Agent
from cowconv._events import Event, MessageEvent
from cowconv._exceptions import ConversationRunningError, InvalidTypeError, InvalidValueError
from cowconv._ids import ConversationID
from cowconv._state import ConversationState

__all__ = [
    "DEFAULT_MAX_ITERATION_PER_RUN",
    "ActivateSkill",
    "AppendEvent",
    "Backend",
    "Change",
    "EventCallback",
    "ForkSpec",
    "NavigateTo",
    "SendMessage",
    "SetTag",
    "UpdateAgentState",
    "check_max_iteration_per_run",
    "notify",
]

logger = logging.getLogger("cowconv")

EventCallback = Callable[[Event], None]
"""Called with every event a conversation records, in order."""

Change = Callable[[ConversationState], ConversationState]
"""A function from one snapshot to the next (returning the same one: no change)."""

DEFAULT_MAX_ITERATION_PER_RUN = 500
"""How many steps one ``run()`` may take before it stops as ``stuck``."""


def check_max_iteration_per_run(value: object) -> None:
    """Refuse anything but a positive int as an iteration limit.

    >>> check_max_iteration_per_run(0)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: max_iteration_per_run must be at least 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"max_iteration_per_run must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidValueError(f"max_iteration_per_run must be at least 1, got {value}")


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


@dataclass(frozen=True)
class AppendEvent:
    """Record ``event`` at the end of the history.

    >>> from cowconv import MessageEvent
    >>> AppendEvent(MessageEvent(source="user", role="user", content="hi")).event.text
    'hi'
    """

    event: Event

    def __call__(self, state: ConversationState) -> ConversationState:
        return state._replace(events=state.events.append(self.event))


@dataclass(frozen=True)
class SendMessage:
    """Record a user message, the agent's system prompt just before it if it is not current.

    The prompt goes in when the active branch has none yet or its last one
    is not the agent's (see :func:`~cowconv._prompt.with_system_prompt`),
    in the same commit as the message, so a history reads
    ``[SystemPromptEvent, MessageEvent(user), ...]`` as in the seed SDK.

    >>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir="."))
    >>> message = MessageEvent(source="user", role="user", content="hi")
    >>> [event.kind for event in SendMessage(message)(state).events]
    ['system_prompt', 'message']
    """

    event: MessageEvent

    def __call__(self, state: ConversationState) -> ConversationState:
        # Imported here: the tool registry loads when a conversation is first talked to.
        from cowconv._prompt import with_system_prompt

        state = with_system_prompt(state)
        return state._replace(events=state.events.append(self.event))


@dataclass(frozen=True)
class SetTag:
    """Set tag ``key`` to ``value``; ``None`` removes it.

    >>> SetTag("owner", None).value is None
    True
    """

    key: str
    value: str | None

    def __call__(self, state: ConversationState) -> ConversationState:
        tags = state.tags
        changed = tags.discard(self.key) if self.value is None else tags.set(self.key, self.value)
        return state if changed == tags else state._replace(tags=changed)


@dataclass(frozen=True)
class UpdateAgentState:
    """Merge ``changes`` (frozen JSON values) into ``state.agent_state``.

    >>> from cowconv import freeze
    >>> UpdateAgentState(freeze({"step": 2})).changes["step"]
    2
    """

    changes: PMap[str, Any]

    def __call__(self, state: ConversationState) -> ConversationState:
        return state._replace(agent_state=state.agent_state.update(self.changes))


@dataclass(frozen=True)
class ActivateSkill:
    """Add a knowledge skill to ``state.activated_knowledge_skills`` (once).

    >>> ActivateSkill("sql").name
    'sql'
    """

    name: str

    def __call__(self, state: ConversationState) -> ConversationState:
        skills = state.activated_knowledge_skills
        if self.name in skills:
            return state
        return state._replace(activated_knowledge_skills=(*skills, self.name))


@dataclass(frozen=True)
class NavigateTo:
    """Move the active branch to end at ``event_id`` (``None``: empty); refused while running.

    >>> NavigateTo(None).event_id is None
    True
    """

    event_id: str | None

    def __call__(self, state: ConversationState) -> ConversationState:
        from cowconv._exceptions import EventNotFoundError
        from cowconv._state import ExecutionStatus
        from cowconv._tree import navigate

        if state.execution_status is ExecutionStatus.RUNNING:
            raise ConversationRunningError(
                f"conversation {state.id} is running; pause() it before navigate_to()"
            )
        try:
            return navigate(state, self.event_id)
        except KeyError as error:
            raise EventNotFoundError(str(error.args[0])) from None


@dataclass(frozen=True)
class ForkSpec:
    """What a fork is asked for, checked by :meth:`Conversation.fork <cowconv.Conversation.fork>`.

    ``tags`` already holds the title; ``agent`` is ``None`` to keep the
    source's agent.

    >>> ForkSpec(conversation_id="f1").reset_metrics
    True
    """

    conversation_id: ConversationID | None = None
    agent: Agent | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    title: str | None = None
    reset_metrics: bool = True
    from_event_id: str | None = None


@runtime_checkable
class Backend(Protocol):
    """What holds a conversation's snapshots: in memory, in a store, or on a server.

    ``snapshot()`` is the current :class:`~cowconv.ConversationState` (never
    changed afterwards); ``commit(change)`` applies a change, makes it
    durable where the backend keeps it and tells the callbacks about new
    events. A remote backend accepts the named changes
    of this module only.

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
