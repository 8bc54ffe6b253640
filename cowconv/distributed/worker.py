"""The worker side of a branch suite: run one job, with this process's cache of prefixes.

An executor (:mod:`cowconv.distributed`) calls :func:`run_branch_job` in a
worker process for every :class:`~cowconv.BranchJob`. The shared prefix of
a suite is deserialised once per process and kept under its key (the last
few suites'), so every branch a worker runs continues from the same events.

>>> from cowconv import LLM, Agent, BranchJob, BranchOutcome, Conversation, SharedPrefix
>>> fork = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> prefix = SharedPrefix.of(fork.state.events)
>>> data = BranchJob.of(0, prefix, fork.state, 5).dumps()
>>> BranchOutcome.loads(run_branch_job(data, prefix.dumps)).execution_status.value
'finished'
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from cowconv._exceptions import InvalidTypeError
from cowconv.agent.messages import render
from cowconv.agent.tools import register_tool
from cowconv.backends.local import LocalBackend
from cowconv.branches.ledger import Claim, failed_change, failure_error
from cowconv.branches.remote import RemoteBranchJob, run_remote_job
from cowconv.branches.wire import (
    BranchJob,
    BranchOutcome,
    load_quietly,
    pickled,
    workspace_on_worker,
)
from cowconv.core.events import AgentErrorEvent
from cowconv.core.history import EventLog
from cowconv.core.llm import LLM
from cowconv.core.state import ConversationState, ExecutionStatus
from cowconv.core.usage import Usage
from cowconv.core.workspace import Workspace
from cowconv.workspaces.transfer import (
    SnapshotPack,
    branch_directory,
    pack_changes,
    receive_pack,
    release_directory,
    snapshot_loads,
    worker_store,
)

__all__ = ["CACHE_SIZE", "forget_prefix", "has_prefix", "prefix_loads", "run_branch_job"]

CACHE_SIZE = 4
"""How many shared prefixes a worker process keeps loaded (the most recently used)."""
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
            loaded = load_quietly(zlib.decompress(load()))
            if isinstance(loaded, tuple) and len(loaded) == 2:
                # A suite of copies: its files' snapshot travels with the history, unpacked
                # here once per process and suite, as the events are loaded once.
                loaded, files = loaded
                if not isinstance(files, SnapshotPack):
                    raise InvalidTypeError(
                        f"a prefix's files must be a SnapshotPack, got {files!r}"
                    )
                receive_pack(key, files)
            if not isinstance(loaded, EventLog):
                raise InvalidTypeError(f"a shared prefix must be an EventLog, got {type(loaded)}")
            events = loaded
            _loads += 1
            _loads_by_key[key] = _loads_by_key.get(key, 0) + 1
            if len(_loads_by_key) > 1024:
                del _loads_by_key[next(iter(_loads_by_key))]
            _prefixes[key] = events
            while len(_prefixes) > CACHE_SIZE:
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


def has_prefix(key: str) -> bool:
    """Whether this process holds the prefix ``key`` loaded.

    >>> has_prefix("no-such-prefix")
    False
    """
    with _prefix_lock:
        return key in _prefixes


def forget_prefix(key: str) -> None:
    """Drop a cached prefix (an in-process executor does so when its suite ends)."""
    with _prefix_lock:
        _prefixes.pop(key, None)
        _loads_by_key.pop(key, None)


def _usage_since(before: Usage, after: Usage) -> Usage:
    start = before.model_dump()
    return Usage(**{field: value - start[field] for field, value in after.model_dump().items()})


_CANCEL_POLL = 2.0  # seconds between two looks at ``cancelled`` during a run


def _run_for(
    backend: LocalBackend,
    timeout: float | None,
    cancelled: Callable[[], bool] | None = None,
) -> str | None:
    """Run ``backend`` for at most ``timeout`` seconds, until ``cancelled()`` says so.

    Returns ``None`` if the run ended by itself, else ``"timeout"`` or
    ``"cancelled"``. A run cut off is interrupted (its running command
    killed, no further step) and left behind: an LLM call in flight cannot
    be cut off, so its thread ends when that call does, and nothing it
    records is kept.
    """
    if timeout is None and cancelled is None:
        backend.run()
        return None
    failure: list[BaseException] = []

    def run() -> None:
        try:
            backend.run()
        except BaseException as error:  # handed to the caller's thread below
            failure.append(error)

    thread = threading.Thread(target=run, name="cowconv-branch-run", daemon=True)
    thread.start()
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    ended: str | None = None
    while thread.is_alive():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            ended = "timeout"
            break
        wait = left if cancelled is None else min(_CANCEL_POLL, left or _CANCEL_POLL)
        thread.join(wait)
        if thread.is_alive() and cancelled is not None and cancelled():
            ended = "cancelled"
            break
    if ended is not None:
        backend.interrupt()
        return ended
    if failure:
        raise failure[0]
    return None


def run_branch_job(
    job_data: bytes,
    load_prefix: Callable[[], bytes],
    *,
    claim: Callable[[], bool] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> bytes:
    """Run one branch on a worker; returns the pickled :class:`BranchOutcome`.

    ``load_prefix`` returns the bytes of the job's :class:`SharedPrefix`; it
    is called only the first time this process sees that prefix (the events
    are cached by key). Errors a run records (a failed LLM call) end up in
    the outcome's events; anything that stops the worker from running the
    branch comes back as a failed outcome naming the cause.

    Before any LLM call: ``claim`` (an engine's guard against running a job
    twice) must return ``True``, and the branch's workspace must exist here
    (``job.workspace`` names it on this worker; default: the fork's own).
    With ``job.timeout``, a run still going after that many seconds is
    interrupted and comes back with ``failure="timeout"``: its events so
    far, then an :class:`~cowconv.AgentErrorEvent` saying so. ``cancelled``
    (an engine that cannot stop a running task) is asked every few seconds
    during the run; once it says so, the run is interrupted the same way
    (``failure="cancelled"``).

    For a recorded suite (``job.suite``), the branch is first claimed in the
    suite's store (refused, ``failure="claimed"``, if another runner holds
    it or ran it), a heartbeat says the claim is alive while it runs, and
    the outcome is committed to the fork there, with the branch marked
    ``done``, in one transaction (``committed=True``): the caller may be gone.

    >>> from cowconv import LLM, Agent, BranchJob, BranchOutcome, Conversation, SharedPrefix
    >>> fork = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> prefix = SharedPrefix.of(fork.state.events)
    >>> data = BranchJob.of(0, prefix, fork.state, 5).dumps()
    >>> outcome = BranchOutcome.loads(run_branch_job(data, prefix.dumps))
    >>> outcome.execution_status.value, outcome.events  # nothing to answer: no LLM call
    ('finished', ())
    >>> gone = BranchJob.of(1, prefix, fork.state, 5, workspace="/nonexistent/{index}").dumps()
    >>> outcome = BranchOutcome.loads(run_branch_job(gone, prefix.dumps))
    >>> outcome.failure, outcome.error  # doctest: +ELLIPSIS
    ('workspace', "its workspace '/nonexistent/1' does not exist on worker ...")
    """
    job = load_quietly(job_data)
    if isinstance(job, RemoteBranchJob):  # a fork an agent server keeps: run there
        return run_remote_job(job, claim, cancelled)
    if not isinstance(job, BranchJob):
        raise InvalidTypeError(f"expected a BranchJob, got {type(job).__name__}")
    if job.suite is None:
        return pickled(_run_job(job, load_prefix, claim, cancelled))
    if claim is not None and not claim():
        # The engine's refusal first, before the store is touched: a branch the engine never
        # started stays pending there (a resume runs it), one it did start is running there.
        return pickled(_refused(job))
    held = Claim(job.suite, job.index, str(job.conversation_id))
    try:
        refused = held.take()
    except Exception as error:  # the store cannot be reached from here: nothing ran
        return pickled(BranchOutcome.failed(job.index, f"{type(error).__name__}: {error}", "store"))
    if refused is not None:
        return pickled(BranchOutcome.failed(job.index, refused, "claimed"))
    held.start()
    try:

        def stop() -> bool:
            return held.lost or (cancelled is not None and cancelled())

        outcome = _run_job(job, load_prefix, None, stop)
    finally:
        held.stop()
    return pickled(_commit_outcome(held, job, outcome))


def _commit_outcome(held: Claim, job: BranchJob, outcome: BranchOutcome) -> BranchOutcome:
    """Commit ``outcome`` to the fork in the suite's store and mark its branch done."""
    detail = {
        "failure": outcome.failure,
        "error": outcome.error,
        "worker": outcome.worker,
        "wall_seconds": outcome.wall_seconds,
        "prefix_loads": outcome.prefix_loads,
    }
    change: Callable[[ConversationState], ConversationState]
    if outcome.stats is not None:
        change = outcome.apply
    else:
        cid = str(job.conversation_id)
        error = failure_error(job.index, cid, outcome.failure, outcome.error or "it did not run")
        change = failed_change(str(error))
    try:
        held.commit(change, detail)
    except Exception as error:
        # Not committed: the caller (if it is still there) learns why; the suite's row says
        # the branch is running until its heartbeat stalls, then lost.
        return replace(
            outcome,
            error=f"its outcome could not be committed to the suite's store: {error}",
            failure="store",
            stats=None,
        )
    return replace(outcome, committed=True)


