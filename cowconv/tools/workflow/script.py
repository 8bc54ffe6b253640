"""Workflow scripts: model-written Python that fans sub-agents out through a ``wf`` object.

>>> validate_workflow_script("async def main(wf):\\n    return await wf.run_agent('hi')\\n")
>>> validate_workflow_script("import os\\nasync def main(wf):\\n    pass\\n")
Traceback (most recent call last):
...
cowconv.tools.workflow.script.WorkflowScriptError: Workflow scripts may not import modules

A script defines ``async def main(wf)`` and may only call ``wf``'s public
methods (:class:`WorkflowContext`) and a few safe built-ins; the checks are
best effort, as in OpenHands' SDK: running a workflow approves running the
code the model wrote, in this process.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from cowconv._exceptions import CowconvError, InvalidValueError
from cowconv.core.llm import LLM
from cowconv.core.workspace import Workspace
from cowconv.tools.task.manager import TaskManager, TaskRun, TaskStatus

__all__ = [
    "SubAgentError",
    "WorkflowContext",
    "WorkflowScriptError",
    "execute_workflow_script",
    "validate_workflow_script",
]

logger = logging.getLogger("cowconv.tools.workflow")

_MAX_SCRIPT_CHARS: Final = 20_000
_MAX_REDUCE_INPUT_CHARS: Final = 12_000
_TRUNCATED: Final = "\n... [truncated workflow intermediate results]"
_TIMEOUT_SECONDS: Final = 3600.0
_UNSAFE_CALLS: Final = frozenset(
    {
        "breakpoint",
        "compile",
        "delattr",
        "dir",
        "eval",
        "exec",
        "getattr",
        "globals",
        "input",
        "locals",
        "open",
        "setattr",
        "vars",
        "__import__",
    }
)
_UNSAFE_ROOTS: Final = frozenset({"os", "subprocess"})
_SAFE_BUILTINS: Final[dict[str, Any]] = {
    "abs": abs,
    "all": all,
    "any": any,
    "bool": bool,
    "dict": dict,
    "enumerate": enumerate,
    "Exception": Exception,
    "float": float,
    "format": format,
    "IndexError": IndexError,
    "int": int,
    "isinstance": isinstance,
    "KeyError": KeyError,
    "len": len,
    "list": list,
    "max": max,
    "min": min,
    "print": print,
    "range": range,
    "repr": repr,
    "round": round,
    "RuntimeError": RuntimeError,
    "set": set,
    "sorted": sorted,
    "str": str,
    "sum": sum,
    "tuple": tuple,
    "type": type,
    "TypeError": TypeError,
    "ValueError": ValueError,
    "zip": zip,
}


class WorkflowScriptError(InvalidValueError):
    """A workflow script that is invalid, unsafe, or ran out of time (a ``ValueError``).

    >>> issubclass(WorkflowScriptError, ValueError)
    True
    """


class SubAgentError(CowconvError, RuntimeError):
    """A workflow's sub-agent did not finish its task (the text says why; a ``RuntimeError``).

    >>> issubclass(SubAgentError, RuntimeError)
    True
    """


class WorkflowContext:
    """The ``wf`` object of a workflow script: sub-agent runs, ``max_concurrency`` at once at most.

    Each run is a task of ``manager`` (a child conversation; by default a
    :class:`~cowconv.tools.task.TaskManager` for ``parent_conversation``'s
    workspace and LLM); the runs made are kept in :attr:`runs`, in the
    order they ended. OpenHands' SDK's signature.

    >>> from cowconv import Agent, Message, Workspace
    >>> from cowconv.subagent import register_agent_if_absent
    >>> from cowconv.testing import TestLLM
    >>> llm = TestLLM.from_messages([Message(role="assistant", content="ok")])
    >>> _ = register_agent_if_absent("doc-worker", lambda parent: Agent(llm=llm), "Works.")
    >>> manager = TaskManager(Workspace(working_dir="."), llm)
    >>> wf = WorkflowContext(manager=manager, max_concurrency=2)
    >>> asyncio.run(wf.run_agent("Work.", subagent_type="doc-worker")), len(wf.runs)
    ('ok', 1)
    >>> wf.flatten([[1, 2], 3])
    [1, 2, 3]
    """

    def __init__(
        self,
        parent_conversation: Any = None,
        max_concurrency: int = 8,
        manager: Any = None,
        sub_agent_scope: Any = None,
    ) -> None:
        if max_concurrency < 1:
            raise InvalidValueError("max_concurrency must be at least 1")
        if sub_agent_scope:
            raise InvalidValueError(
                "sub_agent_scope restricting a workflow's sub-agents is not in cowconv yet"
            )
        if isinstance(parent_conversation, TaskManager) and manager is None:
            parent_conversation, manager = None, parent_conversation  # cowconv's short form
        if manager is None:
            manager = TaskManager(*_parent_of(parent_conversation))
        # A cowconv TaskManager, or an object with OpenHands' start_task(...) and close().
        self._manager = manager
        self._max_concurrency = max_concurrency
        self._semaphore: asyncio.Semaphore | None = None
        self._runs: list[TaskRun] = []
        self._runs_lock = threading.Lock()
        self._closed = False

    @property
    def runs(self) -> list[TaskRun]:
        """The sub-agent runs made so far."""
        with self._runs_lock:
            return list(self._runs)

    def _shared_semaphore(self) -> asyncio.Semaphore:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._max_concurrency)
        return self._semaphore

    async def run_agent(
        self, prompt: str, subagent_type: str = "general-purpose", description: str | None = None
    ) -> str:
        """Run one sub-agent on ``prompt`` and return its answer (a failure raises)."""
        async with self._shared_semaphore():
            return await self._run(prompt, subagent_type, description)

    async def _run(self, prompt: str, subagent_type: str, description: str | None) -> str:
        if self._closed:
            raise WorkflowScriptError("WorkflowContext is already closed")
        if not isinstance(self._manager, TaskManager):  # OpenHands' protocol (its tests' fakes)
            task = await asyncio.to_thread(
                self._manager.start_task,
                prompt=prompt,
                subagent_type=subagent_type,
                description=description,
            )
            if task.error:
                raise SubAgentError(task.error)
            return str(task.result or "")
        run = await asyncio.to_thread(
            self._manager.run_task,
            prompt=str(prompt),
            subagent_type=subagent_type,
            description=description,
        )
        with self._runs_lock:
            self._runs.append(run)
        if run.task.status is not TaskStatus.COMPLETED:
            raise SubAgentError(run.task.error or "the sub-agent failed")
        return run.task.result or ""

    async def map_agents(
        self,
        items: Sequence[Any],
        prompt: Callable[[Any], str] | str,
        subagent_type: str = "general-purpose",
        max_concurrency: int | None = None,
        description: Callable[[Any], str] | str | None = None,
    ) -> list[str]:
        """One sub-agent per item (``prompt`` a function of it, or a template with ``{item}``).

        The answers come in the order of ``items``; if any run fails, an
        ``ExceptionGroup`` of the failures is raised. ``max_concurrency``
        narrows the context's limit for this call.
        """
        if max_concurrency is not None and max_concurrency < 1:
            raise InvalidValueError("max_concurrency must be at least 1")
        semaphore = (
            asyncio.Semaphore(min(max_concurrency, self._max_concurrency))
            if max_concurrency is not None
            else self._shared_semaphore()
        )

        async def one(index: int, item: Any) -> str:
            text = _render(prompt, item)
            label = None if description is None else _render(description, item)
            async with semaphore:
                try:
                    return await self._run(text, subagent_type, label)
                except Exception as error:
                    raise SubAgentError(f"[item {index + 1}] {error}") from error

        results = await asyncio.gather(
            *(one(index, item) for index, item in enumerate(items)), return_exceptions=True
        )
        failures = [
            result if isinstance(result, Exception) else SubAgentError(str(result))
            for result in results
            if isinstance(result, BaseException)
        ]
        if failures:
            raise ExceptionGroup("map_agents: one or more sub-agents failed", failures)
        return [str(result) for result in results]

    async def reduce_agent(
        self,
        items: Any,
        prompt: str,
        subagent_type: str = "general-purpose",
        description: str | None = None,
    ) -> str:
        """One sub-agent given ``prompt`` and ``items`` as JSON (cut to fit), answering once."""
        return await self.run_agent(
            f"{prompt}\n\nInput:\n{_format_value(items)}", subagent_type, description
        )

    async def pipeline(self, items: Sequence[Any], *stages: Callable[[Any], Any]) -> list[Any]:
        """Each item through every stage in turn, items independently; a failing item is None."""
        if not stages:
            raise InvalidValueError("pipeline requires at least one stage")

        async def chain(index: int, item: Any) -> Any:
            value = item
            try:
                for stage in stages:
                    result = stage(value)
                    value = await result if inspect.isawaitable(result) else result
            except Exception as error:
                logger.warning("pipeline: item %d failed: %s", index + 1, error)
                return None
            return value

        return list(await asyncio.gather(*(chain(i, item) for i, item in enumerate(items))))

    def flatten(self, values: list[Any]) -> list[Any]:
        """``values`` with one level of lists flattened."""
        flat: list[Any] = []
        for value in values:
            if isinstance(value, list):
                flat.extend(value)
            else:
                flat.append(value)
        return flat

    def close(self) -> None:
        """Refuse further runs and close the manager, once (the tool's, not the script's)."""
        if self._closed:
            return
        self._closed = True
        self._manager.close()


def _parent_of(conversation: Any) -> tuple[Workspace | None, LLM | None]:
    """The workspace and LLM of a parent conversation, as far as it has them."""
    state = getattr(conversation, "state", None)
    workspace = getattr(state, "workspace", None)
    agent = getattr(state, "agent", None)
    llm = getattr(agent, "llm", None)
    return (
        workspace if isinstance(workspace, Workspace) else None,
        llm if isinstance(llm, LLM) else None,
    )


def _format_exception(error: Exception) -> str:
    """An error's text for the model; an ExceptionGroup's with each of its errors numbered."""
    if isinstance(error, ExceptionGroup):
        details = "\n".join(
            f"  [{index}] {inner}" for index, inner in enumerate(error.exceptions, start=1)
        )
        return f"{error.args[0]}:\n{details}"
    return str(error)


def _render(template: Callable[[Any], str] | str, item: Any) -> str:
    if callable(template):
        return str(template(item))
    # A plain replace: str.format would let "{item._x}" reach attributes the checks forbid.
    return template.replace(
        "{item}", item if isinstance(item, str) else json.dumps(item, default=str)
    )


def _format_value(value: Any) -> str:
    if isinstance(value, list | dict):
        return _truncate_structured(value)
    return _truncate(value if isinstance(value, str) else json.dumps(value, default=str))


def _truncate(text: str) -> str:
    if len(text) <= _MAX_REDUCE_INPUT_CHARS:
        return text
    return text[:_MAX_REDUCE_INPUT_CHARS] + _TRUNCATED


def _truncate_structured(value: list[Any] | dict[Any, Any]) -> str:
    """The JSON of ``value``, dropping whole trailing elements to fit (and saying how many)."""
    full = json.dumps(value, indent=2, default=str)
    if len(full) <= _MAX_REDUCE_INPUT_CHARS:
        return full
    elements: list[Any] = list(value.items()) if isinstance(value, dict) else list(value)

    def render(kept: list[Any]) -> str:
        body = json.dumps(dict(kept) if isinstance(value, dict) else kept, indent=2, default=str)
        dropped = len(elements) - len(kept)
        if not dropped:
            return body
        omitted = f"{dropped} of {len(elements)} items omitted to fit the reduce input limit"
        return f"{body}\n... [{omitted}]"

    kept = list(elements)
    while len(kept) > 1 and len(render(kept)) > _MAX_REDUCE_INPUT_CHARS:
        kept.pop()
    return _truncate(render(kept))


def _root_name(node: ast.Attribute) -> str | None:
    value = node.value
    while isinstance(value, ast.Attribute):
        value = value.value
    return value.id if isinstance(value, ast.Name) else None


def validate_workflow_script(script: str) -> None:
    """Refuse a script that is too long, not Python, lacks ``async def main(wf)``, or reaches out.

    No imports, no dunder names or attributes, no private ``wf`` attribute
    or ``wf.close()``, no ``os``/``subprocess``, no ``eval``/``exec``/``open``
    and the like: a :class:`WorkflowScriptError` says which.
    """
    if len(script) > _MAX_SCRIPT_CHARS:
        raise WorkflowScriptError(
            f"Workflow script is too large: {len(script)} > {_MAX_SCRIPT_CHARS}"
        )
    try:
        tree = ast.parse(script)
    except SyntaxError as error:
        raise WorkflowScriptError(f"Workflow script has invalid syntax: {error}") from None
    mains = [
        node for node in tree.body if isinstance(node, ast.AsyncFunctionDef) and node.name == "main"
    ]
    if len(mains) != 1:
        raise WorkflowScriptError("Workflow script must define exactly one async main(wf)")
    arguments = mains[0].args
    if (
        [argument.arg for argument in arguments.args] != ["wf"]
        or arguments.kwonlyargs
        or arguments.vararg
        or arguments.kwarg
        or arguments.defaults
        or arguments.posonlyargs
    ):
        raise WorkflowScriptError("Workflow entry point must be `async def main(wf):`")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            raise WorkflowScriptError("Workflow scripts may not import modules")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise WorkflowScriptError("Workflow scripts may not access dunder names")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("__"):
                raise WorkflowScriptError("Workflow scripts may not access dunder attributes")
            root = _root_name(node)
            if root == "wf" and (node.attr.startswith("_") or node.attr == "close"):
                raise WorkflowScriptError(
                    "Workflow scripts may not access private wf attributes or call wf.close()"
                )
            if root in _UNSAFE_ROOTS:
                raise WorkflowScriptError("Workflow scripts may not access unsafe modules")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _UNSAFE_CALLS
        ):
            raise WorkflowScriptError(f"Workflow scripts may not call `{node.func.id}`")


def execute_workflow_script(script: str, context: WorkflowContext) -> Any:
    """Check and run ``script``'s ``main(context)`` to its end (an hour at most); its result.

    Called from synchronous code (it runs its own event loop).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise WorkflowScriptError("Workflow scripts must be executed from a synchronous context")
    validate_workflow_script(script)
    namespace: dict[str, Any] = {}
    exec(  # noqa: S102 - the tool's purpose: run the checked script the model wrote
        compile(script, "<dynamic-workflow>", "exec"),
        {"__builtins__": dict(_SAFE_BUILTINS)},
        namespace,
    )
    main = namespace.get("main")
    if not inspect.iscoroutinefunction(main):
        raise WorkflowScriptError("Workflow entry point must be async")

    async def bounded() -> Any:
        async with asyncio.timeout(_TIMEOUT_SECONDS):
            return await main(context)

    try:
        return asyncio.run(bounded())
    except TimeoutError:
        raise WorkflowScriptError(
            f"Workflow timed out after {_TIMEOUT_SECONDS:.0f} seconds"
        ) from None
