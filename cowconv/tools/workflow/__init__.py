"""The workflow tool: model-written Python running sub-agents in parallel (OpenHands' ``workflow``).

>>> from cowconv import Tool
>>> Tool(name=WorkflowToolSet.name).name
'workflow_tool_set'
"""

from cowconv.tools.workflow.definition import (
    WORKFLOW_RECORD_KEY,
    WorkflowAction,
    WorkflowExecutor,
    WorkflowObservation,
    WorkflowOutcome,
    WorkflowTool,
    WorkflowToolSet,
)
from cowconv.tools.workflow.script import (
    SubAgentError,
    WorkflowContext,
    WorkflowScriptError,
    execute_workflow_script,
    validate_workflow_script,
)

__all__ = [
    "WORKFLOW_RECORD_KEY",
    "SubAgentError",
    "WorkflowAction",
    "WorkflowContext",
    "WorkflowExecutor",
    "WorkflowObservation",
    "WorkflowOutcome",
    "WorkflowScriptError",
    "WorkflowTool",
    "WorkflowToolSet",
    "execute_workflow_script",
    "validate_workflow_script",
]
