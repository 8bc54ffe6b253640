"""``TaskManager``: runs sub-agent tasks as child conversations, and keeps what they did.

A task is a child :class:`~cowconv.Conversation` in the parent's
workspace, with its own history, running the agent a registered factory
(:func:`~cowconv.subagent.register_agent`) makes on the parent's LLM.
Everything the child recorded during a call is returned with the answer
(:class:`TaskRun`), and the task tool records it in the parent's history,
on the observation of the call (``extra["task"]``). The child's history is
therefore part of the parent's: :meth:`TaskManager.restore` rebuilds every
task from a history, so a task can be resumed after the parent is stored
and reopened, and a fork of the parent resumes the child as it was at the
fork point, never touching the source's child. A child conversation object
lives only for one call and is never shared.

>>> from cowconv import Agent, Message, Workspace
>>> from cowconv.subagent import register_agent_if_absent
>>> from cowconv.testing import TestLLM
>>> child_llm = TestLLM.from_messages([Message(role="assistant", content="42")])
>>> register_agent_if_absent("doc-answerer", lambda llm: Agent(llm=child_llm), "Answers.")
True
>>> manager = TaskManager(Workspace(working_dir="."), child_llm)
>>> run = manager.run_task("What is six times seven?", subagent_type="doc-answerer")
>>> run.task.id, run.task.status.value, run.task.result
('task_00000001', 'completed', '42')
>>> [event.kind for event in run.events]
['SystemPromptEvent', 'MessageEvent', 'MessageEvent']
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cowconv._exceptions import ConversationRunError, InvalidTypeError, InvalidValueError
from cowconv.conversation import Conversation
from cowconv.core.agent import Agent
from cowconv.core.events import (
    AgentErrorEvent,
    ConversationErrorEvent,
    Event,
    MessageEvent,
    ObservationEvent,
)
from cowconv.core.frozen import thaw
from cowconv.core.llm import LLM
from cowconv.core.state import DEFAULT_MAX_ITERATION_PER_RUN, ExecutionStatus
from cowconv.core.usage import Usage
from cowconv.core.workspace import Workspace
from cowconv.subagent.registry import AgentFactory, get_agent_factory

__all__ = ["TASK_RECORD_KEY", "Task", "TaskManager", "TaskRun", "TaskStatus", "task_records"]

logger = logging.getLogger("cowconv.tools.task")

#: The key of ``ObservationEvent.extra`` under which the task tool records a call's child events.
TASK_RECORD_KEY = "task"

#: Called with a task's id and the actions waiting for confirmation; OpenHands' SDK's hook.
ConfirmationHandler = Callable[[str, list[Any]], bool]


class TaskStatus(StrEnum):
    """Where a task stands: ``running``, ``completed`` or ``error``.

    >>> TaskStatus.COMPLETED.value
    'completed'
    """

    RUNNING = "running"
    COMPLETED = "completed"
    ERROR = "error"


class Task(BaseModel):
    """One sub-agent task: its id, status, child conversation id, and its result or error.

    >>> Task(id="task_00000001", status="completed", conversation_id="c1", result="ok").result
    'ok'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Unique identifier of the task.")
    status: TaskStatus = Field(description="Task status.")
    conversation_id: str = Field(description="The id of the task's child conversation.")
    result: str | None = Field(default=None, description="Result of the task.")
    error: str | None = Field(default=None, description="Error if task failed.")


@dataclass(frozen=True)
class TaskRun:
    """What one call of a task produced: the task, the agent type, the child's new events, usage.

    ``usage`` is what the child's LLM calls of this call cost (the parent
    records it under ``task:<id>`` in its stats, as OpenHands' SDK does).

    >>> TaskRun(Task(id="t", status="error", conversation_id="c", error="x"),
    ...         "general-purpose", (), Usage()).task.error
    'x'
    """

    task: Task
    subagent: str
    events: tuple[Event, ...]
    usage: Usage


