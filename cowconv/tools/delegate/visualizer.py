"""``DelegationVisualizer``: shows who speaks to whom when agents delegate to sub-agents.

>>> import io
>>> from cowconv import ActionEvent
>>> out = io.StringIO()
>>> visualizer = DelegationVisualizer(name="Delegator", file=out, width=44)
>>> visualizer.on_event(
...     ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={"command": "ls"}))
>>> print(out.getvalue().splitlines()[0])
Delegator Agent Action ─────────────────────
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from cowconv.core.events import (
    ActionEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
)
from cowconv.core.frozen import thaw
from cowconv.tools.task.manager import TASK_RECORD_KEY
from cowconv.tools.workflow.definition import WORKFLOW_RECORD_KEY
from cowconv.visualizer import DefaultConversationVisualizer

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["DelegationVisualizer"]


class DelegationVisualizer(DefaultConversationVisualizer):
    """Prints events with the agent's name in their titles, and sub-agents' events under theirs.

    ``name`` is the agent's (``"lodging_expert"`` shows as "Lodging
    Expert"); ``highlight_regex`` maps patterns to rich styles for the
    text; ``skip_user_messages`` leaves out the user's messages. A task
    tool's observation (:mod:`cowconv.tools.task`) carries what its
    sub-agent recorded: those events are shown after it, titled with the
    task's description (or id), as a sub-visualizer
    (:meth:`create_sub_visualizer`) would show them; so are a workflow's
    sub-agents (:mod:`cowconv.tools.workflow`), titled with the workflow's
    name and the task's id.

    >>> DelegationVisualizer._format_agent_name("lodging_expert")
    'Lodging Expert'
    >>> DelegationVisualizer._format_agent_name("MainAgent")
    'Main Agent'
    """

    def __init__(
        self,
        name: str | None = None,
        highlight_regex: dict[str, str] | None = None,
        skip_user_messages: bool = False,
        *,
        file: IO[str] | None = None,
        width: int | None = None,
    ) -> None:
        super().__init__(file=file, width=width, skip_user_messages=skip_user_messages)
        self._name = name
        self._highlight_patterns: dict[str, str] = dict(highlight_regex or {})
        self._last_sender: str | None = None
        self._task_labels: dict[str, str] = {}

    def create_sub_visualizer(self, agent_id: str) -> DelegationVisualizer:
        """A visualiser for a sub-agent named ``agent_id``, printing where this one prints.

        >>> DelegationVisualizer(name="Main").create_sub_visualizer("helper")._name
        'helper'
        """
        sub = DelegationVisualizer(
            name=agent_id,
            highlight_regex=self._highlight_patterns,
            skip_user_messages=self._skip_user_messages,
        )
        sub._console = self._console
        return sub

    @staticmethod
    def _format_agent_name(name: str) -> str:
        """``snake_case`` or ``CamelCase`` as Title Case; a name with spaces stays as it is."""
        if " " in name:
            return name
        if "_" in name:
            return name.replace("_", " ").title()
        return re.sub(r"(?<!^)(?=[A-Z])", " ", name).title()

    @property
    def _agent(self) -> str:
        return self._format_agent_name(self._name) if self._name else "Agent"

    def on_event(self, event: Event) -> None:
        """Print one event, then the events a sub-agent recorded for it, if any."""
        if isinstance(event, ActionEvent) and isinstance(event.arguments, Mapping):
            label = event.arguments.get("description")
            if isinstance(label, str) and label:
                self._task_labels[event.tool_call_id] = label
        super().on_event(event)
        if isinstance(event, MessageEvent) and event.source == "user":
            self._last_sender = event.sender
        if isinstance(event, ObservationEvent):
            self._show_sub_agent(event)

    def _show_sub_agent(self, event: ObservationEvent) -> None:
        extra = event.extra if isinstance(event.extra, Mapping) else {}
        label = self._task_labels.pop(event.tool_call_id, None)
        record = extra.get(TASK_RECORD_KEY)
        if isinstance(record, Mapping):
            self._show_child(label or str(record.get("task_id")), record)
        workflow = extra.get(WORKFLOW_RECORD_KEY)
        if isinstance(workflow, Mapping):
            for task in workflow.get("tasks", ()):
                self._show_child(f"{workflow.get('name')} {task.get('task_id')}", task)

    def _show_child(self, label: str, record: Mapping[str, Any]) -> None:
        sub = self.create_sub_visualizer(label)
        for item in record.get("events", ()):
            sub.on_event(Event.model_validate(thaw(item)))

    def _title(self, event: Event, title: str) -> str:
        agent = self._agent
        if isinstance(event, SystemPromptEvent):
            return f"{agent} Agent System Prompt"
        if isinstance(event, ActionEvent):
            return f"{agent} Agent Action"
        if isinstance(event, ObservationEvent):
            return f"{agent} Agent Observation"
        if isinstance(event, MessageEvent):
            if event.source == "user":
                if event.sender:
                    return f"{self._format_agent_name(event.sender)} Agent Message to {agent} Agent"
                return f"User Message to {agent} Agent"
            if event.source == "agent":
                if self._last_sender:
                    recipient = self._format_agent_name(self._last_sender)
                    return f"{agent} Agent Message to {recipient} Agent"
                return f"Message from {agent} Agent to User"
            return f"Message from {event.source.title()} to {agent} Agent"
        return title

    def _body(self, body: str) -> Text:
        text = super()._body(body)
        for pattern, style in self._highlight_patterns.items():
            text.highlight_regex(pattern, style)
        return text

    def __repr__(self) -> str:
        return f"DelegationVisualizer(name={self._name!r})"
