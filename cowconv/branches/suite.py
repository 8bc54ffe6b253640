"""A/B branching: fork one conversation into many and run them side by side.

>>> from cowconv import LLM, Agent, Conversation
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> _ = source.send_message("Analyse the sales report.")
>>> branches = [Branch("Focus on EMEA.", tags={"variant": "A"}), Branch("Focus on APAC.")]
>>> forks = [source.fork(tags=b.tags) for b in branches]  # what run_branches does first
>>> [f.state.tags.get("variant") for f in forks]
['A', None]

:func:`run_branches` forks (O(1) each), sends each branch its message and
runs every fork's agent concurrently: in a thread pool, or on the workers of
an ``executor`` (:mod:`cowconv.distributed`), which get the shared history
once each and send back only what each run appended. The source is never
touched.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field

from cowconv._exceptions import (
    BranchCancelledError,
    BranchError,
    BranchesError,
    BranchLostError,
    BranchRunError,
    BranchTimeoutError,
    BranchWorkspaceError,
    ConversationRunError,
    InvalidTypeError,
    InvalidValueError,
    SuiteError,
)
from cowconv.branches import ledger
from cowconv.branches.ledger import LEASE, SuiteTicket
from cowconv.branches.remote import RemoteSuite, is_remote
from cowconv.branches.report import SuiteReport
from cowconv.branches.wire import BranchJob, BranchOutcome, SharedPrefix, WorkspaceSpec
from cowconv.conversation import Conversation
from cowconv.core.agent import Agent
from cowconv.core.events import AgentErrorEvent
from cowconv.core.frozen import decode_json
from cowconv.core.history import EventLog
from cowconv.core.state import ConversationState, ExecutionStatus
from cowconv.core.tree import extend_active
from cowconv.core.waits import first_done
from cowconv.core.workspace import Workspace
from cowconv.distributed.process import PicklingExecutor
from cowconv.ports import BranchExecutor, EventCallback, SuiteRow, notify
from cowconv.stores.tree import TreeStore
from cowconv.workspaces.recording import default_store_directory, store_at
from cowconv.workspaces.transfer import SnapshotPack, receive_changes

__all__ = [
    "Branch",
    "BranchResult",
    "BranchRuns",
    "iter_branches",
    "resume_suite",
    "run_branches",
]


@dataclass(frozen=True)
class Branch:
    """One arm of an A/B run: the message it gets and, optionally, its own agent.

    >>> Branch("Try the other approach.", title="B").title
    'B'
    """

    message: str
    agent: Agent | None = None
    title: str | None = None
    tags: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.message, str):
            raise InvalidTypeError(
                f"a branch message must be a str, got {type(self.message).__name__}"
            )
        if self.agent is not None and not isinstance(self.agent, Agent):
            raise InvalidTypeError(f"a branch agent must be a cowconv.Agent, got {self.agent!r}")


@dataclass(frozen=True)
class BranchResult:
    """How one branch of a suite ended: its fork, and the error that ended it, if one did.

    ``status`` is the fork's execution status (``finished``, ``error``,
    ``stuck``...), or ``timeout`` / ``cancelled`` when the suite cut it off,
    ``lost`` when its worker died while running it.
    ``error`` is a :class:`~cowconv.BranchError` (a subclass says what
    happened), what a commit raised, or, for a run that ended in error, a
    :class:`~cowconv.BranchRunError` when ``raise_on_error`` asked for it.

    >>> from cowconv import LLM, Agent, Conversation
    >>> fork = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> result = BranchResult(0, fork, BranchTimeoutError(0, str(fork.id), "too slow"))
    >>> result.status, result.ok
    ('timeout', False)
    """

    index: int
    fork: Conversation
    error: Exception | None = None
    wall_seconds: float | None = None
    worker: str | None = None
    prefix_loads: int = 0
    snapshot_loads: int = 0

    @property
    def status(self) -> str:
        """``timeout``, ``cancelled``, ``lost``, or the fork's execution status."""
        if isinstance(self.error, BranchTimeoutError):
            return "timeout"
        if isinstance(self.error, BranchCancelledError):
            return "cancelled"
        if isinstance(self.error, BranchLostError):
            return "lost"
        return self.fork.state.execution_status.value

    @property
    def ok(self) -> bool:
        """Whether the branch ran to its end without an error (recorded or raised)."""
        return self.error is None and self.fork.state.execution_status is not ExecutionStatus.ERROR


class BranchRuns(list[Conversation]):
    """The forks of a suite, in the order of its branches, with how long each run took.

    A plain list of :class:`Conversation` (so existing code keeps working)
    plus ``wall_seconds`` (``None`` for a branch that never ran) and
    :meth:`report`, a readable summary. With an executor, ``workers`` names
    the process each branch ran in (``host:pid``) and ``prefix_loads`` how
    many times that process had deserialised the shared history by then
    (1: once; empty for the thread pool); for a suite of copies
    (``workspace="copy"``), ``snapshot_loads`` how many times it had
    unpacked the files' snapshot that travels with that history.

    >>> runs = BranchRuns([], [])
    >>> runs == [], runs.wall_seconds
    (True, ())
    """

    def __init__(
        self,
        forks: Iterable[Conversation] = (),
        wall_seconds: Iterable[float | None] = (),
        *,
        workers: Iterable[str | None] = (),
        prefix_loads: Iterable[int] = (),
        results: Iterable[BranchResult] = (),
        snapshot_loads: Iterable[int] = (),
    ) -> None:
        super().__init__(forks)
        self.wall_seconds: tuple[float | None, ...] = tuple(wall_seconds)
        self.workers: tuple[str | None, ...] = tuple(workers)
        self.prefix_loads: tuple[int, ...] = tuple(prefix_loads)
        self.snapshot_loads: tuple[int, ...] = tuple(snapshot_loads)
        self.results: tuple[BranchResult, ...] = tuple(results)
        """Each branch's :class:`BranchResult` (its status, error, worker), in branch order."""

    def report(self) -> SuiteReport:
        """One row per branch: status, steps, cost, tokens, wall time, final answer.

        >>> BranchRuns().report().to_json()
        '[]'
        """
        return SuiteReport.of(self, self.wall_seconds)


