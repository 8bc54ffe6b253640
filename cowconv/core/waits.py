"""Waits that let Ctrl-C through: they wake at least once a second.

Python runs a signal's handler (``KeyboardInterrupt`` for SIGINT) in the
main thread, between two bytecodes. When the operating system hands the
signal to another thread (``os.kill`` of the own process from a thread can
land anywhere), the main thread is not woken: blocked in a wait without end,
it never raised, and a suite waiting on hung branches hung with it. Every
wait of a suite's main loop goes through here, and so handles a pending
signal within :data:`WAKE_INTERVAL` seconds.

>>> from concurrent.futures import ThreadPoolExecutor
>>> with ThreadPoolExecutor(1) as pool:
...     [future.result() for future in first_done([pool.submit(sum, [1, 2])])]
[3]
>>> bounded(None), bounded(0.25)
(1.0, 0.25)
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TypeVar

__all__ = ["WAKE_INTERVAL", "bounded", "first_done"]

T = TypeVar("T")

WAKE_INTERVAL = 1.0
"""The longest a suite's main loop waits before it looks for a pending signal (seconds)."""


def bounded(timeout: float | None) -> float:
    """``timeout`` (``None``: no limit), at most :data:`WAKE_INTERVAL`: a caller that waits
    again until its own deadline handles a pending signal in between."""
    return WAKE_INTERVAL if timeout is None else min(timeout, WAKE_INTERVAL)


def first_done(futures: Iterable[Future[T]]) -> set[Future[T]]:
    """The futures done once at least one is (``wait(..., return_when=FIRST_COMPLETED)``),
    waking every :data:`WAKE_INTERVAL` seconds meanwhile."""
    pending = list(futures)
    while True:
        done, _ = wait(pending, timeout=WAKE_INTERVAL, return_when=FIRST_COMPLETED)
        if done:
            return done
