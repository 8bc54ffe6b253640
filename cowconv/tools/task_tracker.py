"""``TaskTrackerTool``: the agent's task list, as OpenHands' SDK's ``task_tracker`` tool.

>>> executor = TaskTrackerExecutor()
>>> executor(TaskTrackerAction(command="view")).text
'No task list found. Use the "plan" command to create one.'
>>> plan = TaskTrackerAction(command="plan", task_list=[{"title": "Write tests"}])
>>> executor(plan).text
'Task list has been updated with 1 item(s).'
>>> print(executor(TaskTrackerAction(command="view")).text)
# Task List
<BLANKLINE>
1. ⏳ Write tests

The model sends one of two commands: ``plan`` replaces the whole list
(each task a title, notes and a status: ``todo``, ``in_progress`` or
``done``; other agents' names for these, such as ``completed``, are
accepted), ``view`` shows it. The names, the schema the model sees and the
texts it reads back are OpenHands' SDK's.

**Where the list lives.** OpenHands' SDK keeps it in its executor and in a
``TASKS.json`` file in the conversation's persistence directory. cowconv
keeps it in the conversation's own history: every answer of the tool is a
:class:`TaskTrackerObservation` holding the whole list, and a tool made for
a conversation starts from the last one (:meth:`TaskTrackerTool.restore`).
So a fork starts with the list its source had at the fork point, and
neither's later plans reach the other; a conversation reopened from a
store, or run by the agent server, has its list back. An executor built
directly with ``save_dir`` still reads and writes ``TASKS.json`` there, as
OpenHands' does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from pydantic import ConfigDict, Field, ValidationError, field_validator
from pyrsistent import pmap

from cowconv._exceptions import InvalidTypeError
from cowconv.agent.tools import ToolDefinition, ToolExecutor, register_tool
from cowconv.core.events import Event, ObservationEvent
from cowconv.core.kinds import FrozenValue
from cowconv.core.message import TextContent
from cowconv.core.schema import Action, Observation

__all__ = [
    "TASK_TRACKER_DESCRIPTION",
    "TaskItem",
    "TaskTrackerAction",
    "TaskTrackerExecutor",
    "TaskTrackerObservation",
    "TaskTrackerStatusType",
    "TaskTrackerTool",
]

TaskTrackerStatusType = Literal["todo", "in_progress", "done"]
"""The status of a task: not started, being worked on (one at a time), finished."""

# What models trained on other agents' to-do tools send for these statuses (OpenHands' list).
_STATUS_ALIASES: Mapping[str, TaskTrackerStatusType] = {
    "pending": "todo",
    "to_do": "todo",
    "completed": "done",
    "complete": "done",
}
_STATUS_ICONS: Mapping[str, str] = {"todo": "⏳", "in_progress": "🔄", "done": "✅"}


class TaskItem(FrozenValue):
    """One task of the list: a title, optional notes, a status.

    A status is read case-insensitively, with ``-`` or a space for ``_``,
    and the aliases other agents use (``pending``, ``completed``...).

    >>> TaskItem(title="Fix the parser", status="In Progress").status
    'in_progress'
    >>> TaskItem(title="Ship it", status="completed").status
    'done'
    """

    # As OpenHands' TaskItem: keys a model adds (an "id") are ignored, not refused.
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    title: str = Field(..., description="A brief title for the task.")
    notes: str = Field("", description="Additional details or notes about the task.")
    status: TaskTrackerStatusType = Field(
        "todo",
        description="The current status of the task. One of 'todo', 'in_progress', or 'done'.",
    )

    @field_validator("status", mode="before")
    @classmethod
    def _normalize_status(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        normalized = value.strip().lower().replace("-", "_").replace(" ", "_")
        if normalized in get_args(TaskTrackerStatusType):
            return normalized
        return _STATUS_ALIASES.get(normalized, value)


class TaskTrackerAction(Action):
    """A call of the task tracker: ``view`` the list, or ``plan`` (replace) it.

    >>> TaskTrackerAction().command
    'view'
    >>> len(TaskTrackerAction(command="plan", task_list=[{"title": "a"}]).task_list)
    1
    """

    command: Literal["view", "plan"] = Field(
        default="view",
        description="The command to execute. `view` shows the current task list. `plan` "
        "creates or updates the task list based on provided requirements and progress. "
        "Always `view` the current list before making changes.",
    )
    task_list: tuple[TaskItem, ...] = Field(
        default=(),
        description="The full task list. Required parameter of `plan` command.",
    )


class TaskTrackerObservation(Observation):
    """The tracker's answer: the text the model reads, the command, and the whole list.

    >>> answer = TaskTrackerObservation.from_text("ok", command="view")
    >>> answer.command, answer.task_list
    ('view', ())
    """

    command: Literal["view", "plan"] = Field(
        description='The command that was executed: "view" or "plan".'
    )
    task_list: tuple[TaskItem, ...] = Field(default=(), description="The current task list")


def _format_task_list(task_list: Sequence[TaskItem]) -> str:
    """The list as the model reads it after ``view`` (OpenHands' layout)."""
    lines = ["# Task List", ""]
    for number, task in enumerate(task_list, 1):
        lines.append(f"{number}. {_STATUS_ICONS.get(task.status, '⏳')} {task.title}")
        if task.notes:
            lines.append(f"   {task.notes}")
        lines.append("")
    return "\n".join(lines).strip()


class TaskTrackerExecutor(ToolExecutor[TaskTrackerAction, TaskTrackerObservation]):
    """Holds one conversation's task list and answers ``view`` and ``plan``.

    With ``save_dir``, the list is read from ``save_dir/TASKS.json`` when
    the executor is made and written there after every ``plan`` (OpenHands'
    SDK's behaviour). :class:`TaskTrackerTool` gives each conversation an
    executor without a file: its list comes from the conversation's history.

    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> _ = TaskTrackerExecutor(save_dir=directory)(
    ...     TaskTrackerAction(command="plan", task_list=[{"title": "a", "status": "done"}]))
    >>> [task.status for task in TaskTrackerExecutor(save_dir=directory).task_list]
    ['done']
    """

    def __init__(self, save_dir: str | Path | None = None) -> None:
        self.save_dir = Path(save_dir) if save_dir else None
        self._lock = threading.Lock()
        self._task_list: tuple[TaskItem, ...] = ()
        if self.save_dir is not None:
            self._task_list = self._load()

    @property
    def task_list(self) -> tuple[TaskItem, ...]:
        """The current list (a tuple of frozen items: safe to keep)."""
        return self._task_list

    def __call__(
        self, action: TaskTrackerAction, conversation: Any = None
    ) -> TaskTrackerObservation:
        """Answer ``action``: ``plan`` replaces the list, ``view`` shows it."""
        if action.command == "plan":
            with self._lock:
                self._task_list = tuple(action.task_list)
                if self.save_dir is not None:
                    self._save()
            return TaskTrackerObservation.from_text(
                f"Task list has been updated with {len(action.task_list)} item(s).",
                command="plan",
                task_list=action.task_list,
            )
        if action.command == "view":
            task_list = self._task_list
            if not task_list:
                return TaskTrackerObservation.from_text(
                    'No task list found. Use the "plan" command to create one.',
                    command="view",
                    task_list=(),
                )
            return TaskTrackerObservation.from_text(
                _format_task_list(task_list), command="view", task_list=task_list
            )
        # Unreachable through validation (the command is a Literal); an action built with
        # model_construct still gets OpenHands' answer.
        unknown = f'Unknown command: {action.command}. Supported commands are "view" and "plan".'
        return TaskTrackerObservation.model_construct(
            content=(TextContent(text=unknown),), is_error=True, command=action.command
        )

    def restore(self, events: Sequence[Event], tool_name: str = "task_tracker") -> None:
        """Take the list of the last successful answer of ``tool_name`` in ``events``.

        Without one, the list is empty (or, with ``save_dir``, the file's).

        >>> from cowconv import ObservationEvent
        >>> answer = TaskTrackerObservation.from_text(
        ...     "ok", command="plan", task_list=[TaskItem(title="a")])
        >>> executor = TaskTrackerExecutor()
        >>> executor.restore([ObservationEvent(tool_name="task_tracker", tool_call_id="c1",
        ...                                    observation=answer)])
        >>> [task.title for task in executor.task_list]
        ['a']
        """
        found = _last_task_list(events, tool_name)
        with self._lock:
            if found is not None:
                self._task_list = found
            elif self.save_dir is None:
                self._task_list = ()

    def _load(self) -> tuple[TaskItem, ...]:
        assert self.save_dir is not None
        path = self.save_dir / "TASKS.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return ()
        except (OSError, ValueError):
            return ()  # as OpenHands' SDK: an unreadable file starts an empty list
        try:
            return tuple(TaskItem.model_validate(item) for item in data)
        except (TypeError, ValidationError):
            return ()

    def _save(self) -> None:
        assert self.save_dir is not None
        path = self.save_dir / "TASKS.json"
        # As OpenHands' SDK: a list that cannot be written stays in memory (and in the history).
        try:
            self.save_dir.mkdir(parents=True, exist_ok=True)
            text = json.dumps(
                [task.model_dump() for task in self._task_list], indent=2, ensure_ascii=False
            )
            path.write_text(text, encoding="utf-8")
        except OSError:
            pass


def _last_task_list(events: Sequence[Event], tool_name: str) -> tuple[TaskItem, ...] | None:
    """The list of the last successful task tracker answer among ``events`` (``None``: none)."""
    for event in reversed(events):
        if not isinstance(event, ObservationEvent) or event.tool_name != tool_name:
            continue
        observation = event.observation
        if isinstance(observation, TaskTrackerObservation) and not observation.is_error:
            return observation.task_list
    return None


TASK_TRACKER_DESCRIPTION = """\
This tool provides structured task management capabilities for development workflows.
It enables systematic tracking of work items, progress monitoring, and efficient
organization of complex development activities.

The tool maintains visibility into project status and helps communicate
progress effectively to users.

## Application Guidelines

Utilize this tool in the following situations:

1. Multi-phase development work - When projects involve multiple sequential or
   parallel activities
2. Complex implementation tasks - Work requiring systematic planning and
   coordination across multiple components
3. Explicit user request for task organization - When users specifically ask
   for structured task management
4. Multiple concurrent requirements - When users present several work items
   that need coordination
5. Project initiation - Capture and organize user requirements at project start
6. Work commencement - Update task status to in_progress before beginning
   implementation. Maintain focus by limiting active work to one task
7. Task completion - Update status to done and identify any additional work
   that emerged during implementation

## Situations Where Tool Usage Is Unnecessary

Avoid using this tool when:

1. Single atomic tasks that require no decomposition
2. Trivial operations where tracking adds no organizational value
3. Simple activities completable in minimal steps
4. Pure information exchange or discussion

Note: For single straightforward tasks, proceed with direct implementation
rather than creating tracking overhead.

## Status Management and Workflow

1. **Status Values**: Track work using these states:
   - todo: Not yet initiated
   - in_progress: Currently active (maintain single focus)
   - done: Successfully completed

2. **Workflow Practices**:
   - Update status dynamically as work progresses
   - Mark completion immediately upon task finish
   - Limit active work to ONE task at any given time
   - Complete current activities before initiating new ones
   - Remove obsolete tasks from tracking entirely

3. **Completion Criteria**:
   - Mark tasks as done only when fully achieved
   - Keep status as in_progress if errors, blocks, or partial completion exist
   - Create new tasks for discovered issues or dependencies
   - Never mark done when:
       - Test suites are failing
       - Implementation remains incomplete
       - Unresolved errors persist
       - Required resources are unavailable

4. **Task Organization**:
   - Write precise, actionable descriptions
   - Decompose complex work into manageable units
   - Use descriptive, clear naming conventions

When uncertain, favor using this tool. Proactive task management demonstrates
systematic approach and ensures comprehensive requirement fulfillment."""
"""What the model is told about the tool (the guidance of OpenHands' SDK, in cowconv's words
where they differ: the worked scenarios are left out)."""


def _inline_refs(schema: Any, definitions: Mapping[str, Any]) -> Any:
    """A JSON schema as OpenHands writes a tool's: ``$ref`` inlined, no titles or defaults,
    no ``additionalProperties``, and an object's description (a class docstring) left out."""
    if isinstance(schema, list):
        return [_inline_refs(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    reference = schema.get("$ref")
    if isinstance(reference, str):
        resolved = _inline_refs(definitions[reference.rsplit("/", 1)[-1]], definitions)
        rest = _inline_refs({k: v for k, v in schema.items() if k != "$ref"}, definitions)
        return {**resolved, **rest}
    inlined: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("$defs", "title", "additionalProperties", "default"):
            continue
        if key == "description" and "properties" in schema:
            continue
        if key == "properties" and isinstance(value, dict):
            inlined[key] = {name: _inline_refs(part, definitions) for name, part in value.items()}
        else:
            inlined[key] = _inline_refs(value, definitions)
    return inlined


class TaskTrackerTool(ToolDefinition[TaskTrackerAction, TaskTrackerObservation]):
    """The ``task_tracker`` tool: a task list the agent plans and views, kept per conversation.

    ``create(conv_state)`` answers a one-tool list, as OpenHands' SDK's does;
    an agent refers to it as ``Tool(name="task_tracker")``.

    >>> [tracker] = TaskTrackerTool.create()
    >>> tracker.name
    'task_tracker'
    >>> params = tracker.to_openai_tool()["function"]["parameters"]
    >>> sorted(params["properties"]), params["properties"]["command"]["enum"]
    (['command', 'task_list'], ['view', 'plan'])
    >>> action = tracker.validate_arguments({"command": "plan", "task_list": [{"title": "a"}]})
    >>> tracker(action).text
    'Task list has been updated with 1 item(s).'
    """

    name = "task_tracker"
    #: One line for catalogues of tools (OpenHands' SDK's attribute).
    catalog_description: ClassVar[str] = "Keep a running task list to organise multi-step work."
    #: Each conversation has its own list (OpenHands' SDK's attribute).
    conversation_local: ClassVar[bool] = True

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: Any = None, params: Mapping[str, Any] | None = None, **options: Any
    ) -> list[TaskTrackerTool]:
        """A one-tool list with a fresh executor (the conversation's list comes by ``restore``).

        The tool takes no settings: any is an :class:`~cowconv.InvalidTypeError`.
        """
        settings = {**(params or {}), **options}
        if settings:
            raise InvalidTypeError(
                f"the task_tracker tool takes no settings, got {sorted(settings)}"
            )
        return [
            cls(
                description=TASK_TRACKER_DESCRIPTION,
                action_type=TaskTrackerAction,
                observation_type=TaskTrackerObservation,
                annotations=pmap(
                    {
                        "readOnlyHint": False,
                        "destructiveHint": False,
                        "idempotentHint": True,
                        "openWorldHint": False,
                    }
                ),
                executor=TaskTrackerExecutor(),
            )
        ]

    def to_openai_tool(self) -> dict[str, Any]:
        """The spec the model sees: OpenHands' schema, the task item inlined (no ``$ref``)."""
        spec = super().to_openai_tool()
        parameters = spec["function"]["parameters"]
        spec["function"]["parameters"] = _inline_refs(parameters, parameters.get("$defs", {}))
        return spec

    def restore(self, events: Sequence[Event]) -> None:
        """Start from the list of this tool's last successful answer in ``events``."""
        if isinstance(self.executor, TaskTrackerExecutor):
            self.executor.restore(events, self.name)


register_tool(TaskTrackerTool.name, TaskTrackerTool)