def run_branches(
    source: Conversation,
    branches: Iterable[Branch | str],
    *,
    from_event_id: str | None = None,
    reset_metrics: bool = True,
    max_workers: int | None = None,
    executor: BranchExecutor | None = None,
    callbacks: Iterable[EventCallback] = (),
    branch_timeout: float | None = None,
    timeout: float | None = None,
    workspace: WorkspaceSpec | None = None,
    raise_on_error: bool = False,
    on_result: Callable[[BranchResult], None] | None = None,
    suite_id: str | None = None,
    resume: bool = False,
    lease: float = LEASE,
    rerun_lost: bool = False,
) -> BranchRuns:
    """Fork ``source`` once per branch, send each its message, run them all concurrently.

    A branch is a :class:`Branch` or just its message. Each fork is made
    with the branch's ``agent``, ``title`` and ``tags`` (and
    ``from_event_id``, ``reset_metrics`` as in :meth:`Conversation.fork`).
    Returns the forks (a :class:`BranchRuns`), in the order of ``branches``,
    once every run has ended; each one's ``execution_status`` tells how it
    ended. ``source`` is left exactly as it was. If runs raise (a failing
    store, not a failed LLM call, which a run records), a
    :class:`~cowconv.BranchesError` (an exception group) carries them after
    all runs have ended, with every fork in its ``forks``.

    ``callbacks`` are given to every fork (each sees its own events).
    ``max_workers`` bounds the runs in flight in the thread pool (default:
    all of them, up to 32). With an ``executor`` (see
    :mod:`cowconv.distributed`), the runs happen on its workers instead: the
    forks are still made here, in O(1); each worker gets the shared history
    once and each branch only its own header and message; what a run
    appended, its stats, status and agent state come back and are committed
    to the fork here (so this process's store persists them and the fork's
    callbacks see them). Each fork's usage is in its own ``state.stats``
    (and its ``agent.llm.metrics``), wherever it ran. A branch that cannot be shipped, or whose
    worker dies, fails alone: its fork records why and ends ``error``, and a
    :class:`~cowconv.BranchError` for it is among the raised group.

    Time limits: ``branch_timeout`` seconds per run, ``timeout`` seconds for
    the whole suite. A branch past its limit is cut off where it runs (its
    worker slot goes to the next branch), its fork ends ``error`` with an
    :class:`~cowconv.AgentErrorEvent` saying so, and a
    :class:`~cowconv.BranchTimeoutError` is among the raised group; the other
    branches go on. ``workspace`` is where each branch works on its worker
    (a directory, with ``{index}`` and ``{conversation_id}`` fields, or a
    function of ``(index, conversation_id)`` called there); a branch whose
    workspace is missing fails before any LLM call
    (:class:`~cowconv.BranchWorkspaceError`). With time limits or a
    ``workspace``, the thread pool runs each branch as the executors do: on
    a copy of the fork, committed to it when the run ends. ``workspace="copy"``
    gives every fork its own directory holding the source's files at the fork
    point (``fork(workspace="copy")``), where its branch runs. On an executor the
    workers need not see this machine's files: the snapshot of the forks' files
    travels with the shared history, once per worker, each branch runs in a
    directory made from it there, and what it changed comes back to its fork's
    directory here (its snapshots into the fork's snapshot store).

    ``raise_on_error=True`` also raises the errors runs recorded (a failed
    LLM call, a crashed tool, missing credentials) as
    :class:`~cowconv.BranchRunError` errors in the group. ``on_result`` is
    called with each branch's :class:`BranchResult` as it ends (see
    :func:`iter_branches` to iterate over them instead). Ctrl-C
    (``KeyboardInterrupt``) cancels the suite: runs in flight are stopped
    (worker processes killed, Ray tasks cancelled, Dask tasks released;
    threads are interrupted after their current step), branches not started
    are recorded ``cancelled``, and the interrupt propagates.

    ``suite_id`` records the suite in the store of ``source`` (a
    :class:`~cowconv.SQLiteStore` file, or a
    :class:`~cowconv.stores.postgres.PostgresStore` for workers on other
    machines), so that it survives this process: each worker claims its
    branch there before its first LLM call, and commits the outcome to the
    fork itself; :func:`resume_suite` (or calling this again with
    ``resume=True``) finishes it from any process. See :func:`resume_suite`
    for ``lease`` and ``rerun_lost``, and ``docs/distributed.md``.

    A ``source`` an agent server keeps (a :class:`~cowconv.RemoteConversation`)
    is forked there, and the server runs the forks (:mod:`cowconv.branches.remote`):
    from the threads here or the workers of ``executor``, which attach to their fork;
    with ``suite_id`` the forks' ids and tags record the suite on the server, and a
    resume reads it there. Time limits and worker directories do not apply and are
    refused before any fork.

    >>> from cowconv import LLM, Agent, Conversation
    >>> from cowconv.testing import StubLLMServer, StubReply
    >>> with StubLLMServer() as stub:
    ...     stub.script(StubReply.text("Plan A."), StubReply.text("Plan B."))
    ...     llm = LLM(model="openai/stub-model", base_url=stub.base_url, api_key="stub-key")
    ...     source = Conversation(agent=Agent(llm=llm), workspace=".")
    ...     _ = source.send_message("Propose a plan.")
    ...     forks = run_branches(source, ["Be bold.", Branch("Be careful.", title="B")])
    >>> [f.state.execution_status.value for f in forks], len(source.state.events)
    (['finished', 'finished'], 2)
    """
    if on_result is not None and not callable(on_result):
        raise InvalidTypeError(f"on_result must be callable, got {type(on_result).__name__}")
    suite = _Suite.start(
        source,
        branches,
        from_event_id=from_event_id,
        reset_metrics=reset_metrics,
        max_workers=max_workers,
        executor=executor,
        callbacks=callbacks,
        branch_timeout=branch_timeout,
        timeout=timeout,
        workspace=workspace,
        suite_id=suite_id,
        resume=resume,
        lease=lease,
        rerun_lost=rerun_lost,
    )
    return _finish(suite, raise_on_error=raise_on_error, on_result=on_result)


