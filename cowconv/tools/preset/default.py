"""The default coding agent: OpenHands' SDK's ``openhands.tools.preset.default``.

>>> from cowconv import LLM
>>> agent = get_default_agent(LLM(model="openai/gpt-4o", usage_id="agent"), cli_mode=True)
>>> [tool.name for tool in agent.tools]
['terminal', 'file_editor', 'task_tracker']
>>> agent.condenser.max_size, agent.condenser.keep_first, agent.condenser.llm.usage_id
(80, 4, 'condenser')

As in OpenHands' SDK, the agent also gets the browser tool set unless
``cli_mode`` is set (``enable_browser=False`` for :func:`get_default_tools`).
cowconv runs no browser: its :class:`~cowconv.tools.browser_use.BrowserToolSet`
gives no tools, as OpenHands' does where its browser cannot start, so the
agent works with the other three. ``enable_sub_agents=True`` adds OpenHands'
task tool set by name (``task_tool_set``), which a run resolves like any tool.
"""

from __future__ import annotations

from typing import Any

from cowconv._exceptions import InvalidValueError
from cowconv.agent.tools import resolve_tool
from cowconv.core.agent import Agent, LLMSummarizingCondenser, Tool
from cowconv.core.llm import LLM

__all__ = [
    "get_default_agent",
    "get_default_condenser",
    "get_default_tools",
    "register_default_tools",
]

#: The coding tools every default agent has, in OpenHands' order.
_CODING_TOOLS = ("terminal", "file_editor", "task_tracker")
#: OpenHands' names of its browser and sub-agent tool sets.
_BROWSER_TOOL_SET = "browser_tool_set"
_TASK_TOOL_SET = "task_tool_set"
# OpenHands' default condenser (openhands.sdk.context.condenser.default_condenser).
_CONDENSER_MAX_SIZE = 80
_CONDENSER_KEEP_FIRST = 4


def register_default_tools(enable_browser: bool = True) -> None:
    """Load the default tools now (a tool missing from this cowconv is an error here).

    Built-in tools are loaded on first use anyway; calling this makes a
    missing one fail at once rather than at the first run.

    >>> register_default_tools(enable_browser=False)
    """
    for name in (*_CODING_TOOLS, *((_BROWSER_TOOL_SET,) if enable_browser else ())):
        resolve_tool(name)


def get_default_tools(enable_browser: bool = True, enable_sub_agents: bool = False) -> list[Tool]:
    """The default agent's tools: terminal, file editor, task tracker (and the tool sets asked).

    ``enable_browser`` adds the browser tool set (which gives no tools in
    cowconv: it runs no browser); ``enable_sub_agents`` adds the sub-agent
    task tool set.

    >>> [tool.name for tool in get_default_tools(enable_browser=False, enable_sub_agents=True)]
    ['terminal', 'file_editor', 'task_tracker', 'task_tool_set']
    """
    tools = [Tool(name=name) for name in _CODING_TOOLS]
    if enable_browser:
        tools.append(Tool(name=_BROWSER_TOOL_SET))
    if enable_sub_agents:
        tools.append(Tool(name=_TASK_TOOL_SET))
    return tools


def get_default_condenser(llm: LLM) -> LLMSummarizingCondenser:
    """OpenHands' default condenser: summarise past 80 events, keeping the first 4.

    >>> get_default_condenser(LLM(model="openai/gpt-4o")).max_size
    80
    """
    return LLMSummarizingCondenser(
        llm=llm, max_size=_CONDENSER_MAX_SIZE, keep_first=_CONDENSER_KEEP_FIRST
    )


def get_default_agent(
    llm: LLM, cli_mode: bool = False, finish_tool_response_schema: Any | None = None
) -> Agent:
    """The default coding agent for ``llm``: the default tools and condenser.

    ``cli_mode`` leaves the browser tool set out. The condenser summarises with a
    copy of ``llm`` whose ``usage_id`` is ``"condenser"`` (its cost counted
    apart). ``finish_tool_response_schema`` (OpenHands' structured finish
    tool) is not supported: passing one is an :class:`~cowconv.InvalidValueError`.

    >>> [tool.name for tool in get_default_agent(LLM(model="openai/gpt-4o")).tools]
    ['terminal', 'file_editor', 'task_tracker', 'browser_tool_set']
    """
    if finish_tool_response_schema is not None:
        raise InvalidValueError(
            "get_default_agent(finish_tool_response_schema=...): cowconv has no structured "
            "finish tool; leave it out"
        )
    return Agent(
        llm=llm,
        tools=get_default_tools(enable_browser=not cli_mode),
        condenser=get_default_condenser(llm.model_copy(update={"usage_id": "condenser"})),
    )
