"""What a branch suite ships to workers and what comes back: the executor protocol.

``run_branches(source, branches, executor=...)`` forks in O(1) as always,
then hands the executor one :class:`SharedPrefix` (the events every fork
inherited) and one :class:`BranchJob` per fork: the fork's header (its state
without the inherited events) and the events it has beyond them (its
message). An executor ships the prefix once per worker, runs
:func:`run_branch_job` there and hands back what it returned: the pickled
:class:`BranchOutcome`, which holds only what the run appended, the stats,
the status and the agent state. ``run_branches`` commits that to the
caller's fork, so the caller's store persists it and its callbacks fire.

>>> from cowconv import LLM, Agent, Conversation
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> _ = source.send_message("Summarise the report.")
>>> fork = source.fork()
>>> message = fork.send_message("Now in French.")
>>> prefix = SharedPrefix.of(source.state.events)
>>> job = BranchJob.of(0, prefix, fork.state, max_iteration_per_run=10)
>>> [event.text for event in job.state.events]  # only the fork's own events travel
['Now in French.']
>>> len(job.dumps()) < 4096
True

Any object with a ``run_jobs(prefix, jobs)`` method is an executor
(:class:`BranchExecutor`); ``cowconv.distributed`` has Ray, Dask and
process-pool ones.
"""

from __future__ import annotations

import gc
import os
import pickle
import socket
import threading
import time
import traceback
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cowconv._exceptions import BranchError, InvalidTypeError, InvalidValueError
from cowconv.agent.messages import render
from cowconv.agent.tools import ToolDefinition, register_tool, resolve_tool
from cowconv.core.events import Event
from cowconv.core.frozen import FrozenJSONMap
from cowconv.core.history import EventLog
from cowconv.core.ids import ConversationID
from cowconv.core.llm import LLMMetrics
from cowconv.core.state import ConversationState, ConversationStats, ExecutionStatus
from cowconv.core.usage import Usage

__all__ = [
    "BranchExecutor",
    "BranchJob",
    "BranchOutcome",
    "SharedPrefix",
    "forget_prefix",
    "prefix_loads",
    "run_branch_job",
]

Dumps = Callable[[Any], bytes]


