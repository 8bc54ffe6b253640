"""The agent loop behind ``Conversation.run()`` and ``pause()``.

A *step* is one LLM call and the tool calls it asked for. Everything a step
produces (the tool calls, their results or the answer, the step's cost, the
status change) is appended in one commit of the conversation's backend: one transaction
in a persistent store, so a history never holds a tool call without its
result. No lock is held while the model thinks or a tool runs, so
``send_message()``, ``fork()`` and readers never wait for a step.

:func:`build_messages` rebuilds the model's view from the history alone,
which is why a fork's ``run()`` continues exactly where its source was:

>>> from cowconv import ActionEvent, MessageEvent, ObservationEvent, SystemPromptEvent
>>> history = [
...     SystemPromptEvent(system_prompt="Be brief."),
...     MessageEvent(source="user", role="user", content="List files."),
...     ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={"command": "ls"},
...                 llm_response_id="r1"),
...     ObservationEvent(tool_name="terminal", tool_call_id="c1", output="a.py", exit_code=0),
... ]
>>> [message["role"] for message in build_messages(history)]
['system', 'user', 'assistant', 'tool']
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyrsistent import pmap

from cowconv._exceptions import (
    ConversationRunningError,
    InvalidValueError,
    LLMError,
    ToolArgumentError,
)
from cowconv.agent.condenser import condenser_view, plan_condensation, should_condense, summarize
from cowconv.agent.hooks import HookEvent
from cowconv.agent.messages import INVALID_ARGUMENTS_KEY, build_messages
from cowconv.agent.oversight import (
    Hooks,
    blocked_user_message,
    confirmation_needed,
    take_security_risk,
    with_security_risk,
)
from cowconv.agent.prompt import system_prompt_event, with_system_prompt
from cowconv.agent.tools import ToolDefinition, create_tools, decode_arguments
from cowconv.core.agent import Agent, Tool
from cowconv.core.changes import Change, SendMessage
from cowconv.core.confirmation import pending_actions, rejections
from cowconv.core.events import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    Message,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    new_event_id,
)
from cowconv.core.history import EventLog
from cowconv.core.hooks import HookDefinition
from cowconv.core.llm import LLM, LLMResponse, LLMToolCall
from cowconv.core.security import SecurityRisk
from cowconv.core.state import (
    DEFAULT_MAX_ITERATION_PER_RUN,
    ConversationState,
    ConversationStats,
    ExecutionStatus,
    check_max_iteration_per_run,
)
from cowconv.core.tree import extend_active
from cowconv.core.usage import Usage
from cowconv.core.workspace import Workspace
from cowconv.workspaces.recording import materialize_workspace, record_snapshot

__all__ = ["Runner", "build_messages", "run_hook_agent"]

logger = logging.getLogger("cowconv.runtime")


def _needs_reply(events: EventLog) -> bool:
    """Whether the model has something to answer: the history does not end with its answer."""
    for event in reversed(events):
        if isinstance(event, MessageEvent):
            if event.role == "user":
                return True
            if event.role == "assistant":
                return False
        elif isinstance(event, ActionEvent | ObservationEvent):
            return True
        elif isinstance(event, AgentErrorEvent) and event.tool_call_id is not None:
            return True
    return False


def _user_message_since(events: EventLog, position: int) -> bool:
    """Whether a user message was recorded at or after ``position`` (sent during a step)."""
    return any(
        isinstance(event, MessageEvent) and event.role == "user"
        for event in (events[index] for index in range(position, len(events)))
    )


def _action(
    response: LLMResponse,
    call: LLMToolCall,
    thought: str,
    analyzed: bool = False,
    workspace_snapshot: str | None = None,
) -> tuple[ActionEvent, ToolArgumentError | None]:
    """The event recording a tool call, and why its arguments are unusable (``None``: usable).

    The arguments are decoded once, here: the event holds them, and the tool
    validates that mapping (:meth:`~cowconv.ToolDefinition.validate_arguments`).
    Text that does not decode to a JSON object is kept verbatim, for the record.
    While a security analyzer is set (``analyzed``), the ``security_risk`` argument
    the model was asked for is taken out of the arguments into the event's field.
    """
    risk = SecurityRisk.UNKNOWN
    try:
        arguments: Mapping[str, Any] = decode_arguments(call.arguments, call.name)
        if analyzed:
            arguments, risk = take_security_risk(arguments)
    except ToolArgumentError as error:
        problem: ToolArgumentError | None = error
        arguments = pmap({INVALID_ARGUMENTS_KEY: call.arguments})
    else:
        problem = None
    action = ActionEvent(
        tool_name=call.name,
        tool_call_id=call.id,
        arguments=arguments,
        thought=thought,
        llm_response_id=response.id,
        security_risk=risk,
        workspace_snapshot=workspace_snapshot,
    )
    return action, problem


class Runner:
    """Runs one conversation's agent; at most one ``run()`` at a time."""

    def __init__(
        self,
        snapshot: Callable[[], ConversationState],
        commit: Callable[[Change], object],
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
        settle: Callable[[ExecutionStatus], object] | None = None,
    ) -> None:
        check_max_iteration_per_run(max_iteration_per_run)
        self.max_iteration_per_run = max_iteration_per_run
        self._snapshot = snapshot
        self._commit_change = commit
        # Sets the status in memory only, for when the store refuses to record why a run
        # stopped: the conversation must not go on showing "running".
        self._settle = settle
        self._lock = threading.Lock()
        self._active = False
        self._pause_requested = False
        self._interrupted = False
        self._tools: dict[str, ToolDefinition[Any]] = {}
        self._tools_agent: Agent | None = None
        self._hooks: Hooks | None = None

    @property
    def is_running(self) -> bool:
        """Whether a ``run()`` is in progress."""
        return self._active

    def pause(self) -> None:
        """Ask the running loop to stop after its current step (no-op when idle)."""
        with self._lock:
            if self._active:
                self._pause_requested = True

    def interrupt(self) -> None:
        """End the run now: kill running tool commands, run no further call, stop (no-op idle).

        The killed command's result and the calls left unrun are recorded,
        then the run ends ``paused`` as after :meth:`pause`. An LLM call in
        flight is not cut off: its answer is recorded, its tool calls are not run.
        """
        with self._lock:
            if not self._active:
                return
            self._pause_requested = True
            self._interrupted = True
            tools = list(self._tools.values())
        for tool in tools:
            tool.close()

    def close(self) -> None:
        """Stop after the current step, run ``SessionEnd`` hooks, kill running tool processes."""
        self.pause()
        with self._lock:
            tools, self._tools, self._tools_agent = self._tools, {}, None
            hooks, self._hooks = self._hooks, None
        for tool in tools.values():
            tool.close()
        if hooks is not None and hooks.session_started:
            ended = hooks.session_end()
            try:
                self._commit(lambda state: state._replace(branch=extend_active(state, ended)))
            except Exception:  # closing never fails on the store's account
                logger.exception("could not record the SessionEnd hooks' runs")

    def run(self) -> None:
        """Run the agent until it finishes, pauses, errors or hits the iteration limit."""
        with self._lock:
            if self._active:
                raise ConversationRunningError(
                    f"conversation {self._snapshot().id} is already running in another thread"
                )
            self._active = True
            self._pause_requested = False
            self._interrupted = False
        try:
            self._loop()
        except BaseException as error:
            # A failing store or an interrupt: leave a readable status, not "running".
            self._record_crash(error)
            raise
        finally:
            with self._lock:
                self._active = False
                self._pause_requested = False
                self._interrupted = False

    # -- the loop ------------------------------------------------------------

    def _commit(self, change: Change) -> None:
        self._commit_change(change)

    def _finish(self, status: ExecutionStatus, *events: Event) -> None:
        spent = self._hook_spend()

        def change(state: ConversationState) -> ConversationState:
            return state._replace(
                branch=extend_active(state, events),
                execution_status=status,
                stats=_with_spend(state, spent),
            )

        self._commit(change)

    def _record_crash(self, error: BaseException) -> None:
        if self._snapshot().execution_status is not ExecutionStatus.RUNNING:
            return
        status = ExecutionStatus.ERROR if isinstance(error, Exception) else ExecutionStatus.PAUSED
        try:
            if status is ExecutionStatus.ERROR:
                message = f"the run stopped: {type(error).__name__}: {error}"
                self._finish(status, AgentErrorEvent(error=message))
            else:
                self._finish(status, PauseEvent())
        except Exception:
            logger.exception("could not record why conversation %s stopped", self._snapshot().id)
            if self._settle is not None:
                self._settle(status)

    def _loop(self) -> None:
        agent = self._snapshot().agent
        try:
            # A copy fork's files are written on its first use: before its tools are made.
            materialize_workspace(self._snapshot().workspace)
        except Exception as error:
            self._finish(
                ExecutionStatus.ERROR,
                AgentErrorEvent(error=f"cannot write the workspace's files: {error}"),
            )
            return
        try:
            tools = self._tools_for(agent)
        except Exception as error:
            self._finish(
                ExecutionStatus.ERROR,
                AgentErrorEvent(error=f"cannot set up the agent's tools: {error}"),
            )
            return
        plain_specs = [tool.to_openai_tool() for tool in tools.values()]

        def start(state: ConversationState) -> ConversationState:
            if not _needs_reply(state.branch):
                return state._replace(execution_status=ExecutionStatus.FINISHED)
            # The agent's prompt, if it is not the one recorded last: send_message() put it
            # before the message already, unless the history was built by raw appends.
            state = with_system_prompt(state)
            return state._replace(execution_status=ExecutionStatus.RUNNING)

        self._commit(start)
        hooks = self._hooks = Hooks.of(self._snapshot(), self._hooks, run_hook_agent)
        if hooks is not None:
            started = hooks.session_start()
            if started:
                self._commit(lambda state: state._replace(branch=extend_active(state, started)))
        if blocked_user_message(self._snapshot().branch):
            self._finish(ExecutionStatus.FINISHED)  # a UserPromptSubmit hook blocked it
            return
        iterations = 0
        unseen_message = False
        while True:
            state = self._snapshot()
            waiting = pending_actions(state)
            if waiting and not self._pause_requested:
                # Calls held back for confirmation: this run() confirms them.
                results, crashed = self._run_calls([(action, None) for action in waiting], tools)
                self._record_step(results, crashed)
                if crashed:
                    return
                continue
            if not unseen_message and not _needs_reply(state.branch):
                if hooks is not None:
                    may_stop, stopping = hooks.stop()
                    if not may_stop and iterations < self.max_iteration_per_run:
                        self._record_step(stopping, False)
                        continue
                    self._finish(ExecutionStatus.FINISHED, *stopping)
                    return
                self._finish(ExecutionStatus.FINISHED)
                return
            if self._pause_requested:
                self._finish(ExecutionStatus.PAUSED, PauseEvent())
                return
            if iterations >= self.max_iteration_per_run:
                limit = AgentErrorEvent(
                    error=f"stopped after max_iteration_per_run={self.max_iteration_per_run} "
                    "steps without a final answer; run() again to continue"
                )
                self._finish(ExecutionStatus.STUCK, limit)
                return
            iterations += 1
            messages = self._messages(agent)
            state = self._snapshot()  # a condensation may have been recorded
            analyzed = state.security_analyzer is not None
            specs = with_security_risk(plain_specs) if analyzed else plain_specs
            try:
                response = agent.llm.completion(messages, specs)
            except LLMError as llm_error:
                self._finish(ExecutionStatus.ERROR, AgentErrorEvent(error=str(llm_error)))
                return
            spent: dict[str, Usage] = {}  # the tool calls' own LLM usage (sub-agents)
            produced, crashed, waits = self._act(
                response, tools, state, analyzed, spent, agent.tool_concurrency_limit
            )
            status = ExecutionStatus.ERROR if crashed else ExecutionStatus.RUNNING
            if waits:
                status = ExecutionStatus.WAITING_FOR_CONFIRMATION
            hook_spent = self._hook_spend()

            def record(
                state: ConversationState,
                produced: Sequence[Event] = produced,
                status: ExecutionStatus = status,
                usage_id: str = agent.llm.usage_id,
                usage: Usage = response.usage,
                spent: Mapping[str, Usage] = spent,
                hook_spent: list[tuple[str, Usage]] = hook_spent,
            ) -> ConversationState:
                stats = _with_spend(state, hook_spent).record(usage_id, usage)
                for tool_usage_id, tool_usage in spent.items():
                    stats = stats.record(tool_usage_id, tool_usage)
                return state._replace(
                    branch=extend_active(state, produced),
                    stats=stats,
                    execution_status=status,
                )

            self._commit(record)
            if crashed or waits:
                return
            unseen_message = _user_message_since(self._snapshot().branch, len(state.branch))

    def _record_step(self, produced: Sequence[Event], crashed: bool) -> None:
        """Record events a step produced without an LLM call (no cost)."""
        status = ExecutionStatus.ERROR if crashed else ExecutionStatus.RUNNING
        spent = self._hook_spend()

        def record(state: ConversationState) -> ConversationState:
            return state._replace(
                branch=extend_active(state, produced),
                execution_status=status,
                stats=_with_spend(state, spent),
            )

        self._commit(record)

    def _hook_spend(self) -> list[tuple[str, Usage]]:
        """What prompt and agent hooks spent since last asked (recorded with the step)."""
        hooks = self._hooks
        return hooks.take_spent() if hooks is not None else []

    def _messages(self, agent: Agent) -> list[dict[str, Any]]:
        """What the model sees this step: the history, or the condenser's view of it.

        A condensation the view needs is recorded first (its summary call
        counted under the condenser's ``usage_id``). If the summary call
        fails, the failure is recorded and this step sees the uncondensed
        view: no event is lost either way.
        """
        events = self._snapshot().branch
        condenser = agent.condenser
        if condenser is None:
            return build_messages(events)
        view = condenser_view(condenser, events)
        plan = plan_condensation(condenser, view) if should_condense(condenser, view) else None
        if plan is not None:
            try:
                condensation, response = summarize(condenser, plan)
            except LLMError as error:
                failure = AgentErrorEvent(
                    error=f"condensation failed, sending the full view: {error}"
                )
                self._commit(lambda state: state._replace(branch=extend_active(state, (failure,))))
            else:

                def record(state: ConversationState) -> ConversationState:
                    return state._replace(
                        branch=extend_active(state, (condensation,)),
                        stats=state.stats.record(condenser.llm.usage_id, response.usage),
                    )

                self._commit(record)
                view = condenser_view(condenser, self._snapshot().branch)
        return view.messages(system_prompt=agent.system_prompt)

    def _act(
        self,
        response: LLMResponse,
        tools: Mapping[str, ToolDefinition[Any]],
        state: ConversationState,
        analyzed: bool = False,
        spent: dict[str, Usage] | None = None,
        concurrency: int = 1,
    ) -> tuple[list[Event], bool, bool]:
        """The events of one answer (a message, or tool calls and their results), whether a
        tool crashed, and whether the calls wait for confirmation (then they are not run).

        With ``concurrency`` above 1 (``Agent.tool_concurrency_limit``) the
        calls run on that many threads, as in OpenHands' SDK: calls whose
        tools declare a shared resource (by default: calls of one tool) wait
        for each other; results are recorded in the order of the calls.
        """
        if not response.tool_calls:
            message = MessageEvent(
                source="agent",
                llm_message=Message(
                    role="assistant",
                    content=response.content,
                    reasoning_content=response.reasoning_content,
                ),
                llm_response_id=response.id,
            )
            return [message], False, False
        # The files before the step's calls run (a workspace that records snapshots): what a
        # fork from an event before them gets, direct edits since the last call included.
        before = record_snapshot(self._snapshot().workspace)
        calls = [
            _action(response, call, response.content if index == 0 else "", analyzed, before)
            for index, call in enumerate(response.tool_calls)
        ]
        actions = [action for action, _ in calls]
        waits, analysis = confirmation_needed(state, actions)
        if waits:
            return [*actions, *analysis], False, True
        results, crashed = self._run_calls(calls, tools, spent, concurrency)
        return [*actions, *analysis, *results], crashed, False

    def _run_calls(
        self,
        calls: Sequence[tuple[ActionEvent, ToolArgumentError | None]],
        tools: Mapping[str, ToolDefinition[Any]],
        spent: dict[str, Usage] | None = None,
        concurrency: int = 1,
    ) -> tuple[list[Event], bool]:
        """Run tool calls (hooks around each): their results, and whether one crashed.

        They run in order when the conversation has hooks (each call's hooks see the
        calls before it done), else on up to ``concurrency`` threads.
        """
        hooks = self._hooks
        workspace = self._snapshot().workspace
        if hooks is None and concurrency > 1 and len(calls) > 1:
            concurrent = self._act_concurrently(calls, tools, spent, concurrency)
            crashed = any(isinstance(result, AgentErrorEvent) for result in concurrent)
            return concurrent, crashed
        results: list[Event] = []
        crashed = False
        for action, problem in calls:
            if self._interrupted:
                results.append(
                    AgentErrorEvent(
                        error="not run: the run was interrupted",
                        tool_call_id=action.tool_call_id,
                        tool_name=action.tool_name,
                    )
                )
                continue
            if crashed:
                results.append(
                    AgentErrorEvent(
                        error="not run: an earlier tool call of the same step crashed",
                        tool_call_id=action.tool_call_id,
                        tool_name=action.tool_name,
                    )
                )
                continue
            if hooks is not None:
                ran, blocked = hooks.pre_tool_use(action)
                results.extend(ran)
                if blocked is not None:
                    results.extend(rejections([action], blocked, "hook"))
                    continue
            result = _execute(tools, action, problem, spent, workspace)
            crashed = isinstance(result, AgentErrorEvent)
            results.append(result)
            if hooks is not None:
                results.extend(hooks.post_tool_use(action, result))
        return results, crashed

    def _act_concurrently(
        self,
        calls: Sequence[tuple[ActionEvent, ToolArgumentError | None]],
        tools: Mapping[str, ToolDefinition[Any]],
        spent: dict[str, Usage] | None,
        concurrency: int,
    ) -> list[Event]:
        locks: dict[str, threading.Lock] = {}
        keys = [sorted(_resource_keys(tools, action, problem)) for action, problem in calls]
        for key in (key for held in keys for key in held):
            locks.setdefault(key, threading.Lock())
        spent_by_call: list[dict[str, Usage]] = [{} for _ in calls]
        workspace = self._snapshot().workspace

        def run(index: int) -> Event:
            action, problem = calls[index]
            held = [locks[key] for key in keys[index]]
            for lock in held:  # sorted keys: no two calls wait for each other in a cycle
                lock.acquire()
            try:
                if self._interrupted:
                    return AgentErrorEvent(
                        error="not run: the run was interrupted",
                        tool_call_id=action.tool_call_id,
                        tool_name=action.tool_name,
                    )
                return _execute(tools, action, problem, spent_by_call[index], workspace)
            finally:
                for lock in reversed(held):
                    lock.release()

        workers = min(concurrency, len(calls))
        # Here, not at import: only concurrent tool calls need it (a first use does not).
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cowconv-tool") as pool:
            results = list(pool.map(run, range(len(calls))))
        if spent is not None:
            for call_spent in spent_by_call:
                for usage_id, usage in call_spent.items():
                    spent[usage_id] = spent.get(usage_id, Usage()) + usage
        return results

    def _tools_for(self, agent: Agent) -> dict[str, ToolDefinition[Any]]:
        state = self._snapshot()
        with self._lock:
            if self._tools_agent is agent:
                # navigate_to may have moved the branch since the tools were made: a tool that
                # takes state up from the history (restore) takes it from this run's branch.
                for tool in self._tools.values():
                    tool.restore(state.branch)
                return self._tools
        tools: dict[str, ToolDefinition[Any]] = {}
        try:
            for reference in agent.tools:
                for tool in create_tools(reference, state):
                    if tool.name in tools:
                        tool.close()
                        raise InvalidValueError(f"the agent has two tools named {tool.name!r}")
                    tools[tool.name] = tool
                    tool.restore(state.branch)
                    if agent.agent_context is not None and agent.agent_context.secrets:
                        tool.use_secrets(agent.agent_context.secret_getters())
            pattern = agent.filter_tools_regex
            for name in [name for name in tools if pattern and not re.match(pattern, name)]:
                tools.pop(name).close()
            served = _mcp_tools(agent)
            wanted = [tool for tool in served if not pattern or re.match(pattern, tool.name)]
            if served and not wanted:
                served[0].close()  # their shared client: none of its tools is used
            for tool in wanted:
                if tool.name in tools:
                    tool.close()
                    raise InvalidValueError(f"the agent has two tools named {tool.name!r}")
                tools[tool.name] = tool
        except BaseException:
            for made in tools.values():
                made.close()
            raise
        with self._lock:
            old, self._tools, self._tools_agent = self._tools, tools, agent
        for tool in old.values():
            tool.close()
        return tools


