"""``WorkflowToolSet``: the model writes a Python workflow that fans sub-agents out, and runs it.

>>> from cowconv import LLM, Agent, Conversation, Tool
>>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name=WorkflowToolSet.name)])
>>> state = Conversation(agent=agent, workspace=".").state
>>> [tool.name for tool in WorkflowToolSet.create(state)]
['workflow']

A call (``name``, ``script``, ``max_concurrency``) runs the script's
``async def main(wf)`` (see :mod:`cowconv.tools.workflow.script`); each
sub-agent it starts is a child conversation in the conversation's
workspace. The observation is what ``main`` returned; the observation
event records every child's events (``extra["workflow"]["tasks"]``) and
the stats count each child's cost under ``task:<task id>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from pydantic import Field

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.agent.tools import (
    DeclaredResources,
    ToolDefinition,
    ToolExecutor,
    ToolResult,
    register_tool,
)
from cowconv.core.llm import LLM
from cowconv.core.message import TextContent
from cowconv.core.schema import Action, Observation
from cowconv.core.usage import Usage
from cowconv.core.workspace import Workspace
from cowconv.tools.task.manager import TaskManager, TaskRun
from cowconv.tools.workflow.script import (
    WorkflowContext,
    _format_exception,
    _parent_of,
    execute_workflow_script,
)

__all__ = [
    "WORKFLOW_RECORD_KEY",
    "WorkflowAction",
    "WorkflowExecutor",
    "WorkflowObservation",
    "WorkflowOutcome",
    "WorkflowTool",
    "WorkflowToolSet",
]

#: The key of ``ObservationEvent.extra`` under which a workflow call records its children.
WORKFLOW_RECORD_KEY = "workflow"

_DESCRIPTION: Final = """Run a workflow: Python code you write that coordinates sub-agents.

Use it for large jobs that split into independent parts (a codebase-wide audit, reviews of \
several plans, a sweep over many files), keeping the intermediate results out of this \
conversation. The script must define exactly:

```python
async def main(wf):
    ...
```

and work only through `wf` (sub-agents do the reading, editing and running through their own \
tools; the script itself cannot import, open files or run commands):
- `await wf.run_agent(prompt, subagent_type="general-purpose", description=None)` -> the answer
- `await wf.map_agents(items, prompt, subagent_type="general-purpose", max_concurrency=None, \
description=None)` -> one answer per item, in order; `prompt` is a function of the item or a \
text with `{item}`; if any fails, the call raises (catch it with `except Exception`)
- `await wf.reduce_agent(items, prompt, subagent_type="general-purpose", description=None)` -> \
one answer given the items as JSON (cut to fit)
- `await wf.pipeline(items, *stages)` -> each item through the stages (sync or async), items \
independently; an item whose stage raises becomes None
- `wf.flatten(values)` -> one level of lists flattened

`subagent_type` names a registered sub-agent. Return the result from `main()`: it is what you \
get back (`print()` goes to the logs). Running a workflow runs the code you wrote.

