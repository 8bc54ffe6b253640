"""Ready-made agents: OpenHands' SDK's presets, as cowconv :class:`~cowconv.Agent` values.

>>> from cowconv import LLM
>>> from cowconv.tools.preset import get_default_agent
>>> agent = get_default_agent(LLM(model="openai/gpt-4o"), cli_mode=True)
>>> [tool.name for tool in agent.tools]
['terminal', 'file_editor', 'task_tracker']

:mod:`cowconv.tools.preset.default` holds the default coding agent (the
terminal, the file editor and the task tracker, with OpenHands' condenser
settings); :mod:`cowconv.tools.preset.planning` the planning agent (it
searches and reads, and writes only its ``PLAN.md``). A preset is plain
configuration: it forks and serialises like any agent, and
``model_copy(update=...)`` adjusts it.
"""

from cowconv.tools.preset.default import (
    get_default_agent,
    get_default_condenser,
    get_default_tools,
    register_default_tools,
)
from cowconv.tools.preset.planning import get_planning_agent

__all__ = [
    "get_default_agent",
    "get_default_condenser",
    "get_default_tools",
    "get_planning_agent",
    "register_default_tools",
]