def task_records(events: Iterable[Event]) -> dict[str, tuple[str, list[Event]]]:
    """Each task recorded in a parent's history: its id -> (child conversation id, child events).

    The events of every call of a task, in order (a resumed task's calls
    add to its first one's).

    >>> task_records([])
    {}
    """
    found: dict[str, tuple[str, list[Event]]] = {}
    for event in events:
        if not isinstance(event, ObservationEvent) or event.extra is None:
            continue
        record = event.extra.get(TASK_RECORD_KEY) if isinstance(event.extra, Mapping) else None
        if not isinstance(record, Mapping):
            continue
        task_id, conversation_id = record.get("task_id"), record.get("conversation_id")
        if not isinstance(task_id, str) or not isinstance(conversation_id, str):
            continue
        child = found.setdefault(task_id, (conversation_id, []))[1]
        child.extend(Event.model_validate(thaw(item)) for item in record.get("events", ()))
    return found


def _final_response(events: Sequence[Event]) -> str:
    """The text of the agent's last message among ``events`` (``""`` without one)."""
    for event in reversed(events):
        if isinstance(event, MessageEvent) and event.source == "agent":
            return event.text
    return ""


def _stop_detail(events: Sequence[Event], status: ExecutionStatus) -> str:
    """Why a child stopped without finishing, with what it answered so far."""
    reason = f"Sub-agent stopped without finishing (status: {status.value})."
    for event in reversed(events):
        if isinstance(event, AgentErrorEvent):
            reason = event.error
            break
        if isinstance(event, ConversationErrorEvent):
            reason = event.detail
            break
    partial = _final_response(events)
    return f"{reason}\nPartial result:\n{partial}" if partial else reason


