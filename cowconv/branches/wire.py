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
import hashlib
import os
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from cowconv._exceptions import BranchError, InvalidTypeError, InvalidValueError
from cowconv.agent.tools import ToolDefinition, resolve_tool
from cowconv.branches.ledger import SuiteTicket
from cowconv.core.events import Event
from cowconv.core.frozen import FrozenJSONMap
from cowconv.core.history import EventLog
from cowconv.core.ids import ConversationID
from cowconv.core.llm import LLMMetrics
from cowconv.core.state import ConversationState, ConversationStats, ExecutionStatus
from cowconv.core.usage import Usage
from cowconv.workspaces.transfer import SnapshotPack

__all__ = [
    "BranchJob",
    "BranchOutcome",
    "SharedPrefix",
    "WorkspaceSpec",
    "load_quietly",
    "pickled",
    "workspace_on_worker",
]

Dumps = Callable[[Any], bytes]

WorkspaceSpec = Union[str, "os.PathLike[str]", Callable[[int, str], "str | os.PathLike[str]"]]
"""Where a branch works on its worker: a directory (``str.format`` fields ``{index}`` and
``{conversation_id}``), or a function of ``(index, conversation_id)`` called on the worker
that returns one (it may create it: clone a repository, copy a template...)."""


def workspace_on_worker(spec: WorkspaceSpec, index: int, conversation_id: str) -> str:
    """The directory ``spec`` names for branch ``index`` (on the worker that runs it).

    >>> workspace_on_worker("/scratch/{conversation_id}/{index}", 2, "c-9")
    '/scratch/c-9/2'
    >>> workspace_on_worker(lambda index, cid: f"/tmp/b{index}", 1, "c-9")
    '/tmp/b1'
    """
    if isinstance(spec, str | os.PathLike):
        return os.fspath(spec).format(index=index, conversation_id=conversation_id)
    if callable(spec):
        made = spec(index, conversation_id)
        if not isinstance(made, str | os.PathLike):
            raise InvalidTypeError(
                f"a workspace factory must return a path, got {type(made).__name__}"
            )
        return os.fspath(made)
    raise InvalidTypeError(
        f"workspace must be a path or a function of (index, conversation_id), got {spec!r}"
    )


