"""``TaskToolSet``: the tool through which an agent starts a sub-agent on a task.

>>> from cowconv import LLM, Agent, Conversation, Tool
>>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name=TaskToolSet.name)])
>>> [tool.name for tool in TaskToolSet.create(Conversation(agent=agent, workspace=".").state)]
['task']

The model calls ``task`` with a prompt and the type of agent
(:func:`~cowconv.subagent.register_agent`); the sub-agent runs as a child
conversation in the same workspace and the call's observation
(:class:`TaskObservation`) is its final answer. The observation event also
records every event the child recorded during the call (``extra["task"]``)
and the parent's stats count the child's cost under ``task:<task id>``, so
the child is part of the parent's history: it is stored with it, and a
fork of the parent takes it along as a deep copy would (see
:mod:`cowconv.tools.task.manager`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.agent.tools import DeclaredResources, ToolDefinition, ToolResult, register_tool
from cowconv.core.events import Event
from cowconv.core.message import TextContent
from cowconv.core.state import DEFAULT_MAX_ITERATION_PER_RUN
from cowconv.core.workspace import Workspace
from cowconv.subagent.registry import get_factory_info, get_registered_agent_definitions
from cowconv.tools.task.executor import TaskExecutor
from cowconv.tools.task.manager import TASK_RECORD_KEY, ConfirmationHandler, TaskManager
from cowconv.tools.task.schema import TaskAction, TaskObservation

__all__ = ["TASK_TOOL_DESCRIPTION", "TASK_TOOL_EXAMPLES", "TaskTool", "TaskToolSet"]

TASK_TOOL_DESCRIPTION: Final = """Start a sub-agent on a self-contained, multi-step task.

A sub-agent works on its own, in the same workspace, and reports back to you: its final answer \
is what this tool returns. Use one when a task benefits from a separate agent (exploring a \
codebase, running and summarising tests, work that needs a specialist); each one has overhead, \
so do simple lookups and single edits yourself.

Agent types you can start (`subagent_type`), and their tools:
{agent_types_info}

Write a detailed prompt: what to do, the files, names or errors involved, and what to report \
back. To continue an earlier task with its history, pass its task ID as `resume`.
{task_tool_examples}"""

#: An example of a good prompt for a built-in agent, shown when that agent is registered.
TASK_TOOL_EXAMPLES: Final = {
    "code-explorer": (
        'Example: subagent_type="code-explorer", prompt="Find where the cache is invalidated '
        'and list the callers with file paths and line numbers."'
    ),
    "bash-runner": (
        'Example: subagent_type="bash-runner", prompt="Run the unit tests and report the '
        'counts and each failure with its cause."'
    ),
}


class TaskTool(ToolDefinition[TaskAction, TaskObservation]):
    """The ``task`` tool: start (or resume) a sub-agent task and answer its result."""

    user_selectable: ClassVar[bool] = False

    @classmethod
    def create(  # type: ignore[override]
        cls, executor: TaskExecutor, description: str
    ) -> Sequence[TaskTool]:
        """The one ``task`` tool, running its calls with ``executor``."""
        if not isinstance(executor, TaskExecutor):
            raise InvalidTypeError(
                f"TaskTool.create() takes a TaskExecutor, got {type(executor).__name__}"
            )
        return [
            cls(
                action_type=TaskAction,
                observation_type=TaskObservation,
                description=description,
                executor=executor,
            )
        ]

    @property
    def task_executor(self) -> TaskExecutor:
        """The executor running this tool's tasks."""
        executor = self.executor
        if not isinstance(executor, TaskExecutor):
            raise InvalidTypeError(f"the task tool needs a TaskExecutor, got {executor!r}")
        return executor

    def declared_resources(self, action: Any) -> DeclaredResources:
        """None: tasks run beside each other and beside any tool (each child has its own state)."""
        return DeclaredResources(keys=(), declared=True)

    def execute(self, params: TaskAction) -> ToolResult:
        """Run the task; the result records the child's new events and what it cost."""
        outcome = self.task_executor.run(params)
        observation = outcome.observation
        text = "".join(
            part.text for part in observation.to_llm_content if isinstance(part, TextContent)
        )
        run = outcome.run
        if run is None:
            return ToolResult(output=text, observation=observation)
        record: Mapping[str, Any] = {
            TASK_RECORD_KEY: {
                "task_id": run.task.id,
                "conversation_id": run.task.conversation_id,
                "subagent": run.subagent,
                "events": [event.model_dump(mode="json") for event in run.events],
            }
        }
        return ToolResult(
            output=text,
            observation=observation,
            extra=record,
            usage={f"task:{run.task.id}": run.usage},
        )

    def restore(self, events: Sequence[Event]) -> None:
        """Take up the tasks recorded in the conversation's history (a fork's: the fork's)."""
        self.task_executor.manager.restore(events)


class TaskToolSet(ToolDefinition[TaskAction, TaskObservation]):
    """The task tool set: ``Tool(name=TaskToolSet.name)`` gives an agent the ``task`` tool.

    Its description lists the sub-agents registered when the tools are made.
    """

    catalog_description: ClassVar[str] = "Delegate a self-contained sub-task to a separate agent."

    @classmethod
    def create(  # type: ignore[override]
        cls,
        conv_state: Any = None,
        confirmation_handler: ConfirmationHandler | None = None,
        sub_agent_scope: Any = None,
    ) -> list[ToolDefinition[Any, Any]]:
        """The ``task`` tool for a conversation in ``conv_state`` (its workspace and LLM).

        Without a state (``None``) the tool describes itself but starts no task.

        ``confirmation_handler`` is accepted for OpenHands' SDK (cowconv
        asks no confirmation); a ``sub_agent_scope`` that restricts the
        sub-agents is refused (not in cowconv yet).
        """
        workspace = getattr(conv_state, "workspace", None)
        agent = getattr(conv_state, "agent", None)
        if conv_state is not None and (not isinstance(workspace, Workspace) or agent is None):
            raise InvalidTypeError(
                f"TaskToolSet.create() takes a conversation state, got {type(conv_state).__name__}"
            )
        if sub_agent_scope is not None and any(
            bool(value)
            for value in (
                sub_agent_scope.values()
                if isinstance(sub_agent_scope, Mapping)
                else vars(sub_agent_scope).values()
            )
        ):
            raise InvalidValueError(
                "TaskToolSet(sub_agent_scope=...) restricting the sub-agents is not in cowconv yet"
            )
        offered = {definition.name for definition in get_registered_agent_definitions()}
        description = TASK_TOOL_DESCRIPTION.format(
            agent_types_info=get_factory_info(),
            task_tool_examples="".join(
                f"\n{example}" for name, example in TASK_TOOL_EXAMPLES.items() if name in offered
            ),
        )
        manager = TaskManager(
            workspace,
            None if agent is None else agent.llm,
            max_iteration_per_run=DEFAULT_MAX_ITERATION_PER_RUN,
            confirmation_handler=confirmation_handler,
        )
        return list(TaskTool.create(executor=TaskExecutor(manager), description=description))


register_tool(TaskToolSet.name, TaskToolSet)
register_tool(TaskTool.name, TaskTool)