# The MCP client lives above this layer and needs the optional `mcp` package: it is loaded
# by name, as the built-in tools are, and only for an agent that has MCP servers.
_MCP_MODULE = "cowconv.mcp.client"


def _mcp_tools(agent: Agent) -> list[ToolDefinition[Any]]:
    """The tools of the agent's MCP servers for one conversation (its own sessions)."""
    if not agent.mcp_config:
        return []
    try:
        module = importlib.import_module(_MCP_MODULE)
    except ImportError as error:
        logger.warning(
            "MCP server startup failed for %s; continuing without its tools: %s "
            "(install cowconv's mcp extra: pip install 'cowconv[mcp]')",
            ", ".join(sorted(agent.mcp_config)),
            error,
        )
        return []
    made: list[ToolDefinition[Any]] = module.runtime_mcp_tools(agent.mcp_config)
    return made


def _resource_keys(
    tools: Mapping[str, ToolDefinition[Any]],
    action: ActionEvent,
    problem: ToolArgumentError | None,
) -> set[str]:
    """The locks a call holds while it runs beside others: its declared resources, or its tool."""
    tool = tools.get(action.tool_name)
    if tool is None or problem is not None:
        return set()  # answered at once, with an error observation
    try:
        declared = tool.declared_resources(tool.validate_arguments(action.arguments))
    except ToolArgumentError:
        return set()
    except Exception:  # a tool's own declaration failing: run its calls one at a time
        logger.exception("tool %r could not declare its resources", action.tool_name)
        return {f"tool:{action.tool_name}"}
    if not declared.declared:
        return {f"tool:{action.tool_name}"}
    return set(declared.keys)


