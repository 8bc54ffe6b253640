"""The named changes: pure functions from one conversation snapshot to the next.

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyrsistent import PMap

from cowconv._exceptions import ConversationRunningError
from cowconv.core.events import Event, MessageEvent
from cowconv.core.state import ConversationState

__all__ = [
    "ActivateSkill",
    "AppendEvent",
    "Change",
    "NavigateTo",
    "SendMessage",
    "SetTag",
    "UpdateAgentState",
]

Change = Callable[[ConversationState], ConversationState]
"""A function from one snapshot to the next (returning the same one: no change)."""


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
    is not the agent's (see :func:`~cowconv.agent.prompt.with_system_prompt`),
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
        from cowconv.agent.prompt import with_system_prompt

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
        from cowconv.core.state import ExecutionStatus
        from cowconv.core.tree import navigate

        if state.execution_status is ExecutionStatus.RUNNING:
            raise ConversationRunningError(
                f"conversation {state.id} is running; pause() it before navigate_to()"
            )
        try:
            return navigate(state, self.event_id)
        except KeyError as error:
            raise EventNotFoundError(str(error.args[0])) from None
