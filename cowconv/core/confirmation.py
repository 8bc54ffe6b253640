"""Confirmation mode as changes of the state: set the policy or analyzer, reject what waits.

A run whose confirmation policy holds a step's tool calls back records the
calls and stops ``waiting_for_confirmation``. What waits is in the history
itself (the calls nothing answered yet), and the policy and analyzer are
state fields, so a fork made while waiting waits for the same calls, and
confirming or rejecting in one never touches the other. The next ``run()``
confirms (runs them); :class:`RejectPendingActions` answers each with a
:class:`~cowconv.UserRejectObservation` instead.

>>> from cowconv import LLM, ActionEvent, Agent, AlwaysConfirm, ConversationState, Workspace
>>> from cowconv import ExecutionStatus
>>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="m")),
...                           workspace=Workspace(working_dir="."))
>>> state = SetConfirmationPolicy(AlwaysConfirm())(state)
>>> call = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={"command": "ls"})
>>> state = state._replace(branch=state.branch.append(call),
...                        execution_status=ExecutionStatus.WAITING_FOR_CONFIRMATION)
>>> [a.tool_call_id for a in pending_actions(state)]
['c1']
>>> rejected = RejectPendingActions("not now")(state)
>>> rejected.branch[-1].output, rejected.execution_status.value, pending_actions(rejected)
('Action rejected: not now', 'idle', [])
"""

from __future__ import annotations

from dataclasses import dataclass

from cowconv._exceptions import InvalidTypeError
from cowconv.core.analyzers import SecurityAnalyzerBase
from cowconv.core.events import ActionEvent
from cowconv.core.oversight import RejectionSource, UserRejectObservation
from cowconv.core.security import ConfirmationPolicyBase, NeverConfirm
from cowconv.core.state import ConversationState, ExecutionStatus
from cowconv.core.tree import extend_active

__all__ = [
    "NeverConfirm",
    "RejectPendingActions",
    "SetConfirmationPolicy",
    "SetSecurityAnalyzer",
    "pending_actions",
    "rejections",
]


def pending_actions(state: ConversationState) -> list[ActionEvent]:
    """The tool calls of the active branch nothing answered yet, in order."""
    return ConversationState.get_unmatched_actions(state.branch)


def rejections(
    actions: list[ActionEvent], reason: str, source: RejectionSource = "user"
) -> list[UserRejectObservation]:
    """One :class:`~cowconv.UserRejectObservation` answering each of ``actions``.

    >>> from cowconv import ActionEvent
    >>> call = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={})
    >>> [r.rejection_source for r in rejections([call], "blocked", "hook")]
    ['hook']
    """
    return [
        UserRejectObservation(
            action_id=action.id,
            tool_name=action.tool_name,
            tool_call_id=action.tool_call_id,
            rejection_reason=reason,
            rejection_source=source,
        )
        for action in actions
    ]


@dataclass(frozen=True)
class SetConfirmationPolicy:
    """Set the confirmation policy (OpenHands' ``set_confirmation_policy``).

    >>> from cowconv import LLM, Agent, ConfirmRisky, ConversationState, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="m")),
    ...                           workspace=Workspace(working_dir="."))
    >>> SetConfirmationPolicy(ConfirmRisky())(state).confirmation_policy.kind
    'ConfirmRisky'
    """

    policy: ConfirmationPolicyBase

    def __post_init__(self) -> None:
        if not isinstance(self.policy, ConfirmationPolicyBase):
            raise InvalidTypeError(
                "policy must be a confirmation policy (AlwaysConfirm, NeverConfirm, "
                f"ConfirmRisky), got {type(self.policy).__name__}"
            )

    def __call__(self, state: ConversationState) -> ConversationState:
        if state.confirmation_policy == self.policy:
            return state
        return state._replace(confirmation_policy=self.policy)


@dataclass(frozen=True)
class SetSecurityAnalyzer:
    """Set (``None``: remove) the security analyzer (OpenHands' ``set_security_analyzer``).

    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> from cowconv.security import LLMSecurityAnalyzer
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="m")),
    ...                           workspace=Workspace(working_dir="."))
    >>> SetSecurityAnalyzer(LLMSecurityAnalyzer())(state).security_analyzer.kind
    'LLMSecurityAnalyzer'
    """

    analyzer: SecurityAnalyzerBase | None

    def __post_init__(self) -> None:
        if self.analyzer is not None and not isinstance(self.analyzer, SecurityAnalyzerBase):
            raise InvalidTypeError(
                f"analyzer must be a security analyzer or None, got {type(self.analyzer).__name__}"
            )

    def __call__(self, state: ConversationState) -> ConversationState:
        if state.security_analyzer == self.analyzer:
            return state
        return state._replace(security_analyzer=self.analyzer)


@dataclass(frozen=True)
class RejectPendingActions:
    """Answer every waiting tool call with a rejection; a waiting conversation becomes idle.

    With nothing waiting, only the status changes (OpenHands' SDK does the same).
    """

    reason: str = "User rejected the action"

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str):
            raise InvalidTypeError(f"reason must be a str, got {type(self.reason).__name__}")

    def __call__(self, state: ConversationState) -> ConversationState:
        status = state.execution_status
        if status == ExecutionStatus.WAITING_FOR_CONFIRMATION:
            status = ExecutionStatus.IDLE
        answers = rejections(pending_actions(state), self.reason)
        if not answers and status == state.execution_status:
            return state
        return state._replace(branch=extend_active(state, answers), execution_status=status)
