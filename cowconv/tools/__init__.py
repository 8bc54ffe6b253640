"""Built-in tools, each in its own module and registered under its name.

>>> from cowconv.tools.terminal import TerminalTool
>>> TerminalTool.name
'terminal'

An agent refers to a tool by name (``Tool(name="terminal")``); the
registry imports the built-in module on first use, so importing it yourself
is only needed for the class (its ``name``, ``Params``, ``Settings``).
"""