def resume_suite(
    store: TreeStore | Workspace | str,
    suite_id: str,
    *,
    max_workers: int | None = None,
    executor: BranchExecutor | None = None,
    callbacks: Iterable[EventCallback] = (),
    branch_timeout: float | None = None,
    timeout: float | None = None,
    workspace: WorkspaceSpec | None = None,
    raise_on_error: bool = False,
    on_result: Callable[[BranchResult], None] | None = None,
    lease: float = LEASE,
    rerun_lost: bool = False,
) -> BranchRuns:
    """Finish the suite ``run_branches(..., suite_id=suite_id)`` recorded in ``store``.

    ``store`` is the suite's store (or its location: a SQLite file, a
    ``postgresql://`` URL), or for a suite of a remote conversation the agent
    server's :class:`~cowconv.Workspace` (or its ``http(s)://`` URL), where the
    forks' tags record it: there a fork whose run ended or still goes on is not
    run again, one that never started runs. Returns every branch's fork, in branch order,
    as :func:`run_branches` does, from whichever process ran it:

    * a branch that ended (``done``: finished, failed, timed out) is not run
      again; its fork is read from the store;
    * a branch no worker started (``pending``) runs now, on ``executor``
      (claimed in the store first: a branch is never run by two runners);
    * a branch still running elsewhere (``running``) is waited for, as long
      as its worker's heartbeat goes on; a heartbeat that stalls ``lease``
      seconds means its worker is gone, and the branch is ``lost``;
    * a ``lost`` branch (its worker died mid-run, after LLM calls that may
      have been paid for) is reported with a :class:`~cowconv.BranchLostError`
      and not run again, unless ``rerun_lost=True``.

    The other options are :func:`run_branches`'; ``timeout`` bounds the wait
    too. :class:`~cowconv.SuiteNotFoundError` if the store records no such
    suite.

    >>> import pathlib, tempfile
    >>> from cowconv import LLM, Agent, Conversation, SQLiteStore
    >>> from cowconv.testing import StubLLMServer
    >>> store = SQLiteStore(pathlib.Path(tempfile.mkdtemp()) / "cowconv.db")
    >>> with StubLLMServer() as stub:
    ...     source = Conversation(agent=Agent(llm=LLM(**stub.llm_settings())), workspace=".",
    ...                           store=store)
    ...     _ = source.send_message("Propose a plan.")
    ...     first = run_branches(source, ["Be bold.", "Be careful."], suite_id="plans")
    ...     again = resume_suite(store, "plans")  # nothing left to run: no LLM call
    ...     calls = len(stub.requests)
    >>> [f.id for f in again] == [f.id for f in first], calls
    (True, 2)
    """
    if on_result is not None and not callable(on_result):
        raise InvalidTypeError(f"on_result must be callable, got {type(on_result).__name__}")
    if isinstance(store, Workspace) or (
        isinstance(store, str) and store.startswith(("http://", "https://"))
    ):
        remote = _RemoteRuns.reopen(
            store if isinstance(store, Workspace) else Workspace(host=store, working_dir="."),
            _check_suite_id(suite_id),
            max_workers=max_workers,
            executor=executor,
            callbacks=callbacks,
            branch_timeout=_check_seconds("branch_timeout", branch_timeout),
            timeout=_check_seconds("timeout", timeout),
            workspace_spec=workspace,
        )
        return _finish(remote, raise_on_error=raise_on_error, on_result=on_result)
    if not isinstance(store, TreeStore):
        if not isinstance(store, str):
            raise InvalidTypeError(
                f"store must be a Store or its location, got {type(store).__name__}"
            )
        store = ledger.shared_store(store)
    suite = _Suite.reopen(
        ledger.store_of(store),
        _check_suite_id(suite_id),
        max_workers=max_workers,
        executor=executor,
        callbacks=callbacks,
        branch_timeout=branch_timeout,
        timeout=timeout,
        workspace=workspace,
        lease=lease,
        rerun_lost=rerun_lost,
    )
    return _finish(suite, raise_on_error=raise_on_error, on_result=on_result)


def _finish(
    suite: _Suite | _RemoteRuns,
    *,
    raise_on_error: bool,
    on_result: Callable[[BranchResult], None] | None,
) -> BranchRuns:
    """Run ``suite`` to its end: its forks and results, or the group of what went wrong."""
    if not suite.forks:
        return BranchRuns()
    results: list[BranchResult | None] = [None] * len(suite.forks)
    with closing(suite.results()) as stream:  # closed at once if on_result or Ctrl-C stops it
        for result in stream:
            results[result.index] = result
            if on_result is not None:
                on_result(result)
    done = [r if r is not None else BranchResult(i, suite.forks[i]) for i, r in enumerate(results)]
    runs = BranchRuns(
        suite.forks,
        [r.wall_seconds for r in done],
        workers=[r.worker for r in done] if suite.remote else (),
        prefix_loads=[r.prefix_loads for r in done] if suite.remote else (),
        results=done,
        snapshot_loads=[r.snapshot_loads for r in done] if suite.remote else (),
    )
    errors: list[BaseException] = []
    for result in done:
        error = result.error
        if error is None and raise_on_error:
            error = _run_error(result.index, result.fork)
        if error is not None:
            errors.append(error)
    errors.extend(suite.fatal)
    if errors:
        message = f"{len(errors)} of {len(suite.forks)} branch runs raised"
        if all(isinstance(error, Exception) for error in errors):
            raise BranchesError(message, errors, runs)  # type: ignore[arg-type]
        raise BaseExceptionGroup(message, errors)
    return runs