def _refused(job: BranchJob) -> BranchOutcome:
    return BranchOutcome.failed(
        job.index,
        "its worker died while running it, and the engine tried to run it again: "
        "refused (that would repeat its LLM calls)",
        "lost",
    )


def _run_job(
    job: BranchJob,
    load_prefix: Callable[[], bytes],
    claim: Callable[[], bool] | None,
    cancelled: Callable[[], bool] | None,
) -> BranchOutcome:
    worker = f"{socket.gethostname()}:{os.getpid()}"
    if claim is not None and not claim():
        return _refused(job)
    made: list[Workspace] = []  # a directory made here from the job's files, removed after
    try:
        return _run_in_place(job, load_prefix, cancelled, worker, made)
    finally:
        for workspace in made:
            release_directory(workspace)


def _run_in_place(
    job: BranchJob,
    load_prefix: Callable[[], bytes],
    cancelled: Callable[[], bool] | None,
    worker: str,
    made: list[Workspace],
) -> BranchOutcome:
    try:
        state = job.state
        rendered = state.agent.condenser is None
        prefix: EventLog | None = None
        if job.files is not None:
            # Its own directory, made here from the snapshot that came with the prefix (the
            # prefix first, then): the fork's directory on the caller's machine is never read.
            prefix = _prefix(job.prefix_key, load_prefix, rendered=rendered)
            made.append(branch_directory(job.files, state.workspace))
            state = state._replace(workspace=made[0])
        elif job.workspace is not None:
            path = workspace_on_worker(job.workspace, job.index, str(job.conversation_id))
            state = state._replace(
                workspace=state.workspace.model_copy(update={"working_dir": path})
            )
        where = state.workspace
        if not where.is_remote and not os.path.isdir(where.working_dir):
            return BranchOutcome.failed(
                job.index,
                f"its workspace {where.working_dir!r} does not exist on worker {worker} "
                "(no LLM call was made; give the branches a workspace on their workers "
                "with run_branches(..., workspace=...))",
                "workspace",
            )
        for tool in job.tools:
            register_tool(tool)
        if prefix is None:
            prefix = _prefix(job.prefix_key, load_prefix, rendered=rendered)
        state = state._replace(branch=prefix.take(job.prefix_length).extend(state.branch))
        start = len(state.branch)
        if job.timeout is not None:
            LLM.preload()  # a worker's first import of litellm is not the branch's time
        backend = LocalBackend.open(state, max_iteration_per_run=job.max_iteration_per_run)
        metrics = state.agent.llm.metrics
        usage, calls = metrics.usage, len(metrics.latencies)
        started = time.perf_counter()
        try:
            cut_off = _run_for(backend, job.timeout, cancelled)
        finally:
            backend.close()
        wall = time.perf_counter() - started
        final = backend.snapshot()
        events = tuple(final.branch[position] for position in range(start, len(final.branch)))
        files = None
        if job.files is not None:
            # What the branch did to its files goes back: the objects its snapshots added.
            store = worker_store()
            last = store.snapshot(made[0].working_dir).tree
            files = pack_changes(store, job.files, events, last)
    except Exception as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        return BranchOutcome.failed(
            job.index,
            f"the worker could not run it: {type(error).__name__}: {error} "
            f"({frame.filename}:{frame.lineno})",
        )
    status = final.execution_status
    if cut_off is not None:
        why = (
            f"it ran past its time limit of {job.timeout:g} s"
            if cut_off == "timeout"
            else "the suite was cancelled while it ran"
        )
        events = (*events, AgentErrorEvent(error=why))
        status = ExecutionStatus.ERROR
    return BranchOutcome(
        index=job.index,
        events=events,
        stats=final.stats,
        execution_status=status,
        agent_state=final.agent_state,
        activated_knowledge_skills=final.activated_knowledge_skills,
        usage=_usage_since(usage, metrics.usage),
        latencies=metrics.latencies[calls:],
        wall_seconds=wall,
        worker=worker,
        prefix_loads=_loads_by_key.get(job.prefix_key, 0),
        failure=cut_off,
        files=files,
        snapshot_loads=snapshot_loads(job.prefix_key),
    )