def _pickle(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _load_quietly(data: bytes) -> Any:
    """Unpickle with the garbage collector off: a long history's events are all new objects,
    and collections triggered while they arrive would traverse them again and again (half of
    the time of a 10k-event load, more at 100k)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(data)
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class SharedPrefix:
    """The history every fork of a suite inherited, shipped once per worker under ``key``.

    >>> from cowconv import EventLog
    >>> prefix = SharedPrefix.of(EventLog())
    >>> len(prefix.events), len(prefix.key) > 0
    (0, True)
    """

    key: str
    events: EventLog

    @classmethod
    def of(cls, events: EventLog) -> SharedPrefix:
        """A prefix with a fresh key (a worker caches prefixes by key)."""
        return cls(key=uuid.uuid4().hex, events=events)

    def dumps(self, dumps: Dumps = _pickle) -> bytes:
        """The events as bytes for a worker: ``dumps`` (default ``pickle``), then zlib.

        The prefix is the one large thing a suite sends, to every worker:
        zlib at level 1 shrinks a 10k-event history ~7× for ~35 ms here,
        and a worker inflates it in ~12 ms (unpickling takes ~300 ms).
        """
        return zlib.compress(dumps(self.events), 1)


@dataclass(frozen=True)
class BranchJob:
    """One branch as it travels: its header and own events, and which prefix it extends.

    ``state`` is the fork's snapshot with only the events it has beyond the
    prefix; ``tools`` are the classes of the agent's tools, so a tool
    registered in the caller reaches the worker (by reference to its module,
    or by value when the executor pickles with cloudpickle).

    >>> from cowconv import LLM, Agent, Conversation
    >>> fork = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> job = BranchJob.of(3, SharedPrefix.of(fork.state.events), fork.state, 5)
    >>> job.index, job.conversation_id == fork.id
    (3, True)
    """

    index: int
    prefix_key: str
    prefix_length: int
    state: ConversationState
    max_iteration_per_run: int
    tools: tuple[type[ToolDefinition[Any]], ...] = ()

    @classmethod
    def of(
        cls,
        index: int,
        prefix: SharedPrefix,
        state: ConversationState,
        max_iteration_per_run: int,
        *,
        ship_api_keys: bool = True,
    ) -> BranchJob:
        """The job for a fork whose snapshot is ``state``.

        If the fork does not start with ``prefix`` (its source changed
        between forks), its whole history travels with it. With
        ``ship_api_keys=False`` the LLM's key is left out: the worker's
        litellm reads the provider's key from its own environment.
        """
        events = state.events
        shared = len(prefix.events)
        if not events.starts_with(prefix.events):  # O(1) for a fork of the prefix
            shared = 0
        own = EventLog(events[position] for position in range(shared, len(events)))
        agent = state.agent
        # A copy of the LLM without its metrics: they hold every latency this process has seen
        # (the worker counts its own calls from zero, and those are added back here).
        llm = agent.llm.model_copy(update={} if ship_api_keys else {"api_key": None})
        llm._metrics = LLMMetrics()
        agent = agent.model_copy(update={"llm": llm})
        tools = tuple(resolve_tool(tool.name) for tool in agent.tools)
        return cls(
            index=index,
            prefix_key=prefix.key,
            prefix_length=shared,
            state=state._replace(events=own, agent=agent),
            max_iteration_per_run=max_iteration_per_run,
            tools=tools,
        )

    @property
    def conversation_id(self) -> ConversationID:
        """The id of the fork this job runs."""
        return self.state.id

    def dumps(self, dumps: Dumps = _pickle) -> bytes:
        """This job as bytes, or a :class:`~cowconv.BranchError` saying what could not travel."""
        try:
            return dumps(self)
        except Exception as error:
            raise BranchError(
                self.index,
                str(self.conversation_id),
                f"cannot be sent to a worker: {type(error).__name__}: {error} (a branch's agent, "
                "LLM and tools must pickle; define custom tools in an importable module)",
            ) from error


@dataclass(frozen=True)
class BranchOutcome:
    """What a worker sends back: only what the run added to its fork.

    ``usage`` and ``latencies`` are the LLM calls made on the worker, to be
    added to the caller's LLM metrics. ``error`` is set (and the rest empty)
    when the worker could not run the branch.

    >>> outcome = BranchOutcome.failed(2, "tool 'x' is not importable")
    >>> outcome.index, outcome.error
    (2, "tool 'x' is not importable")
    """

    index: int
    events: tuple[Event, ...] = ()
    stats: ConversationStats | None = None
    execution_status: ExecutionStatus = ExecutionStatus.ERROR
    agent_state: FrozenJSONMap | None = None
    activated_knowledge_skills: tuple[str, ...] = ()
    usage: Usage = Usage()
    latencies: tuple[float, ...] = ()
    wall_seconds: float = 0.0
    error: str | None = None
    worker: str = ""
    """The process that ran it, as ``host:pid``."""
    prefix_loads: int = 0
    """How many times that process had deserialised this suite's prefix (1: once)."""

    @classmethod
    def failed(cls, index: int, error: str) -> BranchOutcome:
        """The outcome of a branch its worker could not run."""
        return cls(index=index, error=error)

    @staticmethod
    def loads(data: bytes) -> BranchOutcome:
        """An outcome back from its bytes."""
        outcome = _load_quietly(data)
        if not isinstance(outcome, BranchOutcome):
            raise InvalidTypeError(f"expected a BranchOutcome from the worker, got {type(outcome)}")
        return outcome

    def apply(self, state: ConversationState) -> ConversationState:
        """``state`` (the caller's fork) with this outcome committed to it."""
        if self.stats is None or self.agent_state is None:
            raise InvalidValueError("a failed outcome has nothing to apply")
        return state._replace(
            events=state.events.extend(self.events),
            stats=self.stats,
            execution_status=self.execution_status,
            agent_state=self.agent_state,
            activated_knowledge_skills=self.activated_knowledge_skills,
        )


class BranchExecutor(Protocol):
    """Runs the jobs of a branch suite somewhere else (``cowconv.distributed`` has some).

    ``run_jobs`` ships ``prefix`` once per worker (``prefix.dumps()``),
    runs :func:`run_branch_job` on a worker for every job, and yields
    ``(job.index, result)`` as each one ends: the bytes it returned, or the
    exception that stopped it (a job that cannot be pickled, a worker that
    died). It must not run a job twice. ``ship_api_keys`` (default ``True``)
    says whether LLM keys travel with the jobs.

    >>> class InThisThread:
    ...     def run_jobs(self, prefix, jobs):
    ...         data = prefix.dumps()
    ...         for job in jobs:
    ...             yield job.index, run_branch_job(job.dumps(), lambda: data)
    >>> from cowconv import LLM, Agent, Conversation, run_branches
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> forks = run_branches(source, [], executor=InThisThread())
    >>> len(forks)
    0
    """

    def run_jobs(
        self, prefix: SharedPrefix, jobs: Sequence[BranchJob]
    ) -> Iterable[tuple[int, bytes | BaseException]]: ...


# -- the worker side ---------------------------------------------------------

_CACHE_SIZE = 4
_prefixes: OrderedDict[str, EventLog] = OrderedDict()
_prefix_lock = threading.Lock()
_loads = 0
_loads_by_key: dict[str, int] = {}


def prefix_loads() -> int:
    """How many shared prefixes this process has deserialised (once per suite and worker).

    >>> prefix_loads() >= 0
    True
    """
    return _loads


def _prefix(key: str, load: Callable[[], bytes], *, rendered: bool) -> EventLog:
    global _loads
    with _prefix_lock:  # one load per process, however many threads a worker runs
        events = _prefixes.get(key)
        if events is None:
            loaded = _load_quietly(zlib.decompress(load()))
            if not isinstance(loaded, EventLog):
                raise InvalidTypeError(f"a shared prefix must be an EventLog, got {type(loaded)}")
            events = loaded
            _loads += 1
            _loads_by_key[key] = _loads_by_key.get(key, 0) + 1
            if len(_loads_by_key) > 1024:
                del _loads_by_key[next(iter(_loads_by_key))]
            _prefixes[key] = events
            while len(_prefixes) > _CACHE_SIZE:
                _prefixes.popitem(last=False)
        else:
            _prefixes.move_to_end(key)
        if rendered:
            # An agent without a condenser sees the whole history: render the prefix once
            # (O(1) when it already is), so every branch of the suite on this worker continues
            # from it instead of rendering it again. With a condenser the model sees only the
            # events since the last condensation: rendering all of them would be wasted.
            render(events)
        return events


def forget_prefix(key: str) -> None:
    """Drop a cached prefix (an in-process executor does so when its suite ends)."""
    with _prefix_lock:
        _prefixes.pop(key, None)
        _loads_by_key.pop(key, None)


def _usage_since(before: Usage, after: Usage) -> Usage:
    start = before.model_dump()
    return Usage(**{field: value - start[field] for field, value in after.model_dump().items()})


def run_branch_job(job_data: bytes, load_prefix: Callable[[], bytes]) -> bytes:
    """Run one branch on a worker; returns the pickled :class:`BranchOutcome`.

    ``load_prefix`` returns the bytes of the job's :class:`SharedPrefix`; it
    is called only the first time this process sees that prefix (the events
    are cached by key). Errors a run records (a failed LLM call) end up in
    the outcome's events; anything that stops the worker from running the
    branch comes back as a failed outcome naming the cause.

    >>> from cowconv import LLM, Agent, Conversation
    >>> fork = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> prefix = SharedPrefix.of(fork.state.events)
    >>> data = BranchJob.of(0, prefix, fork.state, 5).dumps()
    >>> outcome = BranchOutcome.loads(run_branch_job(data, prefix.dumps))
    >>> outcome.execution_status.value, outcome.events  # nothing to answer: no LLM call
    ('finished', ())
    """
    from cowconv.conversation import Conversation  # it imports the branch modules

    job = _load_quietly(job_data)
    if not isinstance(job, BranchJob):
        raise InvalidTypeError(f"expected a BranchJob, got {type(job).__name__}")
    try:
        for tool in job.tools:
            register_tool(tool)
        prefix = _prefix(
            job.prefix_key, load_prefix, rendered=job.state.agent.condenser is None
        ).take(job.prefix_length)
        state = job.state._replace(events=prefix.extend(job.state.events))
        start = len(state.events)
        conversation = Conversation.from_state(
            state, max_iteration_per_run=job.max_iteration_per_run
        )
        metrics = state.agent.llm.metrics
        usage, calls = metrics.usage, len(metrics.latencies)
        started = time.perf_counter()
        try:
            conversation.run()
        finally:
            conversation.close()
        wall = time.perf_counter() - started
    except Exception as error:
        where = traceback.extract_tb(error.__traceback__)[-1]
        return _pickle(
            BranchOutcome.failed(
                job.index,
                f"the worker could not run it: {type(error).__name__}: {error} "
                f"({where.filename}:{where.lineno})",
            )
        )
    final = conversation.state
    return _pickle(
        BranchOutcome(
            index=job.index,
            events=tuple(final.events[position] for position in range(start, len(final.events))),
            stats=final.stats,
            execution_status=final.execution_status,
            agent_state=final.agent_state,
            activated_knowledge_skills=final.activated_knowledge_skills,
            usage=_usage_since(usage, metrics.usage),
            latencies=metrics.latencies[calls:],
            wall_seconds=wall,
            worker=f"{socket.gethostname()}:{os.getpid()}",
            prefix_loads=_loads_by_key.get(job.prefix_key, 0),
        )
    )