def iter_branches(
    source: Conversation,
    branches: Iterable[Branch | str],
    *,
    from_event_id: str | None = None,
    reset_metrics: bool = True,
    max_workers: int | None = None,
    executor: BranchExecutor | None = None,
    callbacks: Iterable[EventCallback] = (),
    branch_timeout: float | None = None,
    timeout: float | None = None,
    workspace: WorkspaceSpec | None = None,
    raise_on_error: bool = False,
    suite_id: str | None = None,
    resume: bool = False,
    lease: float = LEASE,
    rerun_lost: bool = False,
) -> Iterator[BranchResult]:
    """:func:`run_branches`, yielding each branch's :class:`BranchResult` as soon as it ends.

    The forks are made when this is called; the runs start on the first
    ``next()``. Results come in the order the runs end. With
    ``raise_on_error=True`` the first failure (a branch that could not run,
    ran past its limit, or whose run ended in error: a
    :class:`~cowconv.BranchError` subclass) is raised instead of yielded, and
    the branches still running are cancelled. Closing the iterator early
    (``break`` and ``close()``, or Ctrl-C) cancels them too. ``suite_id``
    and the options after it record the suite as :func:`run_branches` does.

    >>> from cowconv import LLM, Agent, Conversation
    >>> from cowconv.testing import StubLLMServer, StubReply
    >>> with StubLLMServer() as stub:
    ...     stub.script(StubReply.text("Plan A."), StubReply.error(400, "no"))
    ...     llm = LLM(model="openai/stub-model", base_url=stub.base_url, api_key="stub-key")
    ...     source = Conversation(agent=Agent(llm=llm), workspace=".")
    ...     _ = source.send_message("Propose a plan.")
    ...     done = sorted((r.index, r.status) for r in iter_branches(
    ...         source, ["Be bold.", "Be careful."], max_workers=1))
    >>> done
    [(0, 'finished'), (1, 'error')]
    """
    suite = _Suite.start(
        source,
        branches,
        from_event_id=from_event_id,
        reset_metrics=reset_metrics,
        max_workers=max_workers,
        executor=executor,
        callbacks=callbacks,
        branch_timeout=branch_timeout,
        timeout=timeout,
        workspace=workspace,
        suite_id=suite_id,
        resume=resume,
        lease=lease,
        rerun_lost=rerun_lost,
    )
    return suite.results(raise_on_error=raise_on_error)


