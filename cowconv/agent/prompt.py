"""The agent's system prompt as an event, and when a conversation records it.

A :class:`~cowconv.SystemPromptEvent` holds the agent's system prompt and
the specs of its tools. A new conversation is empty; the prompt is recorded
when the conversation first takes content through the agent, as OpenHands' SDK
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
['SystemPromptEvent', 'MessageEvent']
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any

from pyrsistent import PMap

from cowconv.agent.tools import ToolDefinition, openhands_style, resolve_tool
from cowconv.core.agent import Agent
from cowconv.core.changes import with_prompt
from cowconv.core.context import AgentContext
from cowconv.core.events import MessageEvent, SystemPromptEvent, new_event_id, timestamp_now
from cowconv.core.frozen import freeze
from cowconv.core.message import Message, TextContent
from cowconv.core.state import ConversationState

__all__ = [
    "activated_skills",
    "active_context",
    "dynamic_context",
    "local_dir",
    "system_prompt_event",
    "user_message_event",
    "with_system_prompt",
]


@functools.cache
def _frozen_spec(tool: type[ToolDefinition[Any]]) -> PMap[str, Any]:
    # A spec is derived from the class's JSON schema: build it once per tool class.
    spec: PMap[str, Any] = freeze(tool.spec())
    return spec


def _tool_specs(agent: Agent) -> tuple[PMap[str, Any], ...]:
    specs = []
    for reference in agent.tools:
        try:
            tool = resolve_tool(reference.name)
        except ValueError:
            # Not registered (yet): run() reports it, and records the prompt again with the
            # tool's spec once it resolves.
            continue
        if openhands_style(tool):
            # Its specs are its instances', made with a conversation's state when it runs
            # (they may start processes): the model is given them then, not recorded here.
            continue
        specs.append(_frozen_spec(tool))
    return tuple(specs)


# One validated prompt event per system prompt and set of tool specs: validating a tool's JSON
# schema costs ~0.3 ms, so each recorded prompt is a copy of it with its own id and time (its
# tools are the same objects, which also makes comparing two of them O(1)).
_templates: OrderedDict[tuple[str, tuple[int, ...]], SystemPromptEvent] = OrderedDict()
_templates_lock = threading.Lock()
_TEMPLATES_KEPT = 64


def system_prompt_event(agent: Agent, working_dir: str | None = None) -> SystemPromptEvent:
    """A new :class:`~cowconv.SystemPromptEvent` of ``agent``: its prompt and its tools' specs.

    Tools that cannot be resolved (not registered in this process) are left
    out. Each call returns an event with a new id (each one recorded is its own event).
    With an ``agent_context``, its system message suffix is the event's
    ``dynamic_context`` (with the project skills and memory of ``working_dir``
    when the context asks for them).

    >>> from cowconv import LLM, Agent, Tool
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name="terminal")])
    >>> event = system_prompt_event(agent)
    >>> again = system_prompt_event(agent)
    >>> [spec["function"]["name"] for spec in event.tools], event.id != again.id
    (['terminal'], True)
    """
    specs = _tool_specs(agent)
    prompt = agent.static_system_message
    key = (prompt, tuple(id(spec) for spec in specs))  # specs are cached per tool
    with _templates_lock:
        template = _templates.get(key)
    if template is None:
        template = SystemPromptEvent(system_prompt=prompt, tools=specs)
        with _templates_lock:
            _templates[key] = template
            while len(_templates) > _TEMPLATES_KEPT:
                _templates.popitem(last=False)
    update: dict[str, Any] = {"id": new_event_id(), "timestamp": timestamp_now()}
    dynamic = dynamic_context(agent, working_dir)
    if dynamic is not None:
        update["dynamic_context"] = TextContent(text=dynamic)
    return template.model_copy(update=update)


def active_context(agent: Agent, working_dir: str | None) -> AgentContext | None:
    """The agent's context with its workspace's project skills and memory read in, if asked.

    >>> from cowconv import LLM, Agent
    >>> active_context(Agent(llm=LLM(model="openai/gpt-4o")), ".") is None
    True
    """
    context = agent.agent_context
    if context is None or working_dir is None:
        return context
    return context.resolved(working_dir)


def dynamic_context(agent: Agent, working_dir: str | None = None) -> str | None:
    """The text after the agent's system prompt: its agent context's system message suffix.

    >>> from cowconv import LLM, Agent
    >>> from cowconv.context import AgentContext
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"), agent_context=AgentContext(
    ...     system_message_suffix="Say yay.", current_datetime=None))
    >>> dynamic_context(agent)
    'Say yay.'
    """
    context = active_context(agent, working_dir)
    if context is None:
        return None
    return context.get_system_message_suffix(llm_model=agent.llm.model)


def user_message_event(
    state: ConversationState, message: Message, sender: str | None = None
) -> MessageEvent:
    """The user's message as an event, with what the agent context adds to it.

    A knowledge skill whose trigger the message names, and that no earlier
    user message of the active branch activated, adds its content; the
    context's ``user_message_suffix`` follows (``extended_content``; the
    skills in ``activated_skills``), as OpenHands' SDK records it.

    >>> from cowconv import LLM, Agent, ConversationState, Message, Workspace
    >>> from cowconv.context import AgentContext
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"),
    ...               agent_context=AgentContext(user_message_suffix="Be brief."))
    >>> state = ConversationState(id="c1", agent=agent, workspace=Workspace(working_dir="."))
    >>> event = user_message_event(state, Message(role="user", content="hi"))
    >>> [part.text for part in event.extended_content]
    ['Be brief.']
    """
    context = active_context(state.agent, local_dir(state))
    activated: list[str] = []
    extended: list[TextContent] = []
    if context is not None:
        added = context.get_user_message_suffix(message, activated_skills(state))
        if added is not None:
            text, activated = added
            extended.append(text)
    return MessageEvent(
        source="user",
        llm_message=message,
        sender=sender,
        activated_skills=tuple(activated),
        extended_content=tuple(extended),
    )


def activated_skills(state: ConversationState) -> list[str]:
    """The knowledge skills already activated: ``state.activated_knowledge_skills``.

    A message does not activate them again (OpenHands' SDK's rule); a fork
    inherits the list with the rest of the state.

    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> activated_skills(ConversationState(id="c1", agent=Agent(llm=LLM(model="m")),
    ...                                    workspace=Workspace(working_dir="."),
    ...                                    activated_knowledge_skills=("sql",)))
    ['sql']
    """
    return list(state.activated_knowledge_skills)


def with_system_prompt(state: ConversationState) -> ConversationState:
    """``state`` with its agent's system prompt recorded, if it is not the last one recorded.

    :func:`cowconv.core.changes.with_prompt` with :func:`system_prompt_event`.

    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir="."))
    >>> once = with_system_prompt(state)
    >>> len(once.events), with_system_prompt(once) is once
    (1, True)
    """
    return with_prompt(state, system_prompt_event(state.agent, local_dir(state)))


def local_dir(state: ConversationState) -> str | None:
    """The conversation's working directory when it is on this machine (else ``None``).

    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> local_dir(ConversationState(id="c1", agent=Agent(llm=LLM(model="m")),
    ...                             workspace=Workspace(working_dir="/srv")))
    '/srv'
    """
    workspace = state.workspace
    return None if workspace.is_remote else workspace.working_dir
