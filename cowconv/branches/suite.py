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

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from cowconv._exceptions import BranchError, BranchesError, InvalidTypeError, InvalidValueError
from cowconv.branches.report import SuiteReport
from cowconv.branches.wire import BranchJob, BranchOutcome, SharedPrefix
from cowconv.conversation import Conversation
from cowconv.core.agent import Agent
from cowconv.core.events import AgentErrorEvent
from cowconv.core.history import EventLog
from cowconv.core.state import ConversationState, ExecutionStatus
from cowconv.core.tree import extend_active
from cowconv.ports import BranchExecutor, EventCallback

__all__ = ["Branch", "BranchRuns", "run_branches"]


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


class BranchRuns(list[Conversation]):
    """The forks of a suite, in the order of its branches, with how long each run took.

    A plain list of :class:`Conversation` (so existing code keeps working)
    plus ``wall_seconds`` (``None`` for a branch that never ran) and
    :meth:`report`, a readable summary. With an executor, ``workers`` names
    the process each branch ran in (``host:pid``) and ``prefix_loads`` how
    many times that process had deserialised the shared history by then
    (1: once; empty for the thread pool).

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
    ) -> None:
        super().__init__(forks)
        self.wall_seconds: tuple[float | None, ...] = tuple(wall_seconds)
        self.workers: tuple[str | None, ...] = tuple(workers)
        self.prefix_loads: tuple[int, ...] = tuple(prefix_loads)

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
    specs = [Branch(b) if isinstance(b, str) else b for b in branches]
    for spec in specs:
        if not isinstance(spec, Branch):
            raise InvalidTypeError(
                f"branches must be Branch values or str, got {type(spec).__name__}"
            )
    if max_workers is not None and max_workers < 1:
        raise InvalidValueError(f"max_workers must be at least 1, got {max_workers}")
    if executor is not None and not callable(getattr(executor, "run_jobs", None)):
        raise InvalidTypeError(
            f"executor must have a run_jobs(prefix, jobs) method (a BranchExecutor), "
            f"got {type(executor).__name__}"
        )
    callbacks = tuple(callbacks)
    forks: list[Conversation] = []
    inherited: list[EventLog] = []
    for spec in specs:
        fork = source.fork(
            agent=spec.agent,
            title=spec.title,
            tags=spec.tags,
            reset_metrics=reset_metrics,
            from_event_id=from_event_id,
            callbacks=callbacks,
        )
        inherited.append(fork.state.events)
        fork.send_message(spec.message)
        forks.append(fork)
    if not forks:
        return BranchRuns()
    if executor is None:
        workers = max_workers or min(32, len(forks))
        walls, errors = _run_in_threads(forks, workers)
        runs = BranchRuns(forks, walls)
    else:
        outcomes, errors = _run_on(executor, forks, SharedPrefix.of(inherited[0]))
        runs = BranchRuns(
            forks,
            [None if o is None else o.wall_seconds for o in outcomes],
            workers=[None if o is None else o.worker for o in outcomes],
            prefix_loads=[0 if o is None else o.prefix_loads for o in outcomes],
        )
    if errors:
        message = f"{len(errors)} of {len(forks)} branch runs raised"
        if all(isinstance(error, Exception) for error in errors):
            raise BranchesError(message, errors, runs)  # type: ignore[arg-type]
        raise BaseExceptionGroup(message, errors)
    return runs


def _timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def _run_in_threads(
    forks: Sequence[Conversation], workers: int
) -> tuple[list[float | None], list[BaseException]]:
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cowconv-branch") as pool:
        futures = [pool.submit(_timed, fork.run) for fork in forks]
    walls: list[float | None] = []
    errors: list[BaseException] = []
    for future in futures:
        error = future.exception()
        walls.append(None if error is not None else future.result())
        if error is not None:
            errors.append(error)
    return walls, errors


def _fail(fork: Conversation, error: BranchError) -> None:
    """Record on the fork why its branch did not run (best effort: the error is raised anyway)."""

    def change(state: ConversationState) -> ConversationState:
        return state._replace(
            events=extend_active(state, (AgentErrorEvent(error=str(error)),)),
            execution_status=ExecutionStatus.ERROR,
        )

    try:
        fork.backend.commit(change)
    except Exception as failure:
        error.add_note(f"recording it on the fork failed too: {failure}")


def _run_on(
    executor: BranchExecutor, forks: Sequence[Conversation], prefix: SharedPrefix
) -> tuple[list[BranchOutcome | None], list[BaseException]]:
    ship_api_keys = bool(getattr(executor, "ship_api_keys", True))
    outcomes: list[BranchOutcome | None] = [None] * len(forks)
    errors: list[BaseException] = []
    pending = set()
    jobs = []
    for index, fork in enumerate(forks):
        try:
            job = BranchJob.of(
                index, prefix, fork.state, fork.max_iteration_per_run, ship_api_keys=ship_api_keys
            )
        except Exception as error:
            failure = BranchError(index, str(fork.id), f"cannot be prepared: {error}")
            _fail(fork, failure)
            errors.append(failure)
            continue
        jobs.append(job)
        pending.add(index)

    def failed(index: int, reason: str) -> None:
        error = BranchError(index, str(forks[index].id), reason)
        _fail(forks[index], error)
        errors.append(error)

    try:
        for index, result in executor.run_jobs(prefix, jobs):
            if index not in pending:
                continue  # not ours, or already answered: never commit a run twice
            pending.discard(index)
            fork = forks[index]
            if isinstance(result, BranchError):
                _fail(fork, result)
                errors.append(result)
                continue
            if isinstance(result, BaseException):
                failed(index, f"{type(result).__name__}: {result}")
                continue
            try:
                outcome = BranchOutcome.loads(result)
                if outcome.error is not None:
                    failed(index, outcome.error)
                    continue
                # Through the fork's backend, as any change: its store persists the outcome
                # and its callbacks hear the events. Its stats hold the run's usage.
                fork.backend.commit(outcome.apply)
            except Exception as error:
                errors.append(error)
                continue
            outcomes[index] = outcome
    except Exception as error:
        for index in sorted(pending):
            failed(index, f"the executor stopped: {type(error).__name__}: {error}")
        pending.clear()
    for index in sorted(pending):
        failed(index, "the executor returned no result for it")
    return outcomes, errors
