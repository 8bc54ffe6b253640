"""Hooks: shell commands (or prompts) run at fixed points of a conversation's run.

OpenHands' ``openhands.sdk.hooks`` under the same names. Give a conversation
a :class:`HookConfig` (``Conversation(hook_config=...)``, or
``hook_config`` in an agent server's create request) and its runs call the
hooks: ``PreToolUse`` before each tool call (exit code 2 or a ``deny``
decision blocks the call: the model reads ``Action rejected: <reason>``),
``PostToolUse`` after it, ``UserPromptSubmit`` when a message is sent (it may
add context, or block the message), ``SessionStart`` / ``SessionEnd`` around a
session, ``Stop`` when the agent would finish (a block sends it back to work).
Each run of a hook is recorded as a :class:`~cowconv.HookExecutionEvent`.
See ``docs/hooks.md``.

>>> import tempfile
>>> from cowconv import LLM, Agent, Conversation
>>> from cowconv.hooks import HookConfig, HookDefinition, HookMatcher
>>> config = HookConfig(user_prompt_submit=[HookMatcher(hooks=[
...     HookDefinition(command="echo 'no secrets here' >&2; exit 2")])])
>>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")),
...                             workspace=tempfile.mkdtemp(), hook_config=config)
>>> _ = conversation.send_message("my password is hunter2")
>>> run = conversation.state.events[-1]
>>> run.hook_event_type, run.blocked, run.stderr.strip()
('UserPromptSubmit', True, 'no secrets here')
>>> conversation.run()  # the agent does not answer a blocked message
>>> conversation.state.execution_status.value
'finished'
"""

from cowconv.agent.hooks import (
    AsyncProcessManager,
    HookEvent,
    HookExecutor,
    HookManager,
    HookResult,
)
from cowconv.core.hooks import (
    HOOK_EVENT_FIELDS,
    HookConfig,
    HookDecision,
    HookDefinition,
    HookEventType,
    HookMatcher,
    HookType,
)
from cowconv.core.oversight import HookExecutionEvent

__all__ = [
    "HOOK_EVENT_FIELDS",
    "AsyncProcessManager",
    "HookConfig",
    "HookDecision",
    "HookDefinition",
    "HookEvent",
    "HookEventType",
    "HookExecutionEvent",
    "HookExecutor",
    "HookManager",
    "HookMatcher",
    "HookResult",
    "HookType",
]
