"""Built-in tools, each in its own module and registered under its name.

>>> from cowconv.tools.terminal import TerminalTool
>>> TerminalTool.name
'terminal'

An agent refers to a tool by name (``Tool(name="terminal")``); the
registry imports the built-in module on first use, so importing it yourself
is only needed for the class (its ``name``, ``Params``, ``Settings``).
"""

from cowconv._lazy import lazy_attributes

# OpenHands' SDK's ``openhands.tools`` names, loaded on first use (the tool modules register
# their tools when imported, and the task tool starts conversations: a higher floor).
_LAZY = {
    "DelegationVisualizer": "cowconv.tools.delegate",
    "TaskToolSet": "cowconv.tools.task",
    "WorkflowToolSet": "cowconv.tools.workflow",
    "register_builtins_agents": "cowconv.subagent.builtins",
}

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

__all__ = ["DelegationVisualizer", "TaskToolSet", "WorkflowToolSet", "register_builtins_agents"]