Example:
```python
async def main(wf):
    reviews = await wf.map_agents(
        items=["src/a.py", "src/b.py"],
        prompt=lambda path: f"Review {path} for bugs; list them with line numbers.",
        max_concurrency=2,
    )
    return await wf.reduce_agent(reviews, prompt="Merge these reviews, worst bugs first.")
```
"""


class WorkflowAction(Action):
    """The workflow tool's arguments: a name, the script, and how many sub-agents at once.

    >>> WorkflowAction(name="audit", script="async def main(wf): ...").max_concurrency
    8
    """

    name: str = Field(description="A short name for this workflow run.")
    script: str = Field(
        description="Python workflow script to run. It must define `async def main(wf):` "
        "and coordinate work only through the provided `wf` object."
    )
    max_concurrency: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Maximum number of sub-agent tasks to run concurrently. "
        "Consider 2-4 for LLM-heavy workflows to avoid hitting API rate limits.",
    )


class WorkflowObservation(Observation):
    """The workflow tool's answer: the workflow's name, its status, and what ``main`` returned.

    >>> WorkflowObservation.from_text("42", name="audit", status="completed").text
    '42'
    """

    name: str = Field(description="The workflow name that was executed.")
    status: Literal["completed", "error"] = Field(description="The workflow execution status.")


@dataclass(frozen=True)
class WorkflowOutcome:
    """A workflow call's observation and the sub-agent runs it made.

    >>> WorkflowOutcome(WorkflowObservation.from_text("x", name="n", status="completed"),
    ...                 ()).runs
    ()
    """

    observation: WorkflowObservation
    runs: tuple[TaskRun, ...]


class WorkflowExecutor(ToolExecutor[WorkflowAction, WorkflowObservation]):
    """Runs workflow scripts; each call's sub-agents work in ``workspace`` on copies of ``llm``.

    >>> from cowconv import LLM, Workspace
    >>> executor = WorkflowExecutor(Workspace(working_dir="."), LLM(model="openai/gpt-4o"))
    >>> executor(WorkflowAction(name="n", script="async def main(wf):\\n    return 6 * 7\\n")).text
    '42'
    """

    def __init__(
        self,
        workspace: Workspace | None = None,
        llm: LLM | None = None,
        sub_agent_scope: Any = None,
    ) -> None:
        if workspace is not None and not isinstance(workspace, Workspace):
            raise InvalidTypeError(f"workspace must be a Workspace, got {type(workspace).__name__}")
        if llm is not None and not isinstance(llm, LLM):
            raise InvalidTypeError(f"llm must be a cowconv.LLM, got {type(llm).__name__}")
        if sub_agent_scope:
            raise InvalidValueError(
                "sub_agent_scope restricting a workflow's sub-agents is not in cowconv yet"
            )
        self._workspace = workspace
        self._llm = llm
        self._running: list[TaskManager] = []

    def run(self, action: WorkflowAction, conversation: Any = None) -> WorkflowOutcome:
        """Run ``action``'s script; a failing script is an error observation saying why.

        The sub-agents work where the executor was made for, or in
        ``conversation``'s workspace (OpenHands' way); with neither, the
        answer is an error observation.
        """
        workspace, llm = self._workspace, self._llm
        if workspace is None and conversation is None:
            missing = WorkflowObservation.from_text(
                "Workflow tool requires a local conversation context.",
                name=action.name,
                status="error",
                is_error=True,
            )
            return WorkflowOutcome(missing, ())
        if workspace is None:
            workspace, llm = _parent_of(conversation)
        manager = TaskManager(workspace, llm)
        context = WorkflowContext(manager=manager, max_concurrency=action.max_concurrency)
        self._running.append(manager)
        try:
            result = execute_workflow_script(action.script, context)
        except Exception as error:  # the script's own failure: the model reads why
            observation = WorkflowObservation.from_text(
                _format_exception(error), name=action.name, status="error", is_error=True
            )
        else:
            observation = WorkflowObservation.from_text(
                str(result), name=action.name, status="completed"
            )
        finally:
            context.close()
            self._running.remove(manager)
        return WorkflowOutcome(observation, tuple(context.runs))

    def __call__(self, action: WorkflowAction, conversation: Any = None) -> WorkflowObservation:
        """Run ``action``'s script and answer its observation (OpenHands' executor call)."""
        return self.run(action, conversation).observation

    def interrupt(self) -> None:
        """End the runs of the sub-agents running now."""
        for manager in list(self._running):
            manager.interrupt()

    def close(self) -> None:
        """Interrupt running sub-agents."""
        self.interrupt()


class WorkflowTool(ToolDefinition[WorkflowAction, WorkflowObservation]):
    """The ``workflow`` tool, running its calls with a :class:`WorkflowExecutor`."""

    user_selectable: ClassVar[bool] = False

    @classmethod
    def create(  # type: ignore[override]
        cls,
        conv_state: Any = None,
        executor: WorkflowExecutor | None = None,
        description: str = _DESCRIPTION,
        sub_agent_scope: Any = None,
    ) -> Sequence[WorkflowTool]:
        """The one ``workflow`` tool: with ``executor``, or one for ``conv_state``'s workspace."""
        if sub_agent_scope:
            raise InvalidValueError(
                "WorkflowToolSet(sub_agent_scope=...) restricting the sub-agents is not in "
                "cowconv yet"
            )
        if executor is None:
            workspace = getattr(conv_state, "workspace", None)
            agent = getattr(conv_state, "agent", None)
            if not isinstance(workspace, Workspace) or agent is None:
                raise InvalidTypeError(
                    "WorkflowTool.create() takes a conversation state or an executor, "
                    f"got {type(conv_state).__name__}"
                )
            executor = WorkflowExecutor(workspace, agent.llm)
        return [
            cls(
                action_type=WorkflowAction,
                observation_type=WorkflowObservation,
                description=description,
                executor=executor,
            )
        ]

    def declared_resources(self, action: Any) -> DeclaredResources:
        """None: a workflow's sub-agents each have their own state."""
        return DeclaredResources(keys=(), declared=True)

    def execute(self, params: WorkflowAction) -> ToolResult:
        """Run the workflow; the result records every sub-agent's events and what it cost."""
        executor = self.executor
        if not isinstance(executor, WorkflowExecutor):
            raise InvalidTypeError(f"the workflow tool needs a WorkflowExecutor, got {executor!r}")
        outcome = executor.run(params)
        observation = outcome.observation
        text = "".join(
            part.text for part in observation.to_llm_content if isinstance(part, TextContent)
        )
        usage: dict[str, Usage] = {}
        for run in outcome.runs:
            key = f"task:{run.task.id}"
            usage[key] = usage.get(key, Usage()) + run.usage
        record = {
            WORKFLOW_RECORD_KEY: {
                "name": params.name,
                "tasks": [
                    {
                        "task_id": run.task.id,
                        "conversation_id": run.task.conversation_id,
                        "subagent": run.subagent,
                        "events": [event.model_dump(mode="json") for event in run.events],
                    }
                    for run in outcome.runs
                ],
            }
        }
        return ToolResult(output=text, observation=observation, extra=record, usage=usage)


class WorkflowToolSet(ToolDefinition[WorkflowAction, WorkflowObservation]):
    """The workflow tool set: ``Tool(name=WorkflowToolSet.name)`` gives an agent ``workflow``."""

    user_selectable: ClassVar[bool] = False

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: Any = None, sub_agent_scope: Any = None
    ) -> Sequence[WorkflowTool]:
        """The ``workflow`` tool for a conversation in ``conv_state``."""
        return WorkflowTool.create(conv_state, sub_agent_scope=sub_agent_scope)


register_tool(WorkflowToolSet.name, WorkflowToolSet)
register_tool(WorkflowTool.name, WorkflowTool)
