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

from typing import TYPE_CHECKING, Any

from cowconv._exceptions import (
    BranchError,
    BranchesError,
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
    StoreError,
    StoreLockedError,
    WorkspaceMissingError,
)

__version__ = "0.1.0"

# `import cowconv` loads only the exception tree; every other name loads its module (and what
# that module builds on) on first use (PEP 562), so a CLI, a worker process or a test run
# pays only for what it touches: `cowconv.MessageEvent` loads the events, `cowconv.Conversation`
# the core (events, history, state, agent and LLM settings), and the LLM library, stores,
# server and tools load when they are used.
_LAZY = {
    "Agent": "cowconv._agent",
    "Tool": "cowconv._agent",
    "Backend": "cowconv._backend",
    "EventCallback": "cowconv._backend",
    "BranchRow": "cowconv._branch_report",
    "SuiteReport": "cowconv._branch_report",
    "BranchExecutor": "cowconv._branch_wire",
    "BranchJob": "cowconv._branch_wire",
    "BranchOutcome": "cowconv._branch_wire",
    "SharedPrefix": "cowconv._branch_wire",
    "Branch": "cowconv._branches",
    "BranchRuns": "cowconv._branches",
    "run_branches": "cowconv._branches",
    "LLMSummarizingCondenser": "cowconv._condenser",
    "Conversation": "cowconv._conversation",
    "LocalConversation": "cowconv._conversation",
    "RemoteConversation": "cowconv._conversation",
    "ActionEvent": "cowconv._events",
    "AgentErrorEvent": "cowconv._events",
    "AnyEvent": "cowconv._events",
    "CondensationEvent": "cowconv._events",
    "Content": "cowconv._events",
    "Event": "cowconv._events",
    "EventSource": "cowconv._events",
    "ImageContent": "cowconv._events",
    "MessageEvent": "cowconv._events",
    "ObservationEvent": "cowconv._events",
    "PauseEvent": "cowconv._events",
    "Role": "cowconv._events",
    "SystemPromptEvent": "cowconv._events",
    "TextContent": "cowconv._events",
    "MAX_DEPTH": "cowconv._frozen",
    "freeze": "cowconv._frozen",
    "thaw": "cowconv._frozen",
    "EventLog": "cowconv._history",
    "LLM": "cowconv._llm",
    "LLMMetrics": "cowconv._llm",
    "LLMResponse": "cowconv._llm",
    "LLMToolCall": "cowconv._llm",
    "StateSink": "cowconv._local",
    "ConversationExecutionStatus": "cowconv._state",
    "ConversationInfo": "cowconv._state",
    "ConversationState": "cowconv._state",
    "ConversationStats": "cowconv._state",
    "ExecutionStatus": "cowconv._state",
    "TokenUsage": "cowconv._state",
    "Usage": "cowconv._state",
    "MemoryStore": "cowconv._store",
    "SQLiteStore": "cowconv._store",
    "Store": "cowconv._store",
    "ToolArgumentError": "cowconv._tools",
    "ToolDefinition": "cowconv._tools",
    "ToolResult": "cowconv._tools",
    "register_tool": "cowconv._tools",
    "registered_tools": "cowconv._tools",
    "resolve_tool": "cowconv._tools",
    "ConversationVisualizerBase": "cowconv._visualizer",
    "DefaultConversationVisualizer": "cowconv._visualizer",
    "RemoteWorkspace": "cowconv._workspace",
    "Workspace": "cowconv._workspace",
}

if TYPE_CHECKING:
    from cowconv._agent import Agent, Tool
    from cowconv._backend import Backend, EventCallback
    from cowconv._branch_report import BranchRow, SuiteReport
    from cowconv._branch_wire import BranchExecutor, BranchJob, BranchOutcome, SharedPrefix
    from cowconv._branches import Branch, BranchRuns, run_branches
    from cowconv._condenser import LLMSummarizingCondenser
    from cowconv._conversation import Conversation, LocalConversation, RemoteConversation
    from cowconv._events import (
        ActionEvent,
        AgentErrorEvent,
        AnyEvent,
        CondensationEvent,
        Content,
        Event,
        EventSource,
        ImageContent,
        MessageEvent,
        ObservationEvent,
        PauseEvent,
        Role,
        SystemPromptEvent,
        TextContent,
    )
    from cowconv._frozen import MAX_DEPTH, freeze, thaw
    from cowconv._history import EventLog
    from cowconv._llm import LLM, LLMMetrics, LLMResponse, LLMToolCall
    from cowconv._local import StateSink
    from cowconv._state import (
        ConversationExecutionStatus,
        ConversationInfo,
        ConversationState,
        ConversationStats,
        ExecutionStatus,
        TokenUsage,
        Usage,
    )
    from cowconv._store import MemoryStore, SQLiteStore, Store
    from cowconv._tools import (
        ToolArgumentError,
        ToolDefinition,
        ToolResult,
        register_tool,
        registered_tools,
        resolve_tool,
    )
    from cowconv._visualizer import ConversationVisualizerBase, DefaultConversationVisualizer
    from cowconv._workspace import RemoteWorkspace, Workspace


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cowconv' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly next time
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ActionEvent",
    "Agent",
    "AgentErrorEvent",
    "AnyEvent",
    "Backend",
    "Branch",
    "BranchError",
    "BranchExecutor",
    "BranchJob",
    "BranchOutcome",
    "BranchRow",
    "BranchRuns",
    "BranchesError",
    "CondensationEvent",
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
    "LLMError",
    "LLMMetrics",
    "LLMResponse",
    "LLMSummarizingCondenser",
    "LLMToolCall",
    "LocalConversation",
    "MAX_DEPTH",
    "MemoryStore",
    "MessageEvent",
    "ObservationEvent",
    "PauseEvent",
    "RemoteConversation",
    "RemoteError",
    "RemoteWorkspace",
    "Role",
    "SQLiteStore",
    "SchemaVersionError",
    "ServiceError",
    "SharedPrefix",
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
    "Usage",
    "Workspace",
    "WorkspaceMissingError",
    "__version__",
    "freeze",
    "register_tool",
    "registered_tools",
    "resolve_tool",
    "run_branches",
    "thaw",
]
