"""Fixtures for every test pytest collects here: the suite under ``tests/`` and the doctests
of ``cowconv/`` alike."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _close_the_event_loop_litellm_leaves() -> Iterator[None]:
    """Close the event loop a synchronous litellm call leaves set on the main thread.

    After each synchronous completion, litellm's service logger asks
    ``asyncio.get_event_loop()`` for a loop; on Python 3.11 that makes one and sets it as
    the thread's loop, and nothing closes it. When a later test's ``asyncio.run()``
    replaces it, the garbage collector finds it unclosed, and ``filterwarnings = error``
    fails whatever test runs at that moment (seen on pytest-xdist workers). No test here
    sets a loop on purpose past its own end, so a loop still set after a test, not
    running, is closed and unset.
    """
    yield
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return  # called inside a running loop: it belongs to someone else
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return  # no loop set, and none may be made here (not the main thread)
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)
