"""The sub-agents cowconv brings: ``general-purpose``, ``code-explorer``, ``bash-runner``.

>>> sorted(definition.name for definition in builtin_agent_definitions())
['bash-runner', 'code-explorer', 'general-purpose']

:func:`register_builtins_agents` registers them (OpenHands' SDK's name and
behaviour: a name registered already is left as it is). OpenHands' fourth,
``web-researcher``, needs browser and web-search tools cowconv does not
have, so it is not among them.
"""

from __future__ import annotations

from cowconv.subagent.definition import AgentDefinition
from cowconv.subagent.registry import agent_definition_to_factory, register_agent_if_absent

__all__ = ["builtin_agent_definitions", "register_builtins_agents"]

_REPORT = (
    "When you are done, answer with a concise report for the agent that started you: what you "
    "found or did, with file paths, counts and errors; never raw output."
)


def builtin_agent_definitions() -> list[AgentDefinition]:
    """The definitions of the built-in sub-agents (``level="builtin"``).

    >>> [d.tools for d in builtin_agent_definitions() if d.name == "bash-runner"]
    [['terminal']]
    """
    return [
        AgentDefinition(
            name="general-purpose",
            description=(
                "General-purpose sub-agent: reads and edits code, runs shell commands and "
                "tracks its tasks. Use it when a task needs several of these or fits no "
                "specialised agent."
            ),
            tools=["terminal", "file_editor", "task_tracker"],
            system_prompt=(
                "You are a general-purpose agent working on a task another agent gave you. "
                "Use the terminal, the file editor and the task tracker to finish it. " + _REPORT
            ),
            level="builtin",
        ),
        AgentDefinition(
            name="code-explorer",
            description=(
                "Explores unfamiliar code without changing it, and reports file paths, line "
                "numbers and snippets."
            ),
            tools=["terminal"],
            system_prompt=(
                "You explore a codebase with read-only shell commands (ls, find, grep, cat, "
                "sed -n, git log, git show). Never create, change or delete a file. " + _REPORT
            ),
            level="builtin",
        ),
        AgentDefinition(
            name="bash-runner",
            description=(
                "Runs shell commands (tests, builds, linters, git) and reports what matters: "
                "counts, failures and their causes."
            ),
            tools=["terminal"],
            system_prompt=(
                "You run shell commands in the terminal for another agent and distil their "
                "output. For tests: how many ran, passed and failed, and each failure's cause. "
                + _REPORT
            ),
            level="builtin",
        ),
    ]


def register_builtins_agents(enable_browser: bool = True) -> list[str]:
    """Register the built-in sub-agents not registered yet; the names registered.

    ``enable_browser`` is OpenHands' SDK's switch for its browser agent,
    which cowconv does not have (accepted either way).

    >>> "bash-runner" in register_builtins_agents() + register_builtins_agents()
    True
    """
    registered = []
    for definition in builtin_agent_definitions():
        factory = agent_definition_to_factory(definition)
        if register_agent_if_absent(definition.name, factory, definition):
            registered.append(definition.name)
    return registered
