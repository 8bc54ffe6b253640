"""The events of oversight: a rejected action, a security analysis, a hook's run.

Under OpenHands' SDK's names and JSON. A :class:`UserRejectObservation`
answers a tool call that did not run (the user rejected it while the
conversation waited for confirmation, or a ``PreToolUse`` hook blocked it):
it is an :class:`~cowconv.ObservationEvent`, so the model sees
``Action rejected: <reason>`` as the call's result and the call is no longer
pending.

>>> rejection = UserRejectObservation(
...     action_id="a1", tool_name="terminal", tool_call_id="c1", rejection_reason="no"
... )
>>> rejection.output, rejection.source, rejection.rejection_source
('Action rejected: no', 'user', 'user')
>>> sorted(rejection.model_dump(mode="json"))  # OpenHands' JSON: no output field
['action_id', 'id', 'kind', 'rejection_reason', 'rejection_source', 'source', 'timestamp', \
'tool_call_id', 'tool_name']
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import model_validator

from cowconv.core.events import Event, EventID, ObservationEvent, SourceType
from cowconv.core.frozen import FrozenJSON, FrozenJSONMap
from cowconv.core.security import SecurityRisk

__all__ = [
    "HookEventName",
    "HookExecutionEvent",
    "RejectionSource",
    "SecurityAnalysisEvent",
    "UserRejectObservation",
]

RejectionSource = Literal["user", "hook"]
"""Who rejected an action: the user (confirmation mode) or a ``PreToolUse`` hook."""

HookEventName = Literal[
    "PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "SessionEnd", "Stop"
]
"""The hook events, as :class:`HookExecutionEvent` names them (OpenHands' ``HookEventType``)."""

_REJECTED = "Action rejected: "


class UserRejectObservation(ObservationEvent):
    """A tool call that was not run: rejected by the user, or blocked by a hook.

    ``output`` (what the model is shown) is ``Action rejected: <reason>``;
    the JSON is OpenHands' (no ``output``, ``exit_code``, ``extra``).

    >>> UserRejectObservation(action_id="a1", tool_name="terminal", tool_call_id="c1",
    ...     rejection_reason="rm -rf", rejection_source="hook").output
    'Action rejected: rm -rf'
    """

    source: SourceType = "user"
    output: str = ""
    rejection_reason: str = "User rejected the action"
    rejection_source: RejectionSource = "user"
    action_id: EventID  # required here, optional on other observations

    __never_dumped__: ClassVar[tuple[str, ...]] = ("output", "exit_code", "extra", "observation")

    @model_validator(mode="before")
    @classmethod
    def _output_of_reason(cls, data: Any) -> Any:
        if isinstance(data, dict):
            reason = data.get("rejection_reason", "User rejected the action")
            # The fields never dumped are derived, not taken: a value given for them would
            # not load back (the store checks that what it keeps reads back unchanged).
            derived = ("exit_code", "extra", "observation")
            kept = {key: value for key, value in data.items() if key not in derived}
            return {**kept, "output": f"{_REJECTED}{reason}"}
        return data


class SecurityAnalysisEvent(Event):
    """The risks the security analyzer gave a step's tool calls (never shown to the model).

    Recorded once per batch of tool calls whenever a security analyzer is
    set, whatever the confirmation policy then decides.

    >>> event = SecurityAnalysisEvent(analyzer="LLMSecurityAnalyzer", policy="ConfirmRisky",
    ...                               risks={"a1": "HIGH"})
    >>> event.risks["a1"] is SecurityRisk.HIGH
    True
    """

    source: SourceType = "environment"
    analyzer: str
    policy: str
    risks: dict[EventID, SecurityRisk]
    details: dict[EventID, FrozenJSONMap] = {}


class HookExecutionEvent(Event):
    """One run of a hook: which event, which command, and what came of it.

    ``blocked`` is true when the hook stopped the operation (exit code 2, or a
    ``deny`` decision); ``action_id`` / ``message_id`` name the action or user
    message it ran for.

    >>> run = HookExecutionEvent(hook_event_type="PreToolUse", hook_command="./check.sh",
    ...     tool_name="terminal", success=False, blocked=True, exit_code=2, reason="no rm")
    >>> str(run), run.source
    ('HookExecutionEvent: PreToolUse (terminal) - BLOCKED', 'hook')
    """

    source: SourceType = "hook"
    hook_event_type: HookEventName
    hook_command: str
    tool_name: str | None = None
    success: bool
    blocked: bool = False
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    reason: str | None = None
    additional_context: str | None = None
    error: str | None = None
    action_id: EventID | None = None
    message_id: EventID | None = None
    hook_input: FrozenJSON = None

    def __str__(self) -> str:
        status = "BLOCKED" if self.blocked else ("SUCCESS" if self.success else "FAILED")
        tool = f" ({self.tool_name})" if self.tool_name else ""
        return f"HookExecutionEvent: {self.hook_event_type}{tool} - {status}"
