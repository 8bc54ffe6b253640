"""cowconv: fork agent conversations in O(1).

The event history is an immutable persistent vector with structural sharing,
so a fork shares everything with its source and is still isolated like a deep
copy: nothing either side can reach will ever change.

>>> import cowconv
>>> source = cowconv.Conversation(
...     agent=cowconv.Agent(llm=cowconv.LLM(model="openai/gpt-4o")), workspace="."
... )
>>> _ = source.send_message("Analyse the sales report.")
>>> fork = source.fork(title="Follow-up")
>>> fork.state.events == source.state.events
True
"""

from typing import TYPE_CHECKING

import cowconv._lazy as _lazy
from cowconv._exceptions import (
    BranchCancelledError,
    BranchError,
    BranchesError,
    BranchLostError,
    BranchRunError,
    BranchTimeoutError,
    BranchWorkspaceError,
    ConversationConflictError,
    ConversationExistsError,
    ConversationNotFoundError,
    ConversationRunningError,
    CorruptStoreError,
    CowconvError,
    EventIndexError,
    EventNotFoundError,
    FrozenInstanceError,
    InvalidTypeError,
    InvalidValueError,
    LLMError,
    RemoteError,
    SchemaVersionError,
    ServiceError,
    StartError,
    StoreError,
    StoreLockedError,
    ToolArgumentError,
    UnsafeExposureError,
    WorkspaceMissingError,
)

__version__ = "0.2.0"

# `import cowconv` loads only the exception tree; every other name loads its module (and what
# that module builds on) on first use (PEP 562), so a CLI, a worker process or a test run
# pays only for what it touches: `cowconv.MessageEvent` loads the events, `cowconv.Conversation`
# the core (events, history, state, agent and LLM settings), and the LLM library, stores,
# server and tools load when they are used.
_LAZY = {
    "Agent": "cowconv.core.agent",
    "Tool": "cowconv.core.agent",
    "Backend": "cowconv.ports",
    "EventCallback": "cowconv.ports",
    "BranchRow": "cowconv.branches.report",
    "SuiteReport": "cowconv.branches.report",
    "BranchExecutor": "cowconv.ports",
    "BranchJob": "cowconv.branches.wire",
    "BranchOutcome": "cowconv.branches.wire",
    "SharedPrefix": "cowconv.branches.wire",
    "Branch": "cowconv.branches.suite",
    "BranchRuns": "cowconv.branches.suite",
    "BranchResult": "cowconv.branches.suite",
    "iter_branches": "cowconv.branches.suite",
    "run_branches": "cowconv.branches.suite",
    "LLMSummarizingCondenser": "cowconv.core.agent",
    "Comparison": "cowconv.core.compare",
    "ComparisonSide": "cowconv.core.compare",
    "compare": "cowconv.core.compare",
    "Conversation": "cowconv.conversation",
    "LocalConversation": "cowconv.conversation",
    "RemoteConversation": "cowconv.conversation",
    "ActionEvent": "cowconv.core.events",
    "AgentErrorEvent": "cowconv.core.events",
    "AnyEvent": "cowconv.core.events",
    "Condensation": "cowconv.core.events",
    "CondensationEvent": "cowconv.core.events",
    "Content": "cowconv.core.events",
    "Event": "cowconv.core.events",
    "EventSource": "cowconv.core.events",
    "ImageContent": "cowconv.core.events",
    "LLMConvertibleEvent": "cowconv.core.events",
    "Message": "cowconv.core.events",
    "MessageToolCall": "cowconv.core.events",
    "ROOT_PARENT_ID": "cowconv.core.events",
    "SourceType": "cowconv.core.events",
    "MessageEvent": "cowconv.core.events",
    "ObservationEvent": "cowconv.core.events",
    "PauseEvent": "cowconv.core.events",
    "Role": "cowconv.core.events",
    "SystemPromptEvent": "cowconv.core.events",
    "TextContent": "cowconv.core.events",
    "MAX_DEPTH": "cowconv.core.frozen",
    "freeze": "cowconv.core.frozen",
    "thaw": "cowconv.core.frozen",
    "EventLog": "cowconv.core.history",
    "CondensationSummaryEvent": "cowconv.core.view",
    "View": "cowconv.core.view",
    "LLM": "cowconv.core.llm",
    "LLMMetrics": "cowconv.core.llm",
    "LLMResponse": "cowconv.core.llm",
    "LLMToolCall": "cowconv.core.llm",
    "StateSink": "cowconv.ports",
    "ConversationExecutionStatus": "cowconv.core.state",
    "ConversationInfo": "cowconv.core.state",
    "ConversationState": "cowconv.core.state",
    "ConversationStats": "cowconv.core.state",
    "ExecutionStatus": "cowconv.core.state",
    "TokenUsage": "cowconv.core.state",
    "Usage": "cowconv.core.state",
    "MemoryStore": "cowconv.stores",
    "SQLiteStore": "cowconv.stores",
    "Store": "cowconv.stores",
    "ToolDefinition": "cowconv.agent.tools",
    "ToolResult": "cowconv.agent.tools",
    "register_tool": "cowconv.agent.tools",
    "registered_tools": "cowconv.agent.tools",
    "resolve_tool": "cowconv.agent.tools",
    "ConversationVisualizerBase": "cowconv.visualizer",
    "DefaultConversationVisualizer": "cowconv.visualizer",
    "RemoteWorkspace": "cowconv.core.workspace",
    "Workspace": "cowconv.core.workspace",
}

