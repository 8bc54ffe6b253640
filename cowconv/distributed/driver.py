"""What every executor does the same way: bound the runs in flight and show progress.

>>> from concurrent.futures import ThreadPoolExecutor, wait, FIRST_COMPLETED
>>> class Job:
...     def __init__(self, index):
...         self.index = index
>>> with ThreadPoolExecutor(2) as pool:
...     results = dict(drive(
...         [Job(i) for i in range(5)],
...         submit=lambda job: pool.submit(lambda: b"done %d" % job.index),
...         wait_any=lambda handles: wait(handles, return_when=FIRST_COMPLETED).done,
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
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

__all__ = ["drive", "progress_bar"]

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
    wait_any: Callable[[list[H]], Iterable[H]],
    collect: Callable[[H], bytes],
    max_in_flight: int,
    progress: bool | None,
    description: str = "branches",
) -> Iterator[tuple[int, bytes | BaseException]]:
    """Submit ``jobs``, at most ``max_in_flight`` at a time; yield ``(index, result)`` as they end.

    A job whose ``submit`` or ``collect`` raises yields the exception (it is
    never submitted again).
    """
    queue = deque(jobs)
    in_flight: dict[H, int] = {}
    with progress_bar(len(jobs), progress, description) as advance:
        while queue or in_flight:
            while queue and len(in_flight) < max_in_flight:
                job = queue.popleft()
                try:
                    in_flight[submit(job)] = job.index
                except Exception as error:
                    advance()
                    yield job.index, error
            if not in_flight:
                continue
            for handle in list(wait_any(list(in_flight))):
                index = in_flight.pop(handle)
                result: bytes | BaseException
                try:
                    result = collect(handle)
                except Exception as error:
                    result = error
                advance()
                yield index, result
