"""``TaskAction`` and ``TaskObservation``: what the task tool is asked and what it answers.

>>> TaskAction(prompt="List the tests.", subagent_type="bash-runner").subagent_type
'bash-runner'
>>> observation = TaskObservation.from_text("3 tests", task_id="task_00000001",
...                                         subagent="bash-runner", status="completed")
>>> [part.text for part in observation.to_llm_content]
['Task ID: task_00000001\\nSubagent: bash-runner\\nStatus: completed', '3 tests']
"""

from __future__ import annotations

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from cowconv.core.message import ImageContent, TextContent
from cowconv.core.schema import Action, Observation

__all__ = ["TaskAction", "TaskObservation"]


class TaskAction(Action):
    """The task tool's arguments: the prompt, the agent type, a task to resume.

    >>> TaskAction(prompt="Explain the cache.").subagent_type
    'general-purpose'
    """

    description: str | None = Field(
        default=None, description="A short (3-5 word) description of the task."
    )
    prompt: str = Field(description="The task for the agent to perform.")
    subagent_type: str = Field(
        default="general-purpose",
        description="The type of specialized agent to use for this task.",
    )
    resume: str | None = Field(default=None, description="Task ID of the task to resume from.")
    max_turns: SkipJsonSchema[int | None] = Field(
        default=None,
        description="Deprecated and ignored (OpenHands' SDK): the agent definition or the "
        "parent conversation sets how many steps a task may take.",
        ge=1,
    )


class TaskObservation(Observation):
    """The task tool's answer: the task's id, agent type and status, then its result or error.

    >>> TaskObservation.from_text("no", task_id="t", subagent="s", status="error",
    ...                           is_error=True).to_llm_content[1].text
    '[An error occurred during execution.]\\n'
    """

    task_id: str = Field(description="The unique identifier of the task.")
    subagent: str = Field(description="The subagent of the task.")
    status: str = Field(description="The status of the task.")

    @property
    def task_info(self) -> str:
        """The lines naming the task, its agent type and its status."""
        return f"Task ID: {self.task_id}\nSubagent: {self.subagent}\nStatus: {self.status}"

    @property
    def to_llm_content(self) -> tuple[TextContent | ImageContent, ...]:
        """What the model sees: the task's lines, the error header if it failed, the content."""
        header = (TextContent(text=self.ERROR_MESSAGE_HEADER),) if self.is_error else ()
        return (TextContent(text=self.task_info), *header, *self.content)