class TaskManager:
    """Starts and resumes the sub-agent tasks of one parent conversation.

    ``workspace`` is where children work (the parent's), ``llm`` the
    parent's LLM: each child's agent is made from a copy of it by the
    registered factory. Without them (a tool made with no conversation
    state, as OpenHands' tests make one to read its description) a task
    cannot start. ``max_iteration_per_run`` caps a child's run when
    its definition sets none.
    """

    def __init__(
        self,
        workspace: Workspace | None,
        llm: LLM | None,
        *,
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
        confirmation_handler: ConfirmationHandler | None = None,
    ) -> None:
        if workspace is not None and not isinstance(workspace, Workspace):
            raise InvalidTypeError(f"workspace must be a Workspace, got {type(workspace).__name__}")
        if llm is not None and not isinstance(llm, LLM):
            raise InvalidTypeError(f"llm must be a cowconv.LLM, got {type(llm).__name__}")
        self._workspace = workspace
        self._llm = llm
        self._max_iteration_per_run = max_iteration_per_run
        self._confirmation_handler = confirmation_handler
        self._lock = threading.Lock()
        # task id -> (child conversation id, every event the child recorded so far)
        self._tasks: dict[str, tuple[str, list[Event]]] = {}
        # task id -> its child conversation, while a call runs it
        self._running: dict[str, Conversation] = {}

    def restore(self, events: Iterable[Event]) -> None:
        """Take up the tasks recorded in a parent's history (replacing what this manager held).

        >>> from cowconv import LLM, Workspace
        >>> manager = TaskManager(Workspace(working_dir="."), LLM(model="openai/gpt-4o"))
        >>> manager.restore([])
        >>> manager.task_ids
        []
        """
        found = task_records(events)
        with self._lock:
            self._tasks = found

    @property
    def task_ids(self) -> list[str]:
        """The ids of the tasks started or restored, in order."""
        with self._lock:
            return list(self._tasks)

    def run_task(
        self,
        prompt: str,
        subagent_type: str = "general-purpose",
        resume: str | None = None,
        description: str | None = None,
        sender: str | None = None,
    ) -> TaskRun:
        """Start a task (or continue task ``resume``) with ``prompt``, run it, and answer.

        A child that does not finish (an error, the iteration limit) makes
        a task in ``error`` whose text says why, with its partial answer.
        An unknown agent type or task id is an ``InvalidValueError``.
        """
        if not isinstance(prompt, str):
            raise InvalidTypeError(f"prompt must be a str, got {type(prompt).__name__}")
        factory = get_agent_factory(subagent_type)
        with self._lock:
            if resume is not None and resume not in self._tasks:
                raise InvalidValueError(
                    f"Task '{resume}' not found. Available tasks: {', '.join(sorted(self._tasks))}"
                )
            conversation_id, history = (
                (self._tasks[resume][0], list(self._tasks[resume][1]))
                if resume is not None
                else (uuid.uuid4().hex, [])
            )
        child = self._child(factory, conversation_id)  # the factory may fail: nothing taken yet
        with self._lock:
            if resume is None:
                task_id = f"task_{len(self._tasks) + 1:08x}"
                self._tasks[task_id] = (conversation_id, [])
            elif resume in self._running:
                child.close()
                raise InvalidValueError(f"Task '{resume}' is already running")
            else:
                task_id = resume
            self._running[task_id] = child
        try:
            run = self._run(child, factory, task_id, history, prompt, sender)
        finally:
            with self._lock:
                del self._running[task_id]
        with self._lock:
            self._tasks[task_id] = (conversation_id, [*history, *run.events])
        return run

    def _child_agent(self, factory: AgentFactory) -> Agent:
        if self._llm is None:
            raise InvalidValueError(
                "the task tool was made without a conversation state: it has no parent LLM"
            )
        agent = factory.factory_func(self._llm.model_copy())
        if not isinstance(agent, Agent):
            raise InvalidTypeError(
                f"the factory of agent {factory.definition.name!r} must return a cowconv.Agent, "
                f"got {type(agent).__name__}"
            )
        return agent

    def _child(self, factory: AgentFactory, conversation_id: str) -> Conversation:
        limit = factory.definition.max_iteration_per_run or self._max_iteration_per_run
        agent = self._child_agent(factory)
        if self._workspace is None:
            raise InvalidValueError(
                "the task tool was made without a conversation state: it has no workspace"
            )
        return Conversation(
            agent=agent,
            workspace=self._workspace,
            conversation_id=conversation_id,
            max_iteration_per_run=limit,
            visualizer=None,
        )

    def _run(
        self,
        child: Conversation,
        factory: AgentFactory,
        task_id: str,
        history: list[Event],
        prompt: str,
        sender: str | None,
    ) -> TaskRun:
        conversation_id = str(child.id)
        try:
            for event in history:
                child.append_event(event)
            start = len(child.state.events)
            child.send_message(prompt, sender=sender)
            try:
                child.run()
            except ConversationRunError:
                pass  # recorded in the child's history: the status and the error say why
            except Exception:  # a crash the child's run recorded too: its events are kept
                logger.warning("task %s: the sub-agent's run crashed", task_id, exc_info=True)
            state = child.state
        finally:
            child.close()
        events = tuple(state.events[start:])
        usage = state.stats.get_combined_metrics()
        if state.execution_status is ExecutionStatus.FINISHED:
            result = _final_response(events) or "Task completed with no result."
            task = Task(
                id=task_id,
                status=TaskStatus.COMPLETED,
                conversation_id=conversation_id,
                result=result,
            )
        else:
            task = Task(
                id=task_id,
                status=TaskStatus.ERROR,
                conversation_id=conversation_id,
                error=_stop_detail(events, state.execution_status),
            )
        return TaskRun(task, factory.definition.name, events, usage)

    def interrupt(self) -> None:
        """End the runs of the children running now (each ends ``paused``; see ``interrupt``)."""
        with self._lock:
            running = list(self._running.values())
        for child in running:
            child.interrupt()

    def close(self) -> None:
        """Interrupt running children. The tasks stay known: ``restore`` or a resume finds them."""
        self.interrupt()