def _execute(
    tools: Mapping[str, ToolDefinition[Any]],
    action: ActionEvent,
    problem: ToolArgumentError | None = None,
    spent: dict[str, Usage] | None = None,
    workspace: Workspace | None = None,
) -> Event:
    """The result of one tool call: an observation, or an error if the tool crashed.

    ``problem`` is why the call's arguments did not decode (see :func:`_action`);
    what the tool spent on LLMs of its own (:attr:`ToolResult.usage`) is added to ``spent``.
    A ``workspace`` that records snapshots is snapshotted after the call, and the
    observation names that snapshot.
    """

    def observation(output: str, error: str) -> ObservationEvent:
        return ObservationEvent(
            tool_name=action.tool_name,
            tool_call_id=action.tool_call_id,
            output=f"Error: {output}",
            extra={"error": error},
        )

    name = action.tool_name
    tool = tools.get(name)
    if tool is None:
        available = ", ".join(repr(known) for known in tools) or "none"
        return observation(f"there is no tool {name!r}; the tools are: {available}", "unknown_tool")
    try:
        if problem is not None:
            raise problem
        params = tool.validate_arguments(action.arguments)
    except ToolArgumentError as error:
        return observation(str(error), "invalid_arguments")
    try:
        result = tool.execute(params)
    except Exception as error:
        logger.exception("tool %r crashed on call %s", name, action.tool_call_id)
        return AgentErrorEvent(
            error=f"tool {name!r} crashed: {type(error).__name__}: {error}",
            tool_call_id=action.tool_call_id,
            tool_name=name,
        )
    if spent is not None and result.usage:
        for usage_id, usage in result.usage.items():
            spent[usage_id] = spent.get(usage_id, Usage()) + usage
    return ObservationEvent(
        tool_name=name,
        tool_call_id=action.tool_call_id,
        output=result.output,
        exit_code=result.exit_code,
        extra=dict(result.extra) if result.extra is not None else None,
        observation=result.observation,
        action_id=action.id if result.observation is not None else None,
        workspace_snapshot=None if workspace is None else record_snapshot(workspace),
    )


