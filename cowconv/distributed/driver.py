"""What every executor does the same way: bound the runs in flight and show progress.

>>> from concurrent.futures import ThreadPoolExecutor, wait, FIRST_COMPLETED
>>> class Job:
...     def __init__(self, index):
...         self.index = index
>>> with ThreadPoolExecutor(2) as pool:
...     results = dict(drive(
...         [Job(i) for i in range(5)],
...         submit=lambda job: pool.submit(lambda: b"done %d" % job.index),
...         wait_any=lambda handles, timeout: wait(
...             handles, timeout, return_when=FIRST_COMPLETED
...         ).done,
...         collect=lambda future: future.result(),
...         max_in_flight=2,
...         progress=False,
...     ))
>>> results[4]
b'done 4'
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from cowconv._exceptions import InvalidValueError, ServiceError

__all__ = ["check_job_timeout", "drive", "progress_bar"]

logger = logging.getLogger("cowconv.distributed")

H = TypeVar("H", bound=Hashable)


class _Job(Protocol):
    @property
    def index(self) -> int: ...


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


def drive(
    jobs: Sequence[_Job],
    *,
    submit: Callable[[Any], H],
    wait_any: Callable[[list[H], float | None], Iterable[H]],
    collect: Callable[[H], bytes],
    max_in_flight: int,
    progress: bool | None,
    description: str = "branches",
    job_timeout: float | None = None,
    cancel: Callable[[H], None] | None = None,
) -> Iterator[tuple[int, bytes | BaseException]]:
    """Submit ``jobs``, at most ``max_in_flight`` at a time; yield ``(index, result)`` as they end.

    A job whose ``submit`` or ``collect`` raises yields the exception (it is
    never submitted again). ``wait_any(handles, timeout)`` returns the
    handles that are done (none if ``timeout`` seconds passed first). A job
    still running ``job_timeout`` seconds after it was submitted (its worker
    hangs) is given to ``cancel`` and yields a :class:`~cowconv.ServiceError`.
    """
    check_job_timeout(job_timeout)
    queue = deque(jobs)
    in_flight: dict[H, int] = {}
    started: dict[H, float] = {}
    with progress_bar(len(jobs), progress, description) as advance:
        while queue or in_flight:
            while queue and len(in_flight) < max_in_flight:
                job = queue.popleft()
                try:
                    handle = submit(job)
                except Exception as error:
                    advance()
                    yield job.index, error
                    continue
                in_flight[handle] = job.index
                started[handle] = time.monotonic()
            if not in_flight:
                continue
            timeout = None
            if job_timeout is not None:
                oldest = min(started[handle] for handle in in_flight)
                timeout = max(0.0, oldest + job_timeout - time.monotonic())
            for handle in list(wait_any(list(in_flight), timeout)):
                index = in_flight.pop(handle)
                started.pop(handle, None)
                result: bytes | BaseException
                try:
                    result = collect(handle)
                except Exception as error:
                    result = error
                advance()
                yield index, result
            if job_timeout is None:
                continue
            now = time.monotonic()
            for handle in [h for h in in_flight if now - started[h] >= job_timeout]:
                index = in_flight.pop(handle)
                del started[handle]
                if cancel is not None:
                    try:
                        cancel(handle)
                    except Exception:
                        logger.exception("could not stop the job of branch %d", index)
                advance()
                yield (
                    index,
                    ServiceError(
                        f"it did not finish within job_timeout={job_timeout:g} s (its worker hangs "
                        "or is too slow); it was stopped and not run again"
                    ),
                )


def check_job_timeout(job_timeout: float | None) -> None:
    """``InvalidValueError`` unless ``job_timeout`` is ``None`` or a positive number of seconds.

    >>> check_job_timeout(0)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: job_timeout must be positive seconds or None, got 0
    """
    if job_timeout is None:
        return
    if isinstance(job_timeout, bool) or not isinstance(job_timeout, int | float):
        raise InvalidValueError(f"job_timeout must be seconds or None, got {job_timeout!r}")
    if not job_timeout > 0 or job_timeout != job_timeout:
        raise InvalidValueError(
            f"job_timeout must be positive seconds or None, got {job_timeout!r}"
        )
