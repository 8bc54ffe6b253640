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

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyrsistent import PMap

from cowconv._exceptions import ConversationRunningError, EventNotFoundError
from cowconv.core.events import Event, MessageEvent, SystemPromptEvent
from cowconv.core.history import EventLog, PrefixCache
from cowconv.core.state import ConversationState, ExecutionStatus
from cowconv.core.tree import extend_active, navigate

__all__ = [
    "ActivateSkill",
    "AppendEvent",
    "Change",
    "NavigateTo",
    "SendMessage",
    "SetTag",
    "UpdateAgentState",
    "last_system_prompt",
    "same_prompt",
    "with_prompt",
]

Change = Callable[[ConversationState], ConversationState]
"""A function from one snapshot to the next (returning the same one: no change)."""


@dataclass(frozen=True)
class AppendEvent:
    """Record ``event`` at the end of the active branch, stamped with its ``parent_id``.

    The recorded event is ``event`` with ``parent_id`` set to the event
    before it (see :func:`cowconv.core.tree.extend_active`).

    >>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir="."))
    >>> state = AppendEvent(MessageEvent(id="e1", role="user", content="hi"))(state)
    >>> AppendEvent(MessageEvent(role="user", content="again"))(state).events[-1].parent_id
    'e1'
    """

    event: Event

    def __call__(self, state: ConversationState) -> ConversationState:
        return state._replace(branch=extend_active(state, (self.event,)))


# The last SystemPromptEvent of each history prefix looked at before (a fork's included), so
# finding it reads only the events since: the prompt usually sits at the very start.
_prompts: PrefixCache[tuple[SystemPromptEvent | None]] = PrefixCache()
_PROMPT_KIND = "SystemPromptEvent"


def last_system_prompt(events: EventLog) -> SystemPromptEvent | None:
    """The last :class:`~cowconv.SystemPromptEvent` of ``events`` (``None``: there is none).

    Reads only the events since the longest prefix looked at before, and of
    a stored history only the prompt itself.

    >>> from cowconv import EventLog, MessageEvent, SystemPromptEvent
    >>> log = EventLog([SystemPromptEvent(system_prompt="Be brief."),
    ...                 MessageEvent(source="user", role="user", content="hi")])
    >>> last_system_prompt(log).system_prompt
    'Be brief.'
    """
    known, found = _prompts.find(events)
    length = len(events)
    position = events.position_of_last(_PROMPT_KIND, known)
    if position is None:
        prompt = found[0] if found is not None else None
    else:
        newer = events[position]
        assert isinstance(newer, SystemPromptEvent)
        prompt = newer
    if known < length - 1 and (position is None or position < length - 1):
        # Also for the prefix without the last event: the fork point of a fork's first step.
        _prompts.keep(events.take(length - 1), (prompt,))
    _prompts.keep(events, (prompt,))
    return prompt


# Prompt events found to hold a given tuple of specs: a tool's JSON schema compared deeply on
# every message would cost more than the rest of send_message. Keyed by the event object
# (kept here, so its id() is not reused), bounded.
_matched: OrderedDict[int, tuple[SystemPromptEvent, tuple[PMap[str, Any], ...]]] = OrderedDict()
_matched_lock = threading.Lock()
_MATCHED_KEPT = 256


def same_prompt(recorded: SystemPromptEvent, prompt: SystemPromptEvent) -> bool:
    """Whether ``recorded`` holds the system prompt and tool specs of ``prompt`` (not its id).

    >>> from cowconv import SystemPromptEvent
    >>> same_prompt(SystemPromptEvent(system_prompt="a"), SystemPromptEvent(system_prompt="a"))
    True
    """
    if recorded is prompt:
        return True
    if recorded.system_prompt != prompt.system_prompt:
        return False
    if recorded.dynamic_context != prompt.dynamic_context:
        return False
    tools = prompt.tools
    if recorded.tools is tools:
        return True
    with _matched_lock:
        known = _matched.get(id(recorded))
    if known is not None and known[0] is recorded and len(known[1]) == len(tools):
        if all(mine is theirs for mine, theirs in zip(known[1], tools, strict=True)):
            return True
    if recorded.tools != tools:
        return False
    with _matched_lock:
        _matched[id(recorded)] = (recorded, tools)
        _matched.move_to_end(id(recorded))
        while len(_matched) > _MATCHED_KEPT:
            _matched.popitem(last=False)
    return True


def with_prompt(state: ConversationState, prompt: SystemPromptEvent) -> ConversationState:
    """``state`` with ``prompt`` appended, unless the last prompt of its branch is the same.

    Returns ``state`` itself when the last :class:`~cowconv.SystemPromptEvent`
    of the active branch holds the same system prompt and tools
    (:func:`same_prompt`). Callers append what follows (the user message) in
    the same change.

    >>> from cowconv import LLM, Agent, ConversationState, SystemPromptEvent, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir="."))
    >>> once = with_prompt(state, SystemPromptEvent(system_prompt="Be brief."))
    >>> len(once.events), with_prompt(once, SystemPromptEvent(system_prompt="Be brief.")) is once
    (1, True)
    """
    last = last_system_prompt(state.branch)
    if last is not None and same_prompt(last, prompt):
        return state
    return state._replace(branch=extend_active(state, (prompt,)))


@dataclass(frozen=True)
class SendMessage:
    """Record a user message, and ``prompt`` just before it if the branch's last prompt differs.

    ``prompt`` is the agent's :class:`~cowconv.SystemPromptEvent` (the agent
    layer builds it: :func:`cowconv.agent.prompt.system_prompt_event`). It
    goes in when the active branch has no prompt yet or its last one holds
    another prompt or other tools (:func:`with_prompt`), in the same commit
    as the message, so a history reads
    ``[SystemPromptEvent, MessageEvent(user), ...]`` as in OpenHands' SDK.

    >>> from cowconv import LLM, Agent, ConversationState, MessageEvent, SystemPromptEvent
    >>> from cowconv import Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir="."))
    >>> message = MessageEvent(source="user", role="user", content="hi")
    >>> prompt = SystemPromptEvent(system_prompt="Be brief.")
    >>> [event.kind for event in SendMessage(message, prompt)(state).events]
    ['SystemPromptEvent', 'MessageEvent']
    """

    event: MessageEvent
    prompt: SystemPromptEvent

    def __call__(self, state: ConversationState) -> ConversationState:
        state = with_prompt(state, self.prompt)
        return state._replace(branch=extend_active(state, (self.event,)))


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
        if state.execution_status is ExecutionStatus.RUNNING:
            raise ConversationRunningError(
                f"conversation {state.id} is running; pause() it before navigate_to()"
            )
        try:
            return navigate(state, self.event_id)
        except KeyError as error:
            raise EventNotFoundError(str(error.args[0])) from None
