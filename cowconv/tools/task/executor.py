"""``TaskExecutor``: runs a :class:`TaskAction` as a sub-agent task and answers its observation.

>>> from cowconv import Agent, LLM, Message, Workspace
>>> from cowconv.subagent import register_agent_if_absent
>>> from cowconv.testing import TestLLM
>>> from cowconv.tools.task.manager import TaskManager
>>> child_llm = TestLLM.from_messages([Message(role="assistant", content="Paris")])
>>> _ = register_agent_if_absent("doc-geographer", lambda llm: Agent(llm=child_llm), "Knows.")
>>> executor = TaskExecutor(TaskManager(Workspace(working_dir="."), LLM(model="openai/gpt-4o")))
>>> observation = executor(TaskAction(prompt="Capital of France?", subagent_type="doc-geographer"))
>>> observation.status, observation.text
('completed', 'Paris')
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from cowconv.agent.tools import ToolExecutor
from cowconv.tools.task.manager import TaskManager, TaskRun, TaskStatus
from cowconv.tools.task.schema import TaskAction, TaskObservation

__all__ = ["TaskExecutor", "TaskOutcome"]

logger = logging.getLogger("cowconv.tools.task")


@dataclass(frozen=True)
class TaskOutcome:
    """A task call's observation, and the run behind it (``None`` if no task could start).

    >>> TaskOutcome(TaskObservation.from_text("x", task_id="t", subagent="s", status="error"),
    ...             None).run is None
    True
    """

    observation: TaskObservation
    run: TaskRun | None


class TaskExecutor(ToolExecutor[TaskAction, TaskObservation]):
    """The task tool's executor: one :class:`TaskManager` per parent conversation."""

    def __init__(self, manager: TaskManager) -> None:
        self.manager = manager

    def run(self, action: TaskAction) -> TaskOutcome:
        """Run ``action``'s task; a task that cannot start is an error observation saying why."""
        try:
            run = self.manager.run_task(
                prompt=action.prompt,
                subagent_type=action.subagent_type,
                resume=action.resume,
                description=action.description,
            )
        except Exception as error:  # a factory's own failure too: the parent's run goes on
            logger.warning("task could not run: %s", error, exc_info=True)
            failed = TaskObservation.from_text(
                f"Failed to execute task: {error}",
                task_id="unknown",
                subagent=action.subagent_type,
                status="error",
                is_error=True,
            )
            return TaskOutcome(failed, None)
        task = run.task
        if task.status is TaskStatus.COMPLETED:
            text, is_error = task.result or "Task completed with no result.", False
        else:
            text, is_error = task.error or "Task failed.", True
        observation = TaskObservation.from_text(
            text,
            task_id=task.id,
            subagent=action.subagent_type,
            status=task.status.value,
            is_error=is_error,
        )
        return TaskOutcome(observation, run)

    def __call__(self, action: TaskAction, conversation: Any = None) -> TaskObservation:
        """Run ``action``'s task and answer its observation (OpenHands' executor call)."""
        return self.run(action).observation

    def interrupt(self) -> None:
        """End the runs of the children running now."""
        self.manager.interrupt()

    def close(self) -> None:
        """Interrupt running children (the tasks stay known)."""
        self.manager.close()
