"""The registry of sub-agents: a name, a factory making the agent from an LLM, a definition.

>>> from cowconv import LLM, Agent
>>> def make_reviewer(llm):
...     return Agent(llm=llm, system_prompt="Review the code you are given.")
>>> register_agent("doc-reviewer", make_reviewer, "Reviews code.")
>>> factory = get_agent_factory("doc-reviewer")
>>> factory.definition.description, factory.factory_func(LLM(model="openai/gpt-4o")).system_prompt
('Reviews code.', 'Review the code you are given.')

The registry is one per process, as in OpenHands' SDK: the task tool
(:class:`~cowconv.tools.task.TaskToolSet`) offers every agent registered
when a conversation's tools are made, and starts the one the model names.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.agent.tools import registered_tools
from cowconv.core.agent import Agent, LLMSummarizingCondenser, Tool
from cowconv.core.context import AgentContext
from cowconv.core.llm import LLM
from cowconv.core.llm_profiles import LLMProfileStore
from cowconv.core.skills import Skill, load_project_skills, load_user_skills
from cowconv.subagent.definition import AgentDefinition, load_agents_from_dir

__all__ = [
    "AgentFactory",
    "agent_definition_to_factory",
    "discover_agents",
    "get_agent_factory",
    "get_factory_info",
    "get_registered_agent_definitions",
    "load_project_agents",
    "load_user_agents",
    "register_agent",
    "register_agent_if_absent",
    "register_file_agents",
]

logger = logging.getLogger("cowconv.subagent")


class AgentFactory(NamedTuple):
    """A registered sub-agent: the function making its agent from an LLM, and its definition.

    >>> from cowconv import Agent
    >>> AgentFactory(lambda llm: Agent(llm=llm), AgentDefinition(name="x")).definition.name
    'x'
    """

    factory_func: Callable[[LLM], Agent]
    definition: AgentDefinition


_FACTORIES: dict[str, AgentFactory] = {}
_LOCK = threading.RLock()
# Names OpenHands' SDK renamed (1.12): the old name still finds the agent, with a warning.
_RENAMED = {
    "default": "general-purpose",
    "default cli mode": "general-purpose",
    "explore": "code-explorer",
    "bash": "bash-runner",
}


def _reset_registry_for_tests() -> None:
    # OpenHands' SDK's test helper (its tests call it between tests): forget every agent.
    with _LOCK:
        _FACTORIES.clear()


def _definition(name: str, description: str | AgentDefinition) -> AgentDefinition:
    if not isinstance(name, str) or not name:
        raise InvalidValueError(f"an agent needs a non-empty name, got {name!r}")
    if isinstance(description, AgentDefinition):
        return description
    if not isinstance(description, str):
        raise InvalidTypeError(
            f"description of agent {name!r} must be a str or an AgentDefinition, "
            f"got {type(description).__name__}"
        )
    return AgentDefinition(name=name, description=description)


def _check_factory(name: str, factory_func: object) -> None:
    if not callable(factory_func):
        raise InvalidTypeError(
            f"factory_func of agent {name!r} must be a function taking an LLM and returning "
            f"an Agent, got {factory_func!r}"
        )


def register_agent(
    name: str, factory_func: Callable[[LLM], Agent], description: str | AgentDefinition
) -> None:
    """Register a sub-agent under ``name``; a name taken already is an ``InvalidValueError``.

    ``description`` is the text the task tool shows the model, or a whole
    :class:`AgentDefinition` (its tools are then listed too).

    >>> from cowconv import Agent
    >>> register_agent("doc-once", lambda llm: Agent(llm=llm), "Runs once.")
    >>> register_agent("doc-once", lambda llm: Agent(llm=llm), "Again.")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: Agent 'doc-once' already registered
    """
    definition = _definition(name, description)
    _check_factory(name, factory_func)
    with _LOCK:
        if name in _FACTORIES:
            raise InvalidValueError(f"Agent '{name}' already registered")
        _FACTORIES[name] = AgentFactory(factory_func, definition)


def register_agent_if_absent(
    name: str, factory_func: Callable[[LLM], Agent], description: str | AgentDefinition
) -> bool:
    """Register a sub-agent unless ``name`` is taken; whether it was registered.

    >>> from cowconv import Agent
    >>> register_agent_if_absent("doc-absent", lambda llm: Agent(llm=llm), "First.")
    True
    >>> register_agent_if_absent("doc-absent", lambda llm: Agent(llm=llm), "Second.")
    False
    >>> get_agent_factory("doc-absent").definition.description
    'First.'
    """
    definition = _definition(name, description)
    _check_factory(name, factory_func)
    with _LOCK:
        if name in _FACTORIES:
            return False
        _FACTORIES[name] = AgentFactory(factory_func, definition)
        return True


def get_agent_factory(name: str | None) -> AgentFactory:
    """The sub-agent registered as ``name`` (``None`` or ``""``: ``"general-purpose"``).

    An unknown name is an ``InvalidValueError`` listing the registered ones.

    >>> get_agent_factory("no-such-agent")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: Unknown agent 'no-such-agent'. Available types: ...
    """
    if name in _RENAMED:
        wanted = _RENAMED[name]
        warnings.warn(
            f"Agent name {name!r} is deprecated (OpenHands' SDK 1.12.0); use {wanted!r}",
            DeprecationWarning,
            stacklevel=2,
        )
    else:
        wanted = name or "general-purpose"
    with _LOCK:
        factory = _FACTORIES.get(wanted)
        available = sorted(_FACTORIES)
    if factory is None:
        listed = ", ".join(available) if available else "none registered"
        raise InvalidValueError(
            f"Unknown agent '{name}'. Available types: {listed}. "
            "Use register_agent() to add custom agent types."
        )
    return factory


def get_factory_info(include: Callable[[AgentDefinition], bool] | None = None) -> str:
    """The registered sub-agents as a Markdown list, one ``- **name**: description`` each.

    >>> from cowconv import Agent
    >>> register_agent_if_absent("doc-info", lambda llm: Agent(llm=llm),
    ...                          AgentDefinition(name="doc-info", description="Lists.",
    ...                                          tools=["terminal"]))
    True
    >>> get_factory_info(lambda definition: definition.name == "doc-info")
    '- **doc-info**: Lists. (tools: terminal)'
    """
    with _LOCK:
        chosen = {
            name: factory
            for name, factory in _FACTORIES.items()
            if include is None or include(factory.definition)
        }
    if not chosen:
        return "- No user-registered agents yet. Call register_agent(...) to add custom agents."
    lines = []
    for name, factory in sorted(chosen.items()):
        tools = factory.definition.tools
        listed = f" (tools: {', '.join(tools)})" if tools else ""
        lines.append(f"- **{name}**: {factory.definition.description}{listed}")
    return "\n".join(lines)


def get_registered_agent_definitions() -> list[AgentDefinition]:
    """The definitions of every registered sub-agent, in registration order.

    >>> isinstance(get_registered_agent_definitions(), list)
    True
    """
    with _LOCK:
        return [factory.definition for factory in _FACTORIES.values()]


def agent_definition_to_factory(
    agent_def: AgentDefinition, work_dir: str | Path | None = None
) -> Callable[[LLM], Agent]:
    """A factory making the agent ``agent_def`` describes, on the LLM it is given.

    As OpenHands' SDK: the agent gets the definition's tools (each must be
    registered when the factory runs); its ``system_prompt`` and ``skills``
    go into an :class:`~cowconv.AgentContext` (the prompt as the system
    message suffix; skills found by name among the project's skills under
    ``work_dir`` and the user's, the project's first, when the factory is
    made); ``model="inherit"`` keeps the LLM given, another name loads that
    profile from an :class:`~cowconv.LLMProfileStore` (``profile_store_dir``);
    the agent summarises its history with the LLM under
    ``usage_id="condenser"`` unless the definition names a condenser.

    >>> from cowconv import LLM
    >>> factory = agent_definition_to_factory(
    ...     AgentDefinition(name="runner", tools=["terminal"], system_prompt="Run commands."))
    >>> agent = factory(LLM(model="openai/gpt-4o"))
    >>> [tool.name for tool in agent.tools], agent.agent_context.system_message_suffix
    (['terminal'], 'Run commands.')
    """
    if not isinstance(agent_def, AgentDefinition):
        raise InvalidTypeError(
            "agent_definition_to_factory() takes an AgentDefinition, "
            f"got {type(agent_def).__name__}"
        )
    skills: list[Skill] = []
    if agent_def.skills:
        available: dict[str, Skill] = {}
        for skill in [
            *(load_project_skills(work_dir) if work_dir is not None else []),
            *load_user_skills(),
        ]:
            available.setdefault(skill.name, skill)
        for name in agent_def.skills:
            if name not in available:
                raise InvalidValueError(
                    f"Skill '{name}' not found but was given to agent '{agent_def.name}'."
                )
            skills.append(available[name])
    condenser = agent_def.condenser
    if condenser is not None and not isinstance(condenser, LLMSummarizingCondenser):
        raise InvalidTypeError(
            f"the condenser of agent {agent_def.name!r} must be an LLMSummarizingCondenser, "
            f"got {type(condenser).__name__}"
        )

    def factory(llm: LLM) -> Agent:
        if agent_def.model and agent_def.model != "inherit":
            store = LLMProfileStore(agent_def.profile_store_dir)
            profiles = [name.removesuffix(".json") for name in store.list()]
            wanted = agent_def.model.removesuffix(".json")
            if wanted not in profiles:
                raise InvalidValueError(
                    f"Profile {agent_def.model} not found in profile store.\n"
                    f"Available profiles: {profiles}"
                )
            llm = store.load(wanted)
        known = set(registered_tools())
        for name in agent_def.tools:
            if name not in known:
                raise InvalidValueError(
                    f"Tool '{name}' not registered but was given to agent {agent_def.name}."
                )
        context = (
            AgentContext(system_message_suffix=agent_def.system_prompt or None, skills=skills)
            if agent_def.system_prompt or skills
            else None
        )
        own = condenser or LLMSummarizingCondenser(
            llm=llm.model_copy(update={"usage_id": "condenser"})
        )
        return Agent(
            llm=llm,
            tools=tuple(Tool(name=name) for name in agent_def.tools),
            agent_context=context,
            condenser=own,
        )

    return factory


def _register_definitions(definitions: list[AgentDefinition], work_dir: Path | None) -> list[str]:
    registered = []
    for definition in definitions:
        source = f" from {definition.source}" if definition.source else ""
        try:
            factory = agent_definition_to_factory(definition, work_dir=work_dir)
        except (InvalidValueError, InvalidTypeError) as error:
            logger.warning("skipping agent %r%s: %s", definition.name, source, error)
            continue
        if register_agent_if_absent(definition.name, factory, definition):
            registered.append(definition.name)
    return registered


def load_project_agents(project_dir: str | Path) -> list[AgentDefinition]:
    """The agents of a project: ``.agents/agents/*.md``, then ``.openhands/agents/*.md``.

    A name found in both is taken from ``.agents``.

    >>> import tempfile
    >>> load_project_agents(tempfile.mkdtemp())
    []
    """
    return _first_of_each_name(
        [
            *load_agents_from_dir(Path(project_dir) / ".agents" / "agents"),
            *load_agents_from_dir(Path(project_dir) / ".openhands" / "agents"),
        ],
        "project",
    )


def load_user_agents() -> list[AgentDefinition]:
    """The user's agents: ``~/.agents/agents/*.md``, then ``~/.openhands/agents/*.md``.

    >>> isinstance(load_user_agents(), list)
    True
    """
    home = Path.home()
    return _first_of_each_name(
        [
            *load_agents_from_dir(home / ".agents" / "agents"),
            *load_agents_from_dir(home / ".openhands" / "agents"),
        ],
        "user",
    )


def _first_of_each_name(definitions: list[AgentDefinition], level: str) -> list[AgentDefinition]:
    seen: set[str] = set()
    kept = []
    for definition in definitions:
        if definition.name not in seen:
            seen.add(definition.name)
            kept.append(definition.model_copy(update={"level": level}))
    return kept


def discover_agents(
    project_dir: str | Path | None, *, include_project: bool = True, include_user: bool = True
) -> list[AgentDefinition]:
    """The project's and the user's file-based agents, without registering them (project first).

    >>> import tempfile
    >>> discover_agents(tempfile.mkdtemp(), include_user=False)
    []
    """
    found = []
    if include_project and project_dir is not None:
        found.extend(load_project_agents(project_dir))
    if include_user:
        found.extend(load_user_agents())
    names: set[str] = set()
    kept = []
    for definition in found:
        if definition.name not in names:
            names.add(definition.name)
            kept.append(definition)
    return kept


def register_file_agents(work_dir: str | Path) -> list[str]:
    """Register the project's and then the user's file-based agents; the names registered.

    A name registered already (by code, or by the project over the user)
    is left as it is; a definition that cannot become a factory is skipped
    with a warning.

    >>> import tempfile
    >>> from pathlib import Path
    >>> project = Path(tempfile.mkdtemp())
    >>> (project / ".agents" / "agents").mkdir(parents=True)
    >>> _ = (project / ".agents" / "agents" / "doc-lister.md").write_text(
    ...     "---\\ndescription: Lists files.\\ntools: [terminal]\\n---\\nList the files.\\n")
    >>> register_file_agents(project)
    ['doc-lister']
    """
    project = load_project_agents(work_dir)
    names = {definition.name for definition in project}
    user = [definition for definition in load_user_agents() if definition.name not in names]
    return _register_definitions([*project, *user], Path(work_dir))
