"""Actions and observations as OpenHands' SDK defines them: frozen, ``kind``-discriminated models.

An :class:`Action` is what a tool call asks for: its fields are the tool's
arguments. An :class:`Observation` is what the tool answered: content parts
(text or images) and whether it is an error. Each is a family (see
:mod:`cowconv.core.kinds`): a subclass is registered under its class name
when it is defined, and validating through the base class returns the
subclass the JSON's ``kind`` names.

>>> class SearchAction(Action):
...     pattern: str
>>> class SearchObservation(Observation):
...     pass
>>> action = SearchAction(pattern="fork")
>>> type(Action.model_validate(action.model_dump())).__name__
'SearchAction'
>>> observation = SearchObservation.from_text("a.py:1: fork", is_error=False)
>>> observation.text, observation.is_error
('a.py:1: fork', False)
>>> [part.text for part in SearchObservation.from_text("boom", is_error=True).to_llm_content]
['[An error occurred during execution.]\\n', 'boom']
"""

import importlib
from typing import Any, ClassVar, Self

from pydantic import Field

from cowconv.core.kinds import Kinded
from cowconv.core.message import ImageContent, TextContent

__all__ = ["Action", "Observation", "Schema"]

# The actions and observations of cowconv's built-in tools -> the module defining them, so a
# history read before the tool was used in this process (a reopened store, an agent server's
# client, a worker process) still finds their classes. The name is only imported, never
# called: the core does not depend on the tools.
_BUILTIN_KINDS: dict[str, str] = {
    "FileEditorAction": "cowconv.tools.file_editor",
    "FileEditorObservation": "cowconv.tools.file_editor",
    "GlobAction": "cowconv.tools.search",
    "GlobObservation": "cowconv.tools.search",
    "GrepAction": "cowconv.tools.search",
    "GrepObservation": "cowconv.tools.search",
    "TaskTrackerAction": "cowconv.tools.task_tracker",
    "TaskTrackerObservation": "cowconv.tools.task_tracker",
    "TaskAction": "cowconv.tools.task",
    "TaskObservation": "cowconv.tools.task",
    "TerminalAction": "cowconv.tools.terminal",
    "TerminalObservation": "cowconv.tools.terminal",
    "WorkflowAction": "cowconv.tools.workflow",
    "WorkflowObservation": "cowconv.tools.workflow",
}


class Schema(Kinded):
    """Base of :class:`Action` and :class:`Observation`: a frozen model with a ``kind``.

    >>> issubclass(Action, Schema) and issubclass(Observation, Schema)
    True

    A built-in tool's kind is found before its module was imported:

    >>> type(Observation.model_validate({"kind": "TerminalObservation"})).__name__
    'TerminalObservation'
    """

    @classmethod
    def _unknown_kind(cls, kind: str, data: dict[str, Any]) -> tuple[type[Kinded], dict[str, Any]]:
        module = _BUILTIN_KINDS.get(kind)
        if module is not None:
            importlib.import_module(module)
            target = cls._resolve_kind(kind)
            if target is not None:
                return target, data
        return super()._unknown_kind(kind, data)


class Action(Schema):
    """Base class of the arguments a tool call carries (OpenHands' ``Action``).

    >>> class ListAction(Action):
    ...     path: str = "."
    >>> ListAction().model_dump()
    {'path': '.', 'kind': 'ListAction'}
    """

    __kind_family__: ClassVar[bool] = True


class Observation(Schema):
    """Base class of what a tool answers (OpenHands' ``Observation``).

    ``content`` holds text and image parts; ``is_error`` says the tool
    failed, and the model then sees :attr:`ERROR_MESSAGE_HEADER` first.

    >>> Observation.from_text("done").text
    'done'
    """

    __kind_family__: ClassVar[bool] = True

    ERROR_MESSAGE_HEADER: ClassVar[str] = "[An error occurred during execution.]\n"

    content: tuple[TextContent | ImageContent, ...] = Field(
        default=(),
        description="What the tool returned, as text and image parts (an error's text too).",
    )
    is_error: bool = Field(default=False, description="Whether the tool call failed.")

    @classmethod
    def from_text(cls, text: str, is_error: bool = False, **kwargs: Any) -> Self:
        """An observation whose content is one text part.

        >>> Observation.from_text("exit 1", is_error=True).is_error
        True
        """
        return cls(content=(TextContent(text=text),), is_error=is_error, **kwargs)

    @property
    def text(self) -> str:
        """The text parts of ``content`` joined.

        >>> Observation(content=[TextContent(text="a"), TextContent(text="b")]).text
        'ab'
        """
        return "".join(part.text for part in self.content if isinstance(part, TextContent))

    @property
    def to_llm_content(self) -> tuple[TextContent | ImageContent, ...]:
        """The content the model sees: the error header first when ``is_error``.

        >>> len(Observation.from_text("x").to_llm_content)
        1
        """
        if self.is_error:
            return (TextContent(text=self.ERROR_MESSAGE_HEADER), *self.content)
        return self.content