def _check_seconds(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _run_error(index: int, fork: Conversation) -> BranchRunError | None:
    """The error a fork's run recorded, as an exception (``None`` if it did not end in error)."""
    state = fork.state
    if state.execution_status is not ExecutionStatus.ERROR:
        return None
    start = state.forked_from_event_count or 0
    for position in range(len(state.branch) - 1, start - 1, -1):
        event = state.branch[position]
        if isinstance(event, AgentErrorEvent):
            return BranchRunError(index, str(fork.id), event.error, tool_name=event.tool_name)
    return BranchRunError(index, str(fork.id), "its run ended in error")


def _fail(fork: Conversation, error: BranchError) -> None:
    """Record on the fork why its branch did not run (best effort: the error is raised anyway)."""

    def change(state: ConversationState) -> ConversationState:
        return state._replace(
            branch=extend_active(state, (AgentErrorEvent(error=str(error)),)),
            execution_status=ExecutionStatus.ERROR,
        )

    try:
        fork.backend.commit(change)
    except Exception as failure:
        error.add_note(f"recording it on the fork failed too: {failure}")


_FAILURES: dict[str | None, type[BranchError]] = {
    "workspace": BranchWorkspaceError,
    "lost": BranchLostError,
}


def _check_suite_id(suite_id: object) -> str:
    if not isinstance(suite_id, str):
        raise InvalidTypeError(f"suite_id must be a str, got {type(suite_id).__name__}")
    if not suite_id or len(suite_id) > 200 or not suite_id.isprintable():
        raise InvalidValueError(f"suite_id must be 1 to 200 printable characters, got {suite_id!r}")
    return suite_id


@dataclass
class _Record:
    """Where a recorded suite lives, and how this runner treats it."""

    store: TreeStore
    suite_id: str
    lease: float
    callbacks: tuple[EventCallback, ...]
    rerun_lost: bool = False

    def ticket(self, *, with_password: bool) -> SuiteTicket:
        location = self.store.location
        assert location is not None
        if not with_password:
            location = ledger.without_password(location)
        return SuiteTicket(location, self.suite_id, self.lease)


@dataclass
class _Suite:
    """The forks of a suite, made and sent their messages, and how to run them."""

    forks: list[Conversation]
    executor: BranchExecutor | None
    max_workers: int | None
    branch_timeout: float | None
    timeout: float | None
    workspace: WorkspaceSpec | None
    inherited: EventLog | None
    fatal: list[BaseException] = field(default_factory=list)
    """What ended the suite itself (a runner that could not go on), beside the branches' errors."""
    record: _Record | None = None
    """For a recorded suite (``suite_id=``): its store."""
    todo: list[int] | None = None
    """The branches to run (``None``: all of them)."""
    known: list[BranchResult] = field(default_factory=list)
    """Branches of a resumed suite that had ended already."""
    watch: set[int] = field(default_factory=set)
    """Branches of a recorded suite that another runner holds: waited for in the store."""
    max_iterations: list[int] | None = None
    copies: bool = False
    """Whether every fork has its own copy of the files (``workspace="copy"``): their snapshot
    travels to the workers with the shared history, and each run's files come back."""

    @classmethod
    def start(
        cls,
        source: Conversation,
        branches: Iterable[Branch | str],
        *,
        from_event_id: str | None,
        reset_metrics: bool,
        max_workers: int | None,
        executor: BranchExecutor | None,
        callbacks: Iterable[EventCallback],
        branch_timeout: float | None,
        timeout: float | None,
        workspace: WorkspaceSpec | None,
        suite_id: str | None = None,
        resume: bool = False,
        lease: float = LEASE,
        rerun_lost: bool = False,
    ) -> _Suite | _RemoteRuns:
        specs = [Branch(b) if isinstance(b, str) else b for b in branches]
        for spec in specs:
            if not isinstance(spec, Branch):
                raise InvalidTypeError(
                    f"branches must be Branch values or str, got {type(spec).__name__}"
                )
        _check_options(max_workers, executor, workspace)
        branch_timeout = _check_seconds("branch_timeout", branch_timeout)
        timeout = _check_seconds("timeout", timeout)
        callbacks = tuple(callbacks)
        if is_remote(source):
            return _RemoteRuns.start(
                source,
                specs,
                from_event_id=from_event_id,
                reset_metrics=reset_metrics,
                max_workers=max_workers,
                executor=executor,
                callbacks=callbacks,
                branch_timeout=branch_timeout,
                timeout=timeout,
                workspace=workspace,
                suite_id=suite_id,
                resume=resume,
            )
        store: TreeStore | None = None
        if suite_id is not None:
            suite_id = _check_suite_id(suite_id)
            lease = _check_seconds("lease", lease) or LEASE
            store = ledger.store_of(getattr(source.backend, "sink", None))
            if resume and store.suite_rows(suite_id):
                head, _ = ledger.header(store, suite_id)
                asked = [spec.message for spec in specs]
                recorded = ledger.asked(head).get("messages")
                if head.conversation != str(source.id) or recorded != asked:
                    raise SuiteError(
                        f"the suite {suite_id!r} recorded in {store!r} was started from "
                        f"conversation {head.conversation!r} with {len(recorded or ())} branches; "
                        "this call asks for other ones (resume_suite(store, suite_id) resumes "
                        "it as recorded)"
                    )
                return cls.reopen(
                    store,
                    suite_id,
                    max_workers=max_workers,
                    executor=executor,
                    callbacks=callbacks,
                    branch_timeout=branch_timeout,
                    timeout=timeout,
                    workspace=workspace,
                    lease=lease,
                    rerun_lost=rerun_lost,
                )
            if store.suite_rows(suite_id):
                ledger.record(store, suite_id, "", (), {})  # raises SuiteExistsError
        elif resume:
            raise InvalidValueError("resume=True resumes a recorded suite: give its suite_id")
        # workspace="copy": every fork gets its own directory with the source's files at the
        # fork point (cowconv.workspaces), and each branch runs in its fork's directory.
        own_directory = isinstance(workspace, str) and workspace == "copy"
        if own_directory:
            workspace = None
        forks: list[Conversation] = []
        inherited: EventLog | None = None
        for spec in specs:
            fork = source.fork(
                agent=spec.agent,
                title=spec.title,
                tags=spec.tags,
                reset_metrics=reset_metrics,
                from_event_id=from_event_id,
                callbacks=callbacks,
                workspace="copy" if own_directory else "shared",
            )
            if inherited is None:
                inherited = fork.state.branch
            fork.send_message(spec.message)
            forks.append(fork)
        suite = cls(forks, executor, max_workers, branch_timeout, timeout, workspace, inherited)
        suite.copies = own_directory
        if store is not None and suite_id is not None:
            ledger.record(
                store,
                suite_id,
                str(source.id),
                [str(fork.id) for fork in forks],
                {
                    "messages": [spec.message for spec in specs],
                    "max_iteration_per_run": [fork.max_iteration_per_run for fork in forks],
                },
            )
            suite.record = _Record(store, suite_id, lease, callbacks, rerun_lost)
        return suite

    @classmethod
    def reopen(
        cls,
        store: TreeStore,
        suite_id: str,
        *,
        max_workers: int | None,
        executor: BranchExecutor | None,
        callbacks: Iterable[EventCallback],
        branch_timeout: float | None,
        timeout: float | None,
        workspace: WorkspaceSpec | None,
        lease: float,
        rerun_lost: bool,
    ) -> _Suite:
        """The suite ``suite_id`` as ``store`` records it: what ended, what to run, to wait for."""
        _check_options(max_workers, executor, workspace)
        branch_timeout = _check_seconds("branch_timeout", branch_timeout)
        timeout = _check_seconds("timeout", timeout)
        lease = _check_seconds("lease", lease) or LEASE
        callbacks = tuple(callbacks)
        head, rows = ledger.header(store, suite_id)
        asked = ledger.asked(head).get("max_iteration_per_run")  # a damaged suite: untouched
        if rerun_lost:
            ledger.reset_lost(store, suite_id, [row.branch for row in rows])
            head, rows = ledger.header(store, suite_id)
        forks = [Conversation.resume(store, row.conversation, callbacks=callbacks) for row in rows]
        suite = cls(forks, executor, max_workers, branch_timeout, timeout, workspace, None)
        suite.record = _Record(store, suite_id, lease, callbacks, rerun_lost)
        if isinstance(asked, list) and len(asked) == len(forks):
            suite.max_iterations = list(asked)
        suite.todo = []
        for row in rows:
            if row.state == ledger.PENDING:
                suite.todo.append(row.branch)
            elif row.state == ledger.RUNNING:
                suite.watch.add(row.branch)
            else:
                suite.known.append(suite._ended(row.branch, row))
        if suite.todo:
            first = forks[suite.todo[0]].state
            suite.inherited = first.branch.take(first.forked_from_event_count or 0)
        return suite

    @property
    def remote(self) -> bool:
        """Whether the runs happen on copies of the forks (an executor) rather than on them."""
        return self.executor is not None or self._limited

    @property
    def _limited(self) -> bool:
        return (
            self.branch_timeout is not None
            or self.timeout is not None
            or self.workspace is not None
            or self.record is not None
        )

    def results(self, *, raise_on_error: bool = False) -> Generator[BranchResult, None, None]:
        """Run the branches; yield each one's result as it ends."""
        if not self.forks:
            return
        if self.executor is None and not self._limited:
            runs = self._in_threads(self.max_workers or min(32, len(self.forks)))
        else:
            executor = self.executor
            if executor is None:
                # Time limits and workspaces need runs on copies, as on any executor; the
                # threads of this process take the place of workers.
                executor = PicklingExecutor(
                    self.max_workers or min(32, len(self.forks)), progress=False
                )
            runs = self._recorded(executor) if self.record is not None else self._on(executor)
        try:
            for result in runs:
                if raise_on_error:
                    error = result.error or _run_error(result.index, result.fork)
                    if error is not None:
                        raise error
                yield result
        finally:
            runs.close()

    # -- in this process's threads: the forks run themselves ----------------------------

    def _in_threads(self, workers: int) -> Generator[BranchResult, None, None]:
        forks = self.forks
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cowconv-branch")
        futures: dict[Future[float], int] = {
            pool.submit(_timed, fork.run): index for index, fork in enumerate(forks)
        }
        completed = False
        try:
            while futures:
                for future in first_done(futures):
                    index = futures.pop(future)
                    error = future.exception()
                    if error is not None and not isinstance(error, Exception):
                        self.fatal.append(error)  # SystemExit and the like, raised at the end
                        error = None
                    yield BranchResult(
                        index,
                        forks[index],
                        error,
                        None if future.exception() is not None else future.result(),
                    )
            completed = True
        finally:
            if not completed:
                for future, index in futures.items():
                    if future.cancel():
                        _fail(forks[index], _cancelled(index, forks[index]))
                    else:
                        forks[index].interrupt()  # ends after its current step
            pool.shutdown(wait=completed, cancel_futures=True)

    # -- on an executor: the runs happen on copies, their outcomes are committed here ----

    def _on(
        self, executor: BranchExecutor, deadline: float | None = None
    ) -> Generator[BranchResult, None, None]:
        forks = self.forks
        todo = range(len(forks)) if self.todo is None else self.todo
        if not todo:
            return
        assert self.inherited is not None
        trees: dict[int, str] = {}
        files: SnapshotPack | None = None
        if self.copies:
            try:
                trees, files = self._files(todo)
            except Exception as error:
                for index in todo:
                    cid = str(forks[index].id)
                    why = f"its files cannot be packed for its worker: {error!r}"
                    yield self._failed(index, BranchError(index, cid, why))
                return
        prefix = SharedPrefix.of(self.inherited, files)
        ship_api_keys = bool(getattr(executor, "ship_api_keys", True))
        ticket = None
        if self.record is not None:
            # ship_api_keys=False keeps the store's password off the wire too: the workers'
            # libpq reads it from their PGPASSWORD or ~/.pgpass.
            ticket = self.record.ticket(with_password=ship_api_keys)
        pending: set[int] = set()
        jobs = []
        for index in todo:
            fork = forks[index]
            try:
                job = BranchJob.of(
                    index,
                    prefix,
                    fork.state,
                    fork.max_iteration_per_run
                    if self.max_iterations is None
                    else self.max_iterations[index],
                    ship_api_keys=ship_api_keys,
                    timeout=self.branch_timeout,
                    workspace=self.workspace,
                    suite=ticket,
                    files=trees.get(index),
                )
            except Exception as error:
                failure = BranchError(index, str(fork.id), f"cannot be prepared: {error}")
                yield self._failed(index, failure)
                continue
            jobs.append(job)
            pending.add(index)
        if deadline is None and self.timeout is not None:
            deadline = time.monotonic() + self.timeout
        run_jobs = executor.run_jobs
        if deadline is not None and _takes_deadline(run_jobs):
            stream = iter(run_jobs(prefix, jobs, deadline=deadline))  # type: ignore[call-arg]
        else:
            stream = iter(run_jobs(prefix, jobs))

        completed = False
        try:
            while pending:
                try:
                    index, result = next(stream)
                except StopIteration:
                    break
                except Exception as error:
                    for index in sorted(pending):
                        yield self._failed(
                            index,
                            BranchError(
                                index,
                                str(forks[index].id),
                                f"the executor stopped: {type(error).__name__}: {error}",
                            ),
                        )
                    pending.clear()
                    break
                if index not in pending:
                    continue  # not ours, or already answered: never commit a run twice
                pending.discard(index)
                answer = self._commit(index, result)
                if answer is not None:
                    yield answer
                if deadline is not None and pending and time.monotonic() > deadline:
                    break  # an executor that does not take a deadline: stop at a result
            completed = True
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # cancels what is still in flight
            late = deadline is not None and time.monotonic() > deadline

            def reason(index: int) -> BranchError:
                if not completed:
                    return _cancelled(index, forks[index])
                if late:
                    return _timed_out(index, forks[index])
                cid = str(forks[index].id)
                return BranchError(index, cid, "the executor returned no result for it")

            leftovers = [self._failed(index, reason(index)) for index in sorted(pending)]
            pending.clear()
        yield from leftovers

    def _files(self, todo: Iterable[int]) -> tuple[dict[int, str], SnapshotPack]:
        """Each fork's snapshot (its own directory's files), and one pack of their objects:
        what the workers make the branches' directories from (one snapshot for a suite whose
        forks share a fork point)."""
        trees: dict[int, str] = {}
        stores = set()
        for index in todo:
            workspace = self.forks[index].state.workspace
            store = store_at(workspace.snapshot_store or default_store_directory())
            stores.add(store)
            # A lazy copy still waiting for its files: the snapshot it waits for (nothing is
            # written here; the workers make the directories).
            waiting = store.pending(workspace.working_dir)
            limit = workspace.max_snapshot_file_size
            trees[index] = (
                waiting or store.snapshot(workspace.working_dir, max_file_size=limit).tree
            )
        if len(stores) != 1:
            raise InvalidValueError("the forks of a suite of copies share one snapshot store")
        return trees, SnapshotPack.of(stores.pop(), sorted(set(trees.values())))

    def _failed(self, index: int, error: BranchError) -> BranchResult:
        """A branch that did not come back: recorded on its fork (or, for a recorded suite,
        by the state of its row: it runs on resume if it never started)."""
        if self.record is not None:
            return self._settle(index, error, None)
        _fail(self.forks[index], error)
        return BranchResult(index, self.forks[index], error)

    def _commit(self, index: int, result: bytes | BaseException) -> BranchResult | None:
        fork = self.forks[index]
        cid = str(fork.id)
        if isinstance(result, BaseException):
            if not isinstance(result, BranchError):
                result = BranchError(index, cid, f"{type(result).__name__}: {result}")
            elif result.conversation_id != cid:
                result = type(result)(index, cid, result.reason)
            return self._failed(index, result)
        try:
            outcome = BranchOutcome.loads(result)
        except Exception as unreadable:
            return BranchResult(index, fork, unreadable)
        if outcome.files is not None:
            try:  # the objects of the branch's snapshots, and its files, into the fork's own
                receive_changes(fork.state.workspace, outcome.files)
            except Exception as error:
                return BranchResult(index, fork, error, worker=outcome.worker or None)
        if self.record is not None:
            if outcome.committed:
                return self._reloaded(index)
            if outcome.failure == "claimed":
                self.watch.add(index)  # another runner holds it: waited for at the end
                return None
            why = outcome.error or "its worker could not run it"
            return self._settle(index, ledger.failure_error(index, cid, outcome.failure, why), None)
        try:
            if outcome.stats is None:
                kind = _FAILURES.get(outcome.failure, BranchError)
                failure = kind(index, cid, outcome.error or "its worker could not run it")
                _fail(fork, failure)
                return BranchResult(index, fork, failure, worker=outcome.worker or None)
            # Through the fork's backend, as any change: its store persists the outcome
            # and its callbacks hear the events. Its stats hold the run's usage.
            fork.backend.commit(outcome.apply)
        except Exception as error:
            return BranchResult(index, fork, error)
        timed_out = None
        if outcome.failure == "timeout":
            timed_out = BranchTimeoutError(
                index, cid, f"it ran past its time limit ({outcome.wall_seconds:.1f} s)"
            )
        return BranchResult(
            index,
            fork,
            timed_out,
            outcome.wall_seconds,
            outcome.worker,
            outcome.prefix_loads,
            outcome.snapshot_loads,
        )

    # -- a recorded suite: its store says what ended, what runs where ---------------------

    def _recorded(self, executor: BranchExecutor) -> Generator[BranchResult, None, None]:
        """Yield what had ended, run what never started, then wait for what runs elsewhere."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        yield from self.known
        yield from self._on(executor, deadline)
        yield from self._watch(deadline)

    def _settle(self, index: int, error: BranchError, row: SuiteRow | None) -> BranchResult:
        """A branch of a recorded suite that did not come back committed, by its row's state.

        ``running``: its worker is gone (killed, given up): the branch is
        ``lost`` (its LLM calls may have been paid for). ``pending``: it never
        started; its fork is left as it is and a resume runs it. ``done``:
        its worker committed it after all.
        """
        record = self.record
        assert record is not None
        fork = self.forks[index]
        if row is None:
            try:
                row = ledger.mark_lost(record.store, record.suite_id, index, str(error))
            except Exception as failure:  # the store is gone too: say so with the error
                error.add_note(f"recording it in the suite's store failed: {failure}")
                return BranchResult(index, fork, error)
        if row is not None and row.state == ledger.DONE:
            return self._reloaded(index, row)
        if (
            row is not None
            and row.state == ledger.LOST
            and not isinstance(error, BranchTimeoutError | BranchCancelledError | BranchLostError)
        ):
            error = BranchLostError(index, str(fork.id), error.reason)
        return BranchResult(index, fork, error)

    def _ended(self, index: int, row: SuiteRow) -> BranchResult:
        """The result of a branch whose row says it ended (``done`` or ``lost``)."""
        fork = self.forks[index]
        detail = _detail(row)
        if row.state == ledger.LOST:
            lost = str(detail.get("error") or "its worker died while running it")
            return BranchResult(index, fork, BranchLostError(index, str(fork.id), lost))
        failure, why = detail.get("failure"), detail.get("error")
        error: BranchError | None = None
        if failure is not None:
            word = str(failure)
            text = str(why or _FAILED.get(word, "it failed"))
            error = ledger.failure_error(index, str(fork.id), word, text)
        wall, loads = detail.get("wall_seconds"), detail.get("prefix_loads")
        return BranchResult(
            index,
            fork,
            error,
            float(wall) if isinstance(wall, int | float) and failure is None else None,
            str(detail.get("worker") or "") or None,
            loads if isinstance(loads, int) else 0,
        )

    def _reloaded(self, index: int, row: SuiteRow | None = None) -> BranchResult:
        """The fork as its worker committed it to the store; callbacks hear what it added."""
        record = self.record
        assert record is not None
        old = self.forks[index]
        fork = Conversation.resume(record.store, old.id, callbacks=record.callbacks)
        before, after = old.state.branch, fork.state.branch
        start = len(before) if after.starts_with(before) else len(after)
        for position in range(start, len(after)):
            notify(record.callbacks, after[position])
        self.forks[index] = fork
        if row is None:
            found = [r for r in record.store.suite_rows(record.suite_id) if r.branch == index]
            row = found[0] if found else SuiteRow(record.suite_id, index, str(fork.id), "done")
        return self._ended(index, row)

    def _watch(self, deadline: float | None) -> Generator[BranchResult, None, None]:
        """Wait for the branches another runner holds: until done, or its heartbeat stalls."""
        record = self.record
        assert record is not None
        seen: dict[int, tuple[str | None, int, float]] = {}
        poll = min(1.0, record.lease / 8)
        while self.watch:
            now = time.monotonic()
            rows = {row.branch: row for row in ledger.branch_rows(record.store, record.suite_id)}
            for index in sorted(self.watch):
                row = rows.get(index)
                cid = str(self.forks[index].id)
                if row is None or row.state == ledger.PENDING:
                    self.watch.discard(index)
                    yield BranchResult(
                        index,
                        self.forks[index],
                        BranchError(
                            index, cid, "it was given back unrun by another runner: resume again"
                        ),
                    )
                elif row.state in (ledger.DONE, ledger.LOST):
                    self.watch.discard(index)
                    yield (
                        self._reloaded(index, row)
                        if row.state == ledger.DONE
                        else self._ended(index, row)
                    )
                else:
                    last = seen.get(index)
                    if last is None or last[:2] != (row.owner, row.beat):
                        seen[index] = (row.owner, row.beat, now)
                    elif now - last[2] > record.lease:
                        why = (
                            f"its runner {row.owner} stopped beating for {record.lease:g} s: "
                            "gone while running it; not run again (that could repeat LLM calls)"
                        )
                        held = ledger.mark_lost(
                            record.store, record.suite_id, index, why, owner=row.owner,
                            beat=row.beat,
                        )  # fmt: skip
                        if held is not None and held.state == ledger.LOST:
                            self.watch.discard(index)
                            yield self._ended(index, held)
                    if deadline is not None and now > deadline and index in self.watch:
                        self.watch.discard(index)
                        yield BranchResult(
                            index,
                            self.forks[index],
                            BranchTimeoutError(
                                index,
                                cid,
                                "the suite's time limit passed while it ran elsewhere "
                                "(it may still end there: resume the suite later)",
                            ),
                        )
            if self.watch:
                time.sleep(poll)


def _remote_limits(
    branch_timeout: float | None, timeout: float | None, workspace: WorkspaceSpec | None
) -> None:
    if branch_timeout is not None or timeout is not None:
        raise InvalidValueError(
            "a suite of a RemoteConversation takes no branch_timeout or timeout (the server "
            "runs each branch to its end): leave them out, and interrupt() a fork to stop it"
        )
    if workspace is not None and not (isinstance(workspace, str) and workspace == "copy"):
        raise InvalidValueError(
            "a suite of a RemoteConversation runs on its agent server: leave out workspace= "
            "(workspace='copy' gives each fork its own files on cowconv's server)"
        )


@dataclass
class _RemoteRuns:
    """A suite whose source an agent server keeps: its forks and runs are the server's
    (:mod:`cowconv.branches.remote`), its results :class:`BranchResult` values as anywhere."""

    suite: RemoteSuite

    @property
    def forks(self) -> list[Conversation]:
        return self.suite.forks

    @property
    def fatal(self) -> list[BaseException]:
        return self.suite.fatal

    @property
    def remote(self) -> bool:
        return self.suite.remote

    @classmethod
    def start(
        cls,
        source: Conversation,
        specs: list[Branch],
        *,
        from_event_id: str | None,
        reset_metrics: bool,
        max_workers: int | None,
        executor: BranchExecutor | None,
        callbacks: tuple[EventCallback, ...],
        branch_timeout: float | None,
        timeout: float | None,
        workspace: WorkspaceSpec | None,
        suite_id: str | None,
        resume: bool,
    ) -> _RemoteRuns:
        _remote_limits(branch_timeout, timeout, workspace)
        if suite_id is not None:
            suite_id = _check_suite_id(suite_id)
        elif resume:
            raise InvalidValueError("resume=True resumes a recorded suite: give its suite_id")
        return cls(
            RemoteSuite.start(
                source,
                [spec.message for spec in specs],
                [spec.agent for spec in specs],
                [spec.title for spec in specs],
                [spec.tags for spec in specs],
                from_event_id=from_event_id,
                reset_metrics=reset_metrics,
                max_workers=max_workers,
                executor=executor,
                callbacks=callbacks,
                workspace=workspace,
                suite_id=suite_id,
                resume=resume,
            )
        )

    @classmethod
    def reopen(
        cls,
        workspace: Workspace,
        suite_id: str,
        *,
        max_workers: int | None,
        executor: BranchExecutor | None,
        callbacks: Iterable[EventCallback],
        branch_timeout: float | None,
        timeout: float | None,
        workspace_spec: WorkspaceSpec | None = None,
    ) -> _RemoteRuns:
        _check_options(max_workers, executor, None)
        _remote_limits(branch_timeout, timeout, workspace_spec)
        suite = RemoteSuite.reopen(
            workspace, suite_id, max_workers=max_workers, executor=executor, callbacks=callbacks
        )
        return cls(suite)

    def results(self, *, raise_on_error: bool = False) -> Generator[BranchResult, None, None]:
        """Run the branches on the server; yield each one's result as it ends."""
        runs = self.suite.results()
        try:
            for index, error, wall, worker in runs:
                if error is not None and not isinstance(error, Exception):
                    self.suite.fatal.append(error)
                    error = None
                result = BranchResult(index, self.forks[index], error, wall, worker)
                if raise_on_error:
                    failure = result.error or _run_error(result.index, result.fork)
                    if failure is not None:
                        raise failure
                yield result
        finally:
            close = getattr(runs, "close", None)
            if close is not None:
                close()


_FAILED = {
    "timeout": "it ran past its time limit",
    "cancelled": "the suite was cancelled while it ran",
}


def _detail(row: SuiteRow) -> dict[str, object]:
    try:
        detail = decode_json(row.detail)
    except ValueError:
        return {}
    return detail if isinstance(detail, dict) else {}


def _check_options(
    max_workers: int | None, executor: BranchExecutor | None, workspace: WorkspaceSpec | None
) -> None:
    if max_workers is not None and max_workers < 1:
        raise InvalidValueError(f"max_workers must be at least 1, got {max_workers}")
    if executor is not None and not callable(getattr(executor, "run_jobs", None)):
        raise InvalidTypeError(
            f"executor must have a run_jobs(prefix, jobs) method (a BranchExecutor), "
            f"got {type(executor).__name__}"
        )
    if workspace is not None and not (
        isinstance(workspace, str) or hasattr(workspace, "__fspath__") or callable(workspace)
    ):
        raise InvalidTypeError(
            "workspace must be a path or a function of (index, conversation_id), "
            f"got {type(workspace).__name__}"
        )


def _cancelled(index: int, fork: Conversation) -> BranchCancelledError:
    return BranchCancelledError(index, str(fork.id), "the suite was cancelled before it ended")


def _timed_out(index: int, fork: Conversation) -> BranchTimeoutError:
    return BranchTimeoutError(index, str(fork.id), "the suite's time limit passed before it ended")


def _takes_deadline(run_jobs: Callable[..., object]) -> bool:
    try:
        return "deadline" in inspect.signature(run_jobs).parameters
    except (TypeError, ValueError):
        return False


def _timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    try:
        run()
    except ConversationRunError:
        pass  # ended in error or stuck: recorded on the fork, where a branch's outcome is read
    return time.perf_counter() - started
