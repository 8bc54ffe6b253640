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

from cowconv._exceptions import InvalidTypeError
from cowconv.agent.messages import render
from cowconv.agent.tools import register_tool
from cowconv.backends.local import LocalBackend
from cowconv.branches.wire import BranchJob, BranchOutcome, load_quietly, pickled
from cowconv.core.history import EventLog
from cowconv.core.usage import Usage

__all__ = ["forget_prefix", "prefix_loads", "run_branch_job"]

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
            loaded = load_quietly(zlib.decompress(load()))
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

    >>> from cowconv import LLM, Agent, BranchJob, BranchOutcome, Conversation, SharedPrefix
    >>> fork = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> prefix = SharedPrefix.of(fork.state.events)
    >>> data = BranchJob.of(0, prefix, fork.state, 5).dumps()
    >>> outcome = BranchOutcome.loads(run_branch_job(data, prefix.dumps))
    >>> outcome.execution_status.value, outcome.events  # nothing to answer: no LLM call
    ('finished', ())
    """
    job = load_quietly(job_data)
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
        backend = LocalBackend.open(state, max_iteration_per_run=job.max_iteration_per_run)
        metrics = state.agent.llm.metrics
        usage, calls = metrics.usage, len(metrics.latencies)
        started = time.perf_counter()
        try:
            backend.run()
        finally:
            backend.close()
        wall = time.perf_counter() - started
    except Exception as error:
        where = traceback.extract_tb(error.__traceback__)[-1]
        return pickled(
            BranchOutcome.failed(
                job.index,
                f"the worker could not run it: {type(error).__name__}: {error} "
                f"({where.filename}:{where.lineno})",
            )
        )
    final = backend.snapshot()
    return pickled(
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
