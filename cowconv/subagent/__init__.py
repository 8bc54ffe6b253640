"""Sub-agents: agents a conversation's agent can start on a task (OpenHands' ``subagent``).

>>> from cowconv import Agent
>>> from cowconv.subagent import AgentDefinition, get_agent_factory, register_agent
>>> register_agent("doc-helper", lambda llm: Agent(llm=llm),
...                AgentDefinition(name="doc-helper", description="Helps."))
>>> get_agent_factory("doc-helper").definition.description
'Helps.'

Register an agent by a factory (``register_agent``) or by a definition
(:class:`AgentDefinition`, in Python or a Markdown file, turned into a
factory by :func:`agent_definition_to_factory`); an agent with the task
tool (:class:`cowconv.tools.task.TaskToolSet`) then starts it as a child
conversation.
"""

from cowconv.subagent.builtins import builtin_agent_definitions, register_builtins_agents
from cowconv.subagent.definition import AgentDefinition, AgentDefinitionLevel, load_agents_from_dir
from cowconv.subagent.registry import (
    AgentFactory,
    agent_definition_to_factory,
    discover_agents,
    get_agent_factory,
    get_factory_info,
    get_registered_agent_definitions,
    load_project_agents,
    load_user_agents,
    register_agent,
    register_agent_if_absent,
    register_file_agents,
)

__all__ = [
    "AgentDefinition",
    "AgentDefinitionLevel",
    "AgentFactory",
    "agent_definition_to_factory",
    "builtin_agent_definitions",
    "discover_agents",
    "get_agent_factory",
    "get_factory_info",
    "get_registered_agent_definitions",
    "load_agents_from_dir",
    "load_project_agents",
    "load_user_agents",
    "register_agent",
    "register_agent_if_absent",
    "register_builtins_agents",
    "register_file_agents",
]