def pickled(value: Any) -> bytes:
    """``value`` pickled with the highest protocol (what travels to and from workers)."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def load_quietly(data: bytes) -> Any:
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

    ``files``: for a suite whose forks have their own copies of the files
    (``workspace="copy"``), the objects of their snapshot, which travel with
    the history: a worker unpacks them once and makes each branch's directory
    from them, without reading this machine's files.

    >>> from cowconv import EventLog
    >>> prefix = SharedPrefix.of(EventLog())
    >>> len(prefix.events), len(prefix.key) > 0, prefix.files
    (0, True, None)
    """

    key: str
    events: EventLog
    files: SnapshotPack | None = None

    @classmethod
    def of(cls, events: EventLog, files: SnapshotPack | None = None) -> SharedPrefix:
        """The prefix of ``events``, keyed by its content.

        Events are immutable and their ids unique, so the ids in order name
        the content: a later suite from the same history gets the same key,
        and a worker that already holds it neither receives nor loads it again.

        >>> from cowconv import EventLog, MessageEvent
        >>> events = EventLog([MessageEvent(role="user", content="hi")])
        >>> SharedPrefix.of(events).key == SharedPrefix.of(events.take(1)).key
        True
        >>> SharedPrefix.of(events).key == SharedPrefix.of(EventLog()).key
        False
        """
        digest = hashlib.sha256(f"{len(events)}".encode())
        for event in events:
            digest.update(b"\n" + event.id.encode())
        if files is not None:  # the same history with other files is another prefix
            digest.update(b"\nfiles " + " ".join(files.trees).encode())
        return cls(key=digest.hexdigest()[:32], events=events, files=files)

    def dumps(self, dumps: Dumps = pickled) -> bytes:
        """The events as bytes for a worker: ``dumps`` (default ``pickle``), then zlib.

        The prefix is the one large thing a suite sends, to every worker:
        zlib at level 1 shrinks a 10k-event history ~7× for ~35 ms here,
        and a worker inflates it in ~12 ms (unpickling takes ~300 ms). With
        ``files``, the pickled value is the pair ``(events, files)``.
        """
        value: Any = self.events if self.files is None else (self.events, self.files)
        return zlib.compress(dumps(value), 1)


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
    timeout: float | None = None
    """Seconds the run may take on its worker (``None``: no limit)."""
    workspace: WorkspaceSpec | None = None
    """Where it works on its worker (default: the fork's own workspace)."""
    suite: SuiteTicket | None = None
    """For a recorded suite: where the worker claims the branch and commits its outcome."""
    files: str | None = None
    """The snapshot its directory is made from on the worker (its prefix's ``files`` hold it)."""

    @classmethod
    def of(
        cls,
        index: int,
        prefix: SharedPrefix,
        state: ConversationState,
        max_iteration_per_run: int,
        *,
        ship_api_keys: bool = True,
        timeout: float | None = None,
        workspace: WorkspaceSpec | None = None,
        suite: SuiteTicket | None = None,
        files: str | None = None,
    ) -> BranchJob:
        """The job for a fork whose snapshot is ``state``.

        If the fork does not start with ``prefix`` (its source changed
        between forks), its whole history travels with it. With
        ``ship_api_keys=False`` the LLM's key is left out: the worker's
        litellm reads the provider's key from its own environment.
        """
        events = state.branch
        shared = len(prefix.events)
        if not events.starts_with(prefix.events):  # O(1) for a fork of the prefix
            shared = 0
        own = EventLog(events[position] for position in range(shared, len(events)))
        agent = state.agent
        # A copy of the LLM without its metrics: they hold every latency this process has seen
        # (the worker counts its own calls from zero, and those are added back here).
        llm = agent.llm.model_copy(update={} if ship_api_keys else {"api_key": None})
        llm = llm.with_metrics(LLMMetrics())
        agent = agent.model_copy(update={"llm": llm})
        tools = tuple(resolve_tool(tool.name) for tool in agent.tools)
        return cls(
            index=index,
            prefix_key=prefix.key,
            prefix_length=shared,
            state=state._replace(branch=own, agent=agent),
            max_iteration_per_run=max_iteration_per_run,
            tools=tools,
            timeout=timeout,
            workspace=workspace,
            suite=suite,
            files=files,
        )

    @property
    def conversation_id(self) -> ConversationID:
        """The id of the fork this job runs."""
        return self.state.id

    def dumps(self, dumps: Dumps = pickled) -> bytes:
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
    when the worker could not run the branch; ``failure`` then says why in
    one word (``"workspace"``, ``"lost"``, ``"worker"``; for a recorded suite
    ``"claimed"``: another runner holds the branch, ``"store"``: its store
    could not be reached). A run cut off at
    its time limit has ``failure="timeout"`` and what it did until then.

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
    failure: str | None = None
    committed: bool = False
    """Whether the worker committed it to the fork in the suite's store itself."""
    files: SnapshotPack | None = None
    """For a branch run in a directory made from its job's ``files``: the objects its
    snapshots added and its last snapshot (``final``), for its fork here."""
    snapshot_loads: int = 0
    """How many times that process had unpacked this suite's files (1: once)."""

    @classmethod
    def failed(cls, index: int, error: str, failure: str = "worker") -> BranchOutcome:
        """The outcome of a branch its worker could not run."""
        return cls(index=index, error=error, failure=failure)

    @staticmethod
    def loads(data: bytes) -> BranchOutcome:
        """An outcome back from its bytes."""
        outcome = load_quietly(data)
        if not isinstance(outcome, BranchOutcome):
            raise InvalidTypeError(f"expected a BranchOutcome from the worker, got {type(outcome)}")
        return outcome

    def apply(self, state: ConversationState) -> ConversationState:
        """``state`` (the caller's fork) with this outcome committed to it."""
        if self.stats is None or self.agent_state is None:
            raise InvalidValueError("a failed outcome has nothing to apply")
        return state._replace(
            branch=state.branch.extend(self.events),
            stats=self.stats,
            execution_status=self.execution_status,
            agent_state=self.agent_state,
            activated_knowledge_skills=self.activated_knowledge_skills,
        )
