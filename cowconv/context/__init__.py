"""Agent context and skills, as OpenHands' ``openhands.sdk.context`` names them.

:class:`AgentContext` extends an agent's prompts with :class:`Skill` s
(always-on repo skills, and knowledge skills a :class:`KeywordTrigger` or
:class:`TaskTrigger` activates), a system message suffix and a user message
suffix; the loaders read skills from files as OpenHands' SDK lays them out.
The models live in :mod:`cowconv.core.context` and :mod:`cowconv.core.skills`
(the agent, in the core, holds its context).

>>> from cowconv import LLM, Agent
>>> context = AgentContext(skills=[Skill(name="style", content="Use tabs.")])
>>> agent = Agent(llm=LLM(model="openai/gpt-4o"), agent_context=context)
>>> [skill.name for skill in agent.agent_context.skills]
['style']
"""

from cowconv.core.context import AgentContext, load_memory
from cowconv.core.skills import (
    BaseTrigger,
    KeywordTrigger,
    PathTrigger,
    Skill,
    SkillKnowledge,
    SkillValidationError,
    TaskTrigger,
    load_project_skills,
    load_skills_from_dir,
    load_user_skills,
)

__all__ = [
    "AgentContext",
    "BaseTrigger",
    "KeywordTrigger",
    "PathTrigger",
    "Skill",
    "SkillKnowledge",
    "SkillValidationError",
    "TaskTrigger",
    "load_memory",
    "load_project_skills",
    "load_skills_from_dir",
    "load_user_skills",
]