if TYPE_CHECKING:
    from cowconv.agent.tools import (
        ToolDefinition,
        ToolResult,
        register_tool,
        registered_tools,
        resolve_tool,
    )
    from cowconv.branches.report import BranchRow, SuiteReport
    from cowconv.branches.suite import (
        Branch,
        BranchResult,
        BranchRuns,
        iter_branches,
        run_branches,
    )
    from cowconv.branches.wire import BranchJob, BranchOutcome, SharedPrefix
    from cowconv.conversation import Conversation, LocalConversation, RemoteConversation
    from cowconv.core.agent import Agent, LLMSummarizingCondenser, Tool
    from cowconv.core.compare import Comparison, ComparisonSide, compare
    from cowconv.core.events import (
        ROOT_PARENT_ID,
        ActionEvent,
        AgentErrorEvent,
        AnyEvent,
        Condensation,
        CondensationEvent,
        Content,
        Event,
        EventSource,
        ImageContent,
        LLMConvertibleEvent,
        Message,
        MessageEvent,
        MessageToolCall,
        ObservationEvent,
        PauseEvent,
        Role,
        SourceType,
        SystemPromptEvent,
        TextContent,
    )
    from cowconv.core.frozen import MAX_DEPTH, freeze, thaw
    from cowconv.core.history import EventLog
    from cowconv.core.llm import LLM, LLMMetrics, LLMResponse, LLMToolCall
    from cowconv.core.state import (
        ConversationExecutionStatus,
        ConversationInfo,
        ConversationState,
        ConversationStats,
        ExecutionStatus,
        TokenUsage,
        Usage,
    )
    from cowconv.core.view import CondensationSummaryEvent, View
    from cowconv.core.workspace import RemoteWorkspace, Workspace
    from cowconv.ports import Backend, BranchExecutor, EventCallback, StateSink
    from cowconv.stores import MemoryStore, SQLiteStore, Store
    from cowconv.visualizer import ConversationVisualizerBase, DefaultConversationVisualizer


__getattr__, __dir__ = _lazy.lazy_attributes(__name__, _LAZY, globals())


__all__ = [
    "ActionEvent",
    "Agent",
    "AgentErrorEvent",
    "AnyEvent",
    "Backend",
    "Branch",
    "BranchCancelledError",
    "BranchError",
    "BranchExecutor",
    "BranchJob",
    "BranchLostError",
    "BranchOutcome",
    "BranchResult",
    "BranchRow",
    "BranchRunError",
    "BranchRuns",
    "BranchTimeoutError",
    "BranchWorkspaceError",
    "BranchesError",
    "Comparison",
    "ComparisonSide",
    "Condensation",
    "CondensationEvent",
    "CondensationSummaryEvent",
    "Content",
    "Conversation",
    "ConversationConflictError",
    "ConversationExecutionStatus",
    "ConversationExistsError",
    "ConversationInfo",
    "ConversationNotFoundError",
    "ConversationRunningError",
    "ConversationState",
    "ConversationStats",
    "ConversationVisualizerBase",
    "CorruptStoreError",
    "CowconvError",
    "DefaultConversationVisualizer",
    "Event",
    "EventCallback",
    "EventIndexError",
    "EventLog",
    "EventNotFoundError",
    "EventSource",
    "ExecutionStatus",
    "FrozenInstanceError",
    "ImageContent",
    "InvalidTypeError",
    "InvalidValueError",
    "LLM",
    "LLMConvertibleEvent",
    "LLMError",
    "LLMMetrics",
    "LLMResponse",
    "LLMSummarizingCondenser",
    "LLMToolCall",
    "LocalConversation",
    "MAX_DEPTH",
    "MemoryStore",
    "Message",
    "MessageEvent",
    "MessageToolCall",
    "ObservationEvent",
    "PauseEvent",
    "ROOT_PARENT_ID",
    "RemoteConversation",
    "RemoteError",
    "RemoteWorkspace",
    "Role",
    "SQLiteStore",
    "SchemaVersionError",
    "ServiceError",
    "SharedPrefix",
    "SourceType",
    "StartError",
    "StateSink",
    "Store",
    "StoreError",
    "StoreLockedError",
    "SuiteReport",
    "SystemPromptEvent",
    "TextContent",
    "TokenUsage",
    "Tool",
    "ToolArgumentError",
    "ToolDefinition",
    "ToolResult",
    "UnsafeExposureError",
    "Usage",
    "View",
    "Workspace",
    "WorkspaceMissingError",
    "__version__",
    "compare",
    "freeze",
    "iter_branches",
    "register_tool",
    "registered_tools",
    "resolve_tool",
    "run_branches",
    "thaw",
]
