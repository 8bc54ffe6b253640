"""Console visualisers: a conversation's events printed as they are recorded.

>>> import io
>>> from cowconv import MessageEvent
>>> out = io.StringIO()
>>> visualizer = DefaultConversationVisualizer(file=out, width=40)
>>> visualizer.on_event(MessageEvent(source="user", role="user", content="Analyse it."))
>>> print(out.getvalue().strip())
Message from User ──────────────────────
<BLANKLINE>
Analyse it.

A visualiser is an event callback with a name: ``Conversation(visualizer=...)``
takes a :class:`ConversationVisualizerBase` subclass or instance, or ``None``
for none. Left out, a conversation shows its events with
:class:`DefaultConversationVisualizer` when it runs interactively (standard
output is a terminal, or a Jupyter kernel is running) and prints nothing
otherwise: piped output, CI logs, the agent server and the test suite stay
quiet unless they ask for it.

rich is imported when a console visualiser is made, never by ``import cowconv``.
"""

from __future__ import annotations

import json
import os
import sys
from abc import ABC, abstractmethod
from typing import IO, TYPE_CHECKING, Any, Final

from cowconv._exceptions import InvalidTypeError
from cowconv.core.events import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    SystemPromptEvent,
)
from cowconv.core.frozen import thaw

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text

__all__ = [
    "DEFAULT_VISUALIZER",
    "ConversationVisualizerBase",
    "DefaultConversationVisualizer",
    "VisualizerSetting",
    "make_visualizer",
]


class _Default:
    """The ``visualizer=`` default: a console visualiser when interactive, else none."""

    def __repr__(self) -> str:
        return "DEFAULT_VISUALIZER"


DEFAULT_VISUALIZER: Final = _Default()
"""``Conversation(visualizer=DEFAULT_VISUALIZER)``, the default: print when interactive."""


class ConversationVisualizerBase(ABC):
    """Base class of visualisers: ``on_event`` is called with each recorded event.

    OpenHands' SDK's name. A conversation calls ``initialize(conversation)``
    once, so a visualiser can read the current ``conversation_stats``.

    >>> class Counter(ConversationVisualizerBase):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.seen = 0
    ...     def on_event(self, event):
    ...         self.seen += 1
    >>> counter = Counter()
    >>> counter(PauseEvent())  # a visualiser is an event callback too
    >>> counter.seen
    1
    """

    def __init__(self) -> None:
        self._state: Any = None

    def initialize(self, conversation: Any) -> None:
        """Attach the conversation (or a snapshot) whose stats to show; conversations call it."""
        self._state = conversation

    @property
    def conversation_stats(self) -> Any:
        """The current stats of what :meth:`initialize` attached, or ``None``."""
        if self._state is None:
            return None
        return getattr(self._state, "state", self._state).stats

    @abstractmethod
    def on_event(self, event: Event) -> None:
        """Show one event."""

    def __call__(self, event: Event) -> None:
        self.on_event(event)


_USER = "gold3"
_AGENT = "blue"
_SYSTEM = "magenta"
_OBSERVATION = "yellow"
_ERROR = "red"
_PAUSE = "bright_yellow"

_MESSAGE_TITLES = {
    "user": ("Message from User", _USER),
    "agent": ("Message from Agent", _AGENT),
    "environment": ("Message from Environment", _SYSTEM),
}


def _describe(event: Event) -> tuple[str, str, str]:
    """(title, colour, body) of an event, as OpenHands' SDK titles them."""
    if isinstance(event, MessageEvent):
        title, colour = _MESSAGE_TITLES[event.source]
        return title, colour, event.text
    if isinstance(event, ActionEvent):
        arguments = json.dumps(_plain(event.arguments), ensure_ascii=False, sort_keys=True)
        lines = [f"Thought: {event.thought}"] if event.thought else []
        lines += [f"Action: {event.tool_name}", f"Arguments: {arguments}"]
        return "Agent Action", _AGENT, "\n".join(lines)
    if isinstance(event, ObservationEvent):
        lines = [f"Tool: {event.tool_name}", f"Result: {event.output}"]
        if event.exit_code is not None:
            lines.append(f"Exit code: {event.exit_code}")
        return "Observation", _OBSERVATION, "\n".join(lines)
    if isinstance(event, AgentErrorEvent):
        return "Agent Error", _ERROR, event.error
    if isinstance(event, PauseEvent):
        return "User Paused", _PAUSE, "Conversation paused."
    if isinstance(event, SystemPromptEvent):
        names = ", ".join(str(tool.get("function", tool).get("name", "?")) for tool in event.tools)
        body = event.system_prompt + (f"\n\nTools: {names}" if names else "")
        return "System Prompt", _SYSTEM, body
    return type(event).__name__, _SYSTEM, event.model_dump_json(exclude={"id", "timestamp"})


