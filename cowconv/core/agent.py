"""``Agent`` and ``Tool``: what runs a conversation, as immutable configuration.

>>> from cowconv import LLM
>>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name="terminal")])
>>> agent.tools
(Tool(name='terminal', params=pmap({})),)
>>> Agent.model_validate_json(agent.model_dump_json()) == agent
True
"""

from __future__ import annotations

from pydantic import ConfigDict
from pyrsistent import pmap

from cowconv.agent.condenser import LLMSummarizingCondenser
from cowconv.core.frozen import CheckedModel, FrozenJSONMap
from cowconv.core.llm import LLM

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Agent", "Tool"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful software agent. Use the tools you are given to act in the "
    "workspace, then answer the user concisely."
)


class Tool(CheckedModel):
    """A serialisable reference to a registered tool, by name, with its settings.

    >>> Tool(name="terminal", params={"timeout": 30}).params["timeout"]
    30
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    params: FrozenJSONMap = pmap()


class Agent(CheckedModel):
    """An LLM, the tools it may call, its system prompt, and optionally a condenser.

    With ``condenser`` (an :class:`~cowconv.LLMSummarizingCondenser`), the
    model sees a condensed view of long histories instead of all of it.

    Frozen: a fork shares its source's agent; ``fork(agent=...)`` swaps it.

    >>> from cowconv import LLM
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name="terminal")])
    >>> [tool.name for tool in agent.tools], agent.llm.model
    (['terminal'], 'openai/gpt-4o')
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    llm: LLM
    tools: tuple[Tool, ...] = ()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    condenser: LLMSummarizingCondenser | None = None