def _with_spend(state: ConversationState, spent: Sequence[tuple[str, Usage]]) -> ConversationStats:
    stats = state.stats
    for usage_id, usage in spent:
        stats = stats.record(usage_id, usage)
    return stats


def run_hook_agent(
    hook: HookDefinition, event: HookEvent, llm: LLM, working_dir: str
) -> tuple[str, Mapping[str, Usage]]:
    """Run an agent hook's small agent on ``event``: its last answer (``""`` if none) and what
    it spent, by ``usage_id``.

    The agent is ``llm`` (its usage counted as ``agent-hook:<name>``) with the
    hook's ``tools`` and ``system_prompt``, in ``working_dir``, for at most the
    hook's ``max_iterations`` steps, in memory and without hooks of its own.
    """
    hook_llm = llm.model_copy(
        update={"usage_id": f"agent-hook:{hook.name or 'default'}", "timeout": hook.timeout}
    )
    agent = Agent(
        llm=hook_llm,
        tools=tuple(Tool(name=name) for name in hook.tools),
        **({"system_prompt": hook.system_prompt} if hook.system_prompt else {}),
    )
    state = ConversationState(
        id=f"agent-hook-{new_event_id()}", agent=agent, workspace=Workspace(working_dir=working_dir)
    )
    question = (
        f"Evaluate this {event.event_type} hook event and make your decision.\n\n"
        f"## Hook Event\n```json\n{event.model_dump_json(indent=2)}\n```"
    )
    state = SendMessage(
        MessageEvent(source="user", llm_message=Message(role="user", content=question)),
        system_prompt_event(agent),
    )(state)
    holder = [state]

    def commit(change: Change) -> None:
        holder[0] = change(holder[0])

    runner = Runner(lambda: holder[0], commit, max_iteration_per_run=hook.max_iterations)
    try:
        runner.run()
    finally:
        runner.close()
    final = holder[0]
    spent = dict(final.stats.by_usage_id)
    for recorded_event in reversed(final.branch):
        if isinstance(recorded_event, MessageEvent) and recorded_event.role == "assistant":
            return recorded_event.text, spent
    return "", spent