def _plain(value: Any) -> Any:
    return thaw(value)


class DefaultConversationVisualizer(ConversationVisualizerBase):
    """Prints every event as a titled, coloured block (rich), like OpenHands' SDK's.

    ``file`` defaults to standard output; ``width`` to the terminal's.
    ``skip_user_messages`` leaves out the messages the user sent.

    >>> import io
    >>> from cowconv import ActionEvent
    >>> out = io.StringIO()
    >>> visualizer = DefaultConversationVisualizer(file=out, width=40)
    >>> visualizer.on_event(
    ...     ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={"command": "ls"})
    ... )
    >>> print(out.getvalue().strip())
    Agent Action ───────────────────────────
    <BLANKLINE>
    Action: terminal
    Arguments: {"command": "ls"}
    """

    def __init__(
        self,
        *,
        file: IO[str] | None = None,
        width: int | None = None,
        skip_user_messages: bool = False,
    ) -> None:
        super().__init__()
        from rich.console import Console

        self._skip_user_messages = skip_user_messages
        # Console(file=None) follows sys.stdout as it is when printing (pytest's capture too).
        self._console: Console = Console(file=file, width=width, highlight=False)

    def on_event(self, event: Event) -> None:
        """Print one event."""
        if self._skip_user_messages and isinstance(event, MessageEvent) and event.source == "user":
            return
        self._console.print(self._render(event))

    def _title(self, event: Event, title: str) -> str:
        """The title of an event's block (``title``, OpenHands' SDK's; subclasses rename)."""
        return title

    def _body(self, body: str) -> Text:
        """The text of an event's block (plain here; subclasses style it)."""
        from rich.text import Text

        return Text(body)

    def _render(self, event: Event) -> RenderableType:
        from rich.console import Group
        from rich.rule import Rule
        from rich.text import Text

        title, colour, body = _describe(event)
        parts: list[RenderableType] = [
            Rule(
                Text(self._title(event, title), style=f"bold {colour}"), style=colour, align="left"
            ),
            Text(),
            self._body(body),
        ]
        stats = self.conversation_stats
        if stats is not None and isinstance(event, MessageEvent | ActionEvent):
            if stats.accumulated_cost or stats.prompt_tokens:
                parts.append(
                    Text(
                        f"Tokens: ↑ {stats.prompt_tokens} ↓ {stats.completion_tokens} · "
                        f"Cost: ${stats.accumulated_cost:.4f}",
                        style="dim",
                    )
                )
        return Group(*parts)


VisualizerSetting = type[ConversationVisualizerBase] | ConversationVisualizerBase | _Default | None
"""What ``Conversation(visualizer=...)`` takes."""


def _interactive() -> bool:
    """Whether a person is watching standard output (a terminal or a Jupyter kernel)."""
    if os.environ.get("COWCONV_VISUALIZER", "").lower() in ("0", "off", "false", "no"):
        return False
    if "PYTEST_CURRENT_TEST" in os.environ:
        return False  # a test's output stays clean even under `pytest -s`
    stdout = sys.stdout
    try:
        if stdout is not None and stdout.isatty():
            return True
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
    return "ipykernel" in sys.modules


def make_visualizer(setting: object) -> ConversationVisualizerBase | None:
    """The visualiser ``Conversation(visualizer=setting)`` uses, or ``None``.

    A class is instantiated, an instance used as is; ``None`` means none;
    :data:`DEFAULT_VISUALIZER` means a console visualiser when interactive.

    >>> make_visualizer(None) is None
    True
    >>> type(make_visualizer(DefaultConversationVisualizer)).__name__
    'DefaultConversationVisualizer'
    >>> make_visualizer("rich")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidTypeError: visualizer takes a ... or None; got 'rich'
    """
    if setting is None:
        return None
    if isinstance(setting, _Default):
        return DefaultConversationVisualizer() if _interactive() else None
    if isinstance(setting, ConversationVisualizerBase):
        return setting
    if isinstance(setting, type) and issubclass(setting, ConversationVisualizerBase):
        return setting()
    raise InvalidTypeError(
        f"visualizer takes a ConversationVisualizerBase class or instance, or None; got {setting!r}"
    )
