"""The planning agent: OpenHands' SDK's ``openhands.tools.preset.planning``.

>>> from cowconv import LLM
>>> agent = get_planning_agent(LLM(model="openai/gpt-4o"))
>>> [tool.name for tool in agent.tools]
['glob', 'grep', 'planning_file_editor']
>>> agent.condenser.max_size, agent.condenser.keep_first, agent.condenser.llm.usage_id
(100, 6, 'planning_condenser')

An agent that reads the workspace (``glob``, ``grep``, the editor's
``view``) and writes one file, the plan (``PLAN.md``, by default under
``.agents_tmp/``), whose sections :data:`PLAN_STRUCTURE` lists; another
agent (OpenHands' example hands it to :func:`~cowconv.tools.preset.default.get_default_agent`'s)
then carries the plan out.
"""

from __future__ import annotations

from cowconv.core.agent import Agent, LLMSummarizingCondenser, Tool
from cowconv.core.llm import LLM
from cowconv.tools.planning_file_editor import PLAN_HEADERS, plan_headers

__all__ = [
    "PLANNING_SYSTEM_PROMPT",
    "PLAN_STRUCTURE",
    "format_plan_structure",
    "get_plan_headers",
    "get_planning_agent",
    "get_planning_condenser",
    "get_planning_tools",
]

#: Each section of a plan and what it holds.
PLAN_STRUCTURE: tuple[tuple[str, str], ...] = tuple(
    zip(
        PLAN_HEADERS,
        (
            "* Summarize the goal of the plan in one or two sentences.\n"
            "* Restate the problem in clear operational terms.",
            "* Briefly describe the relevant system components, files, or data involved.\n"
            "* Mention any dependencies or constraints (technical, organizational, or external).",
            "* Outline the chosen approach at a high level.\n"
            "* Mention why it was selected (short rationale) if alternatives were considered.",
            "* Provide a step-by-step plan for execution.\n"
            "* Each step should include:\n"
            "  - a **goal** (what this step accomplishes),\n"
            "  - a **method** (how to do it, briefly),\n"
            "  - and optionally a **reference** (file, module, or function impacted).",
            "* Describe how the implementation can be verified or validated.\n"
            "* This section should describe what success looks like: expected outputs, "
            "behaviors, or conditions.",
        ),
        strict=True,
    )
)


def format_plan_structure() -> str:
    """The plan's sections as the planning agent's prompt states them.

    >>> format_plan_structure().splitlines()[2]
    '1. OBJECTIVE'
    """
    sections = [
        f"{number}. {title}\n   " + "\n   ".join(description.split("\n"))
        for number, (title, description) in enumerate(PLAN_STRUCTURE, 1)
    ]
    return "The plan must follow this structure exactly:\n\n" + "\n\n".join(sections)


def get_plan_headers() -> str:
    """The headers a new ``PLAN.md`` starts with (one per section).

    >>> get_plan_headers().splitlines()[0]
    '# 1. OBJECTIVE'
    """
    return plan_headers()


PLANNING_SYSTEM_PROMPT = (
    "You are a planning agent. Study the task and the workspace, then write an implementation "
    "plan for another agent to carry out. You can find files by name (glob), search their "
    "contents (grep) and view them; the only file you may change is the plan, PLAN.md, whose "
    "path the planning_file_editor tool states. Do not implement anything yourself. Fill in "
    "every section of PLAN.md, then answer with a short summary of the plan.\n\n"
    + format_plan_structure()
)
"""The planning agent's system prompt (cowconv's words for OpenHands' planning prompt)."""


def get_planning_tools(plan_path: str | None = None) -> list[Tool]:
    """``glob``, ``grep`` and ``planning_file_editor`` (with ``plan_path`` when given).

    >>> [tool.name for tool in get_planning_tools()]
    ['glob', 'grep', 'planning_file_editor']
    >>> get_planning_tools("/work/PLAN.md")[2].params["plan_path"]
    '/work/PLAN.md'
    """
    editor = {"plan_path": plan_path} if plan_path else {}
    return [Tool(name="glob"), Tool(name="grep"), Tool(name="planning_file_editor", params=editor)]


def get_planning_condenser(llm: LLM) -> LLMSummarizingCondenser:
    """A condenser that keeps more context than the default: 100 events, the first 6 kept.

    >>> get_planning_condenser(LLM(model="openai/gpt-4o")).keep_first
    6
    """
    return LLMSummarizingCondenser(llm=llm, max_size=100, keep_first=6)


def get_planning_agent(llm: LLM) -> Agent:
    """The planning agent for ``llm``: read-only search tools, the plan editor, its prompt.

    Its condenser summarises with a copy of ``llm`` whose ``usage_id`` is
    ``"planning_condenser"``.

    >>> get_planning_agent(LLM(model="openai/gpt-4o")).system_prompt.startswith("You are a plan")
    True
    """
    return Agent(
        llm=llm,
        tools=get_planning_tools(),
        system_prompt=PLANNING_SYSTEM_PROMPT,
        condenser=get_planning_condenser(llm.model_copy(update={"usage_id": "planning_condenser"})),
    )
