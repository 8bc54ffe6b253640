"""The task tool: an agent starts a sub-agent on a task and gets its answer (OpenHands' ``task``).

>>> from cowconv import Tool
>>> Tool(name=TaskToolSet.name).name
'task_tool_set'

Give an agent ``Tool(name=TaskToolSet.name)``, register the sub-agents it
may start (:func:`cowconv.register_agent`), and it can delegate: each task
is a child conversation whose history the parent records (see
:mod:`cowconv.tools.task.manager`).
"""

from cowconv.tools.task.definition import (
    TASK_TOOL_DESCRIPTION,
    TASK_TOOL_EXAMPLES,
    TaskTool,
    TaskToolSet,
)
from cowconv.tools.task.executor import TaskExecutor, TaskOutcome
from cowconv.tools.task.manager import Task, TaskManager, TaskRun, TaskStatus, task_records
from cowconv.tools.task.schema import TaskAction, TaskObservation

__all__ = [
    "TASK_TOOL_DESCRIPTION",
    "TASK_TOOL_EXAMPLES",
    "Task",
    "TaskAction",
    "TaskExecutor",
    "TaskManager",
    "TaskObservation",
    "TaskOutcome",
    "TaskRun",
    "TaskStatus",
    "TaskTool",
    "TaskToolSet",
    "task_records",
]
