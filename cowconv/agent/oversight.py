"""What the agent loop asks before and after a tool call: confirmation, analysis, hooks.

The loop (:mod:`cowconv.agent.runtime`) calls these at fixed points of a step;
each returns the events to record, so everything that was decided is in the
history:

* before a step's tool calls run, :func:`confirmation_needed` rates them with
  the conversation's security analyzer (a :class:`~cowconv.SecurityAnalysisEvent`)
  and asks its confirmation policy whether they must wait;
* :class:`Hooks` runs the conversation's hooks (``PreToolUse`` may block a call:
  it is answered by a :class:`~cowconv.UserRejectObservation` from ``"hook"``),
  and records a :class:`~cowconv.HookExecutionEvent` per hook run;
* :func:`with_security_risk` adds the ``security_risk`` argument to the tool
  specs the model sees while an analyzer is set, and :func:`take_security_risk`
  takes it back out of a call's arguments.

>>> spec = {"type": "function", "function": {"name": "terminal", "parameters": {
...     "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
>>> with_security_risk([spec])[0]["function"]["parameters"]["required"]
['command', 'security_risk']
>>> arguments, risk = take_security_risk({"command": "ls", "security_risk": "LOW"})
>>> dict(arguments), risk.value
({'command': 'ls'}, 'LOW')
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from cowconv._exceptions import ToolArgumentError
from cowconv.agent.hooks import AgentHookRunner, HookManager, HookResult, truncate_log
from cowconv.core.events import (
    ActionEvent,
    Event,
    Message,
    MessageEvent,
    ObservationEvent,
    TextContent,
)
from cowconv.core.frozen import thaw
from cowconv.core.hooks import HookConfig, HookDefinition, HookEventType
from cowconv.core.oversight import HookExecutionEvent, SecurityAnalysisEvent
from cowconv.core.security import SecurityRisk
from cowconv.core.state import ConversationState
from cowconv.core.usage import Usage

__all__ = [
    "STOP_HOOK_FEEDBACK_PREFIX",
    "Hooks",
    "blocked_user_message",
    "confirmation_needed",
    "submit_prompt",
    "take_security_risk",
    "with_security_risk",
]

STOP_HOOK_FEEDBACK_PREFIX = "[Stop hook feedback]"
"""How the message a ``Stop`` hook sends back to the agent begins (OpenHands' text)."""

_RISK_PROPERTY = {
    "type": "string",
    "enum": ["LOW", "MEDIUM", "HIGH"],
    "description": (
        "The LLM's assessment of the safety risk of this action: LOW (read-only, safe), "
        "MEDIUM (changes files or installs packages), HIGH (network access, system changes, "
        "destructive or irreversible actions)."
    ),
}


def with_security_risk(specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``specs`` with a required ``security_risk`` argument added to each (copies)."""
    changed: list[dict[str, Any]] = []
    for given in specs:
        spec: dict[str, Any] = copy.deepcopy(dict(given))
        parameters = spec.setdefault("function", {}).setdefault("parameters", {"type": "object"})
        parameters.setdefault("properties", {})["security_risk"] = dict(_RISK_PROPERTY)
        required = list(parameters.get("required", []))
        if "security_risk" not in required:
            required.append("security_risk")
        parameters["required"] = required
        changed.append(spec)
    return changed


def take_security_risk(arguments: Mapping[str, Any]) -> tuple[Mapping[str, Any], SecurityRisk]:
    """The call's arguments without ``security_risk``, and the risk it gave (``UNKNOWN``: none).

    A value that is not a risk level is refused (:class:`~cowconv.ToolArgumentError`).

    >>> take_security_risk({"security_risk": "SEVERE"})
    Traceback (most recent call last):
    ...
    cowconv._exceptions.ToolArgumentError: security_risk must be one of LOW, MEDIUM, HIGH, ...
    """
    if "security_risk" not in arguments:
        return arguments, SecurityRisk.UNKNOWN
    raw = arguments["security_risk"]
    rest = {key: value for key, value in arguments.items() if key != "security_risk"}
    if raw is None:
        return rest, SecurityRisk.UNKNOWN
    try:
        return rest, SecurityRisk(str(raw).upper())
    except ValueError:
        raise ToolArgumentError(
            f"security_risk must be one of LOW, MEDIUM, HIGH, got {raw!r}"
        ) from None


def confirmation_needed(
    state: ConversationState, actions: Sequence[ActionEvent]
) -> tuple[bool, list[Event]]:
    """Whether ``actions`` must wait for the user, and the analysis to record (if any).

    Without an analyzer every action's risk is ``UNKNOWN``; with one, its
    verdict is recorded whatever the policy decides.
    """
    if not actions:
        return False, []
    analyzer = state.security_analyzer
    policy = state.confirmation_policy
    if analyzer is None:
        risks = [SecurityRisk.UNKNOWN] * len(actions)
        recorded: list[Event] = []
    else:
        analyses = analyzer.analyze_actions(actions)
        risks = [analysis.risk for _, analysis in analyses]
        recorded = [
            SecurityAnalysisEvent(
                analyzer=type(analyzer).__name__,
                policy=type(policy).__name__,
                risks={action.id: analysis.risk for action, analysis in analyses},
                details={
                    action.id: analysis.details
                    for action, analysis in analyses
                    if analysis.details is not None
                },
            )
        ]
    return any(policy.should_confirm(risk) for risk in risks), recorded


def _last_user_message(branch: Sequence[Event]) -> tuple[int, MessageEvent] | None:
    for index in range(len(branch) - 1, -1, -1):
        event = branch[index]
        if isinstance(event, MessageEvent) and event.source == "user" and event.role == "user":
            return index, event
    return None


def blocked_user_message(branch: Sequence[Event]) -> bool:
    """Whether a ``UserPromptSubmit`` hook blocked the last user message of ``branch``.

    A blocked message is recorded (with the hook's run) but the agent does
    not answer it: the run finishes at once.
    """
    found = _last_user_message(branch)
    if found is None:
        return False
    index, message = found
    return any(
        isinstance(event, HookExecutionEvent) and event.blocked and event.message_id == message.id
        for event in (branch[i] for i in range(index + 1, len(branch)))
    )


def _record(
    event_type: HookEventType,
    hooks: Sequence[HookDefinition],
    results: Sequence[HookResult],
    **context: Any,
) -> list[Event]:
    return [
        HookExecutionEvent(
            hook_event_type=event_type.value,
            hook_command=hook.display_command,
            success=result.success,
            blocked=result.blocked,
            exit_code=result.exit_code,
            stdout=truncate_log(result.stdout) or "",
            stderr=truncate_log(result.stderr) or "",
            reason=truncate_log(result.reason),
            additional_context=truncate_log(result.additional_context),
            error=truncate_log(result.error),
            **context,
        )
        for hook, result in zip(hooks, results, strict=False)
    ]


class Hooks:
    """A conversation's hooks as the loop runs them: each method returns the events to record.

    Made again when the state's :class:`~cowconv.HookConfig` changes; the
    manager is kept in between, so background hooks are tracked and killed
    at :meth:`session_end`.
    """

    def __init__(
        self,
        state: ConversationState,
        config: HookConfig,
        agent_runner: AgentHookRunner | None = None,
    ) -> None:
        self.config = config
        self._llm = state.agent.llm
        self.manager = HookManager(
            config,
            working_dir=state.workspace.working_dir,
            session_id=str(state.id),
            llm_getter=lambda: self._llm,
            agent_runner=agent_runner,
        )
        self.session_started = False
        self._spent: list[tuple[str, Usage]] = []

    def take_spent(self) -> list[tuple[str, Usage]]:
        """What prompt and agent hooks spent since the last call, by ``usage_id``, once."""
        spent, self._spent = self._spent, []
        return spent

    def _note(self, results: Sequence[HookResult]) -> None:
        for result in results:
            self._spent.extend(result.spent.items())

    @classmethod
    def of(
        cls,
        state: ConversationState,
        current: Hooks | None,
        agent_runner: AgentHookRunner | None = None,
    ) -> Hooks | None:
        """The hooks of ``state``: ``current`` if it runs the same config, else new ones."""
        config = state.hook_config
        if config is None or config.is_empty():
            return None
        if current is not None and current.config == config:
            current._llm = state.agent.llm  # prompt and agent hooks ask the agent's current LLM
            return current
        return cls(state, config, agent_runner)

    def session_start(self) -> list[Event]:
        """``SessionStart`` hooks, once per session; their context goes to the agent."""
        if self.session_started:
            return []
        self.session_started = True
        hooks = self.config.get_hooks_for_event(HookEventType.SESSION_START)
        if not hooks:
            return []
        results = self.manager.run_session_start()
        self._note(results)
        events = _record(HookEventType.SESSION_START, hooks, results)
        context = [result.additional_context for result in results if result.additional_context]
        if context:
            events.append(_environment_message("\n".join(context)))
        return events

    def session_end(self) -> list[Event]:
        """``SessionEnd`` hooks; background hooks still running are killed."""
        hooks = self.config.get_hooks_for_event(HookEventType.SESSION_END)
        results = self.manager.run_session_end()
        self._note(results)
        return _record(HookEventType.SESSION_END, hooks, results)

    def pre_tool_use(self, action: ActionEvent) -> tuple[list[Event], str | None]:
        """``PreToolUse`` hooks of ``action``: their runs, and why it is blocked (``None``: not)."""
        hooks = self.config.get_hooks_for_event(HookEventType.PRE_TOOL_USE, action.tool_name)
        if not hooks:
            return [], None
        tool_input = _thawed(action.arguments)
        go_on, results = self.manager.run_pre_tool_use(action.tool_name, tool_input)
        self._note(results)
        events = _record(
            HookEventType.PRE_TOOL_USE,
            hooks,
            results,
            tool_name=action.tool_name,
            action_id=action.id,
            hook_input={"tool_name": action.tool_name, "tool_input": tool_input},
        )
        reason = None if go_on else (self.manager.get_blocking_reason(results) or "Blocked by hook")
        return events, reason

    def post_tool_use(self, action: ActionEvent, result: Event) -> list[Event]:
        """``PostToolUse`` hooks of ``action`` after its ``result`` (they never block)."""
        hooks = self.config.get_hooks_for_event(HookEventType.POST_TOOL_USE, action.tool_name)
        if not hooks or not isinstance(result, ObservationEvent):
            return []
        tool_input = _thawed(action.arguments)
        if result.observation is not None:
            response = result.observation.model_dump(mode="json")
        else:
            response = {"content": result.output, "exit_code": result.exit_code}
        results = self.manager.run_post_tool_use(action.tool_name, tool_input, response)
        self._note(results)
        return _record(
            HookEventType.POST_TOOL_USE,
            hooks,
            results,
            tool_name=action.tool_name,
            action_id=action.id,
            hook_input={
                "tool_name": action.tool_name,
                "tool_input": tool_input,
                "tool_response": response,
            },
        )

    def user_prompt_submit(self, message: MessageEvent) -> tuple[MessageEvent, list[Event]]:
        """``UserPromptSubmit`` hooks of ``message``: the message (with the context they
        add, as ``extended_content``) and their runs (a blocking one stops the agent)."""
        hooks = self.config.get_hooks_for_event(HookEventType.USER_PROMPT_SUBMIT)
        if not hooks:
            return message, []
        text = message.text
        _, context, results = self.manager.run_user_prompt_submit(text)
        self._note(results)
        if context:
            message = message.model_copy(
                update={"extended_content": (*message.extended_content, TextContent(text=context))}
            )
        events = _record(
            HookEventType.USER_PROMPT_SUBMIT,
            hooks,
            results,
            message_id=message.id,
            hook_input={"message": text},
        )
        return message, events

    def stop(self) -> tuple[bool, list[Event]]:
        """``Stop`` hooks when the agent would stop: whether it may, and what to record.

        A hook that blocks sends the agent its reason (or added context) as a
        message, and the run goes on.
        """
        hooks = self.config.get_hooks_for_event(HookEventType.STOP)
        if not hooks:
            return True, []
        may_stop, results = self.manager.run_stop(reason="agent_finished")
        self._note(results)
        events = _record(
            HookEventType.STOP, hooks, results, hook_input={"reason": "agent_finished"}
        )
        if not may_stop:
            context = [result.additional_context for result in results if result.additional_context]
            feedback = "\n".join(context) or self.manager.get_blocking_reason(results)
            if feedback:
                events.append(_environment_message(f"{STOP_HOOK_FEEDBACK_PREFIX} {feedback}"))
        return may_stop, events


def submit_prompt(
    state: ConversationState,
    message: MessageEvent,
    agent_runner: AgentHookRunner | None = None,
) -> tuple[MessageEvent, list[Event], list[tuple[str, Usage]]]:
    """A user message as ``UserPromptSubmit`` hooks leave it, their runs to record after it, and
    what prompt or agent hooks among them spent.

    Without such hooks: ``message`` itself and nothing.
    """
    config = state.hook_config
    if config is None or not config.has_hooks_for_event(HookEventType.USER_PROMPT_SUBMIT):
        return message, [], []
    hooks = Hooks(state, config, agent_runner)
    message, events = hooks.user_prompt_submit(message)
    return message, events, hooks.take_spent()


def _environment_message(text: str) -> MessageEvent:
    return MessageEvent(source="environment", llm_message=Message(role="user", content=text))


def _thawed(arguments: Mapping[str, Any]) -> dict[str, Any]:
    value = thaw(arguments)
    return dict(value) if isinstance(value, Mapping) else {}
