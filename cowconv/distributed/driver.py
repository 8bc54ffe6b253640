"""What every executor does the same way: bound the runs in flight and show progress.

>>> from concurrent.futures import ThreadPoolExecutor, wait, FIRST_COMPLETED
>>> class Job:
...     def __init__(self, index):
...         self.index = index
>>> with ThreadPoolExecutor(2) as pool:
...     results = dict(drive(
...         [Job(i) for i in range(5)],
...         submit=lambda job: pool.submit(lambda: b"done %d" % job.index),
...         wait_any=lambda handles, timeout: wait(handles, timeout, FIRST_COMPLETED).done,
...         collect=lambda future: future.result(),
...         max_in_flight=2,
...         progress=False,
...     ))
>>> results[4]
b'done 4'
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from cowconv._exceptions import BranchTimeoutError, InvalidValueError
from cowconv.core.waits import bounded

__all__ = ["check_grace", "drive", "progress_bar"]

logger = logging.getLogger("cowconv.distributed")

H = TypeVar("H", bound=Hashable)


class _Job(Protocol):
    @property
    def index(self) -> int: ...


def check_grace(grace: float) -> float:
    """Return ``grace`` (seconds) if it is a finite number of at least 0, else raise.

    An executor's ``grace``: how long past a branch's time limit it waits for a
    worker that does not answer before giving the branch up.

    >>> check_grace(15)
    15
    >>> check_grace(-1)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: grace must be a finite number of seconds >= 0, got -1
    """
    if (
        isinstance(grace, bool)
        or not isinstance(grace, int | float)
        or not 0 <= grace < float("inf")
    ):
        raise InvalidValueError(f"grace must be a finite number of seconds >= 0, got {grace!r}")
    return grace


@contextmanager
def progress_bar(
    total: int, enabled: bool | None, description: str
) -> Iterator[Callable[[], None]]:
    """A function to call once per finished branch: a rich progress bar when interactive.

    ``enabled=None`` shows it when stderr is a terminal; otherwise each
    finished branch is logged at DEBUG level on the ``cowconv.distributed``
    logger.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled or total == 0:
        done = 0

        def log() -> None:
            nonlocal done
            done += 1
            logger.debug("%s: %d of %d branches done", description, done, total)

        yield log
        return
    from rich.console import Console
    from rich.progress import Progress

    # On stderr, so a script's own output on stdout stays clean.
    with Progress(console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


def _limited(job: Any, deadline: float | None) -> Any:
    """``job`` with its time limit cut to what is left before the suite's ``deadline``."""
    if deadline is None or not dataclasses.is_dataclass(job) or not hasattr(job, "timeout"):
        return job
    left = max(0.0, deadline - time.monotonic())
    own = job.timeout
    limited: Any = job
    return dataclasses.replace(limited, timeout=left if own is None else min(own, left))


def drive(
    jobs: Sequence[_Job],
    *,
    submit: Callable[[Any], H],
    wait_any: Callable[[list[H], float | None], Iterable[H]],
    collect: Callable[[H], bytes],
    max_in_flight: int,
    progress: bool | None,
    description: str = "branches",
    cancel: Callable[[H], object] | None = None,
    deadline: float | None = None,
    grace: float = 60.0,
    suite_grace: float = 5.0,
    queued_runs: int = 1,
) -> Iterator[tuple[int, bytes | BaseException]]:
    """Submit ``jobs``, at most ``max_in_flight`` at a time; yield ``(index, result)`` as they end.

    A job whose ``submit`` or ``collect`` raises yields the exception (it is
    never submitted again). ``wait_any(handles, timeout)`` returns the
    handles done (possibly none, after ``timeout`` seconds; ``None``: wait).

    Time limits: a job's ``timeout`` is enforced on its worker (the run
    comes back cut off); ``deadline`` (a :func:`time.monotonic` value) ends
    the suite: jobs submitted later get what is left as their limit, and
    none is submitted after it. As a backstop for a worker that does not
    answer, a job still out ``grace`` seconds past its limit (counted from
    its submission, times ``queued_runs``: how many runs it may wait behind
    on its worker; generous, as a worker may still be starting), or
    ``suite_grace`` seconds past the deadline, is given up: ``cancel(handle)``,
    and a :class:`~cowconv.BranchTimeoutError` for it. When the caller stops
    iterating (an exception, Ctrl-C, ``close()``), every job in flight is
    cancelled.
    """
    queue = deque(jobs)
    in_flight: dict[H, tuple[int, str, float | None]] = {}

    def cut_off(index: int, conversation_id: str, reason: str) -> BranchTimeoutError:
        return BranchTimeoutError(index, conversation_id, reason)

    with progress_bar(len(jobs), progress, description) as advance:
        try:
            while queue or in_flight:
                while queue and len(in_flight) < max_in_flight:
                    job = queue.popleft()
                    cid = str(getattr(job, "conversation_id", ""))
                    if deadline is not None and time.monotonic() >= deadline:
                        advance()
                        yield (
                            job.index,
                            cut_off(job.index, cid, "not started before the suite's time limit"),
                        )
                        continue
                    job = _limited(job, deadline)
                    limit = getattr(job, "timeout", None)
                    expiry = None
                    if limit is not None:
                        expiry = time.monotonic() + queued_runs * limit + grace
                    try:
                        in_flight[submit(job)] = (job.index, cid, expiry)
                    except Exception as error:
                        advance()
                        yield job.index, error
                if not in_flight:
                    continue
                expiries = [e for _, _, e in in_flight.values() if e is not None]
                if deadline is not None:
                    expiries.append(deadline + suite_grace)
                timeout = None
                if expiries:
                    timeout = max(0.0, min(expiries) - time.monotonic())
                # Woken every second at least, so that Ctrl-C is handled (cowconv.core.waits).
                done = list(wait_any(list(in_flight), bounded(timeout)))
                for handle in done:
                    index, _, _ = in_flight.pop(handle)
                    result: bytes | BaseException
                    try:
                        result = collect(handle)
                    except Exception as error:
                        result = error
                    advance()
                    yield index, result
                now = time.monotonic()
                for handle, (index, cid, expiry) in list(in_flight.items()):
                    past_suite = deadline is not None and now >= deadline + suite_grace
                    if not past_suite and (expiry is None or now < expiry):
                        continue
                    del in_flight[handle]
                    if cancel is not None:
                        cancel(handle)
                    advance()
                    what = "the suite's time limit" if past_suite else "its time limit"
                    yield (
                        index,
                        cut_off(index, cid, f"its worker did not answer within {what}; given up"),
                    )
        finally:
            if cancel is not None:
                for handle in in_flight:
                    try:
                        cancel(handle)
                    except Exception as error:  # cancelling is best effort
                        logger.debug("cancelling a branch failed: %s", error)
