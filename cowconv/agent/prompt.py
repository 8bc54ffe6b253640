"""The agent's system prompt as an event, and when a conversation records it.

A :class:`~cowconv.SystemPromptEvent` holds the agent's system prompt and
the specs of its tools. A new conversation is empty; the prompt is recorded
when the conversation first takes content through the agent, as the seed
SDK does: :meth:`Conversation.send_message <cowconv.Conversation.send_message>`
records it just before the message, in the same commit.

The rule, for both paths that record it: the agent's prompt is recorded
when the last :class:`~cowconv.SystemPromptEvent` of the active branch is
not the agent's (none yet, or another prompt or other tools, e.g. after
``fork(agent=...)``). ``send_message()`` checks before every message, so a
changed prompt also comes just before the next user message; ``run()``
checks when it starts with something to answer (a history built by raw
appends gets the prompt there, after its messages). ``append_event()``
never adds one, and a ``run()`` with nothing to answer records nothing.

>>> from cowconv import LLM, Agent, ConversationState, MessageEvent, Workspace
>>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
...                           workspace=Workspace(working_dir="."))
>>> state = with_system_prompt(state)
>>> state = state._replace(events=state.events.append(
...     MessageEvent(source="user", role="user", content="hi")))
>>> [event.kind for event in with_system_prompt(state).events]
['system_prompt', 'message']
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any

from pyrsistent import PMap

from cowconv.agent.messages import PrefixCache
from cowconv.agent.tools import ToolDefinition, resolve_tool
from cowconv.core.agent import Agent
from cowconv.core.events import SystemPromptEvent
from cowconv.core.frozen import freeze
from cowconv.core.history import EventLog
from cowconv.core.state import ConversationState

__all__ = ["last_system_prompt", "system_prompt_event", "with_system_prompt"]


@functools.cache
def _frozen_spec(tool: type[ToolDefinition[Any]]) -> PMap[str, Any]:
    # A spec is derived from the class's JSON schema: build it once per tool class.
    spec: PMap[str, Any] = freeze(tool.spec())
    return spec


def _tool_specs(agent: Agent) -> tuple[PMap[str, Any], ...]:
    specs = []
    for reference in agent.tools:
        try:
            specs.append(_frozen_spec(resolve_tool(reference.name)))
        except ValueError:
            # Not registered (yet): run() reports it, and records the prompt again with the
            # tool's spec once it resolves.
            continue
    return tuple(specs)


def system_prompt_event(agent: Agent) -> SystemPromptEvent:
    """The :class:`~cowconv.SystemPromptEvent` of ``agent``: its prompt and its tools' specs.

    Tools that cannot be resolved (not registered in this process) are left out.

    >>> from cowconv import LLM, Agent, Tool
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name="terminal")])
    >>> event = system_prompt_event(agent)
    >>> [spec["function"]["name"] for spec in event.tools]
    ['terminal']
    """
    return SystemPromptEvent(system_prompt=agent.system_prompt, tools=_tool_specs(agent))


# The last SystemPromptEvent of each history prefix looked at before (a fork's included), so
# finding it reads only the events since: the prompt usually sits at the very start.
_prompts: PrefixCache[tuple[SystemPromptEvent | None]] = PrefixCache()
_PROMPT_KIND = "system_prompt"


def last_system_prompt(events: EventLog) -> SystemPromptEvent | None:
    """The last :class:`~cowconv.SystemPromptEvent` of ``events`` (``None``: there is none).

    Reads only the events since the longest prefix looked at before, and of
    a stored history only the prompt itself.

    >>> from cowconv import EventLog, MessageEvent
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


def _holds(prompt: SystemPromptEvent, tools: tuple[PMap[str, Any], ...]) -> bool:
    with _matched_lock:
        known = _matched.get(id(prompt))
    if known is not None and known[0] is prompt and len(known[1]) == len(tools):
        if all(mine is theirs for mine, theirs in zip(known[1], tools, strict=True)):
            return True
    if prompt.tools != tools:
        return False
    with _matched_lock:
        _matched[id(prompt)] = (prompt, tools)
        _matched.move_to_end(id(prompt))
        while len(_matched) > _MATCHED_KEPT:
            _matched.popitem(last=False)
    return True


def with_system_prompt(state: ConversationState) -> ConversationState:
    """``state`` with its agent's system prompt recorded, if it is not the last one recorded.

    Returns ``state`` itself when the last :class:`~cowconv.SystemPromptEvent`
    of the active branch already has the agent's prompt and tools; otherwise
    a state with :func:`system_prompt_event` appended. Callers append what
    follows (the user message) in the same change.

    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir="."))
    >>> once = with_system_prompt(state)
    >>> len(once.events), with_system_prompt(once) is once
    (1, True)
    """
    agent = state.agent
    tools = _tool_specs(agent)
    last = last_system_prompt(state.events)
    if last is not None and last.system_prompt == agent.system_prompt and _holds(last, tools):
        return state
    prompt = SystemPromptEvent(system_prompt=agent.system_prompt, tools=tools)
    return state._replace(events=state.events.append(prompt))
