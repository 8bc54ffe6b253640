"""Fixtures for every test pytest collects here: the suite under ``tests/`` and the doctests
of ``cowconv/`` alike."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import warnings
from collections.abc import Iterator

import pytest

# The suite starts hundreds of Python processes (pytest-xdist workers, servers, CLI runs, suite
# workers); with PYTHONDONTWRITEBYTECODE set (CI images often set it) each compiled cowconv
# again and each worker rewrote every test module's asserts again, ~7 s of CPU per worker.
# The tests write the bytecode caches (``__pycache__/``, ignored by git) whatever it says.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

WORKERS = 4
"""pytest-xdist workers of a run that names none (``-n``): most of the suite waits (on servers,
subprocesses, time limits), so four keep two cores busy. ``-n 0`` or ``-p no:xdist`` runs
serially."""


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run on :data:`WORKERS` pytest-xdist workers with ``--dist loadgroup`` unless told otherwise.

    Set here, not in ``addopts``, so that ``-p no:xdist`` (where ``-n`` is no option) still
    runs the suite serially. A worker learns the controller's ``--dist`` from its
    ``workerinput`` (:func:`pytest_configure_node`): it tags the ``xdist_group`` tests by it.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.option.loadgroup = workerinput.get("cowconv_dist") == "loadgroup"
        return
    if config.option.numprocesses is not None or config.option.collectonly:
        return
    if config.option.usepdb or config.option.tx:  # a debugger, or workers named with --tx
        return
    config.option.numprocesses = WORKERS
    if config.option.dist == "no":
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """Tell each pytest-xdist worker the controller's ``--dist`` (see ``pytest_cmdline_main``)."""
    config = node.config  # type: ignore[attr-defined]
    node.workerinput["cowconv_dist"] = config.option.dist  # type: ignore[attr-defined]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection made: the garbage collector's full passes skip it from then on.

    Collecting the suite imports cowconv, litellm, FastAPI, hypothesis and schemathesis and
    builds 3,000 tests: ~840,000 objects that live until the end, which every full pass of
    the collector walked again (measured on three modules: 17 s of 104 s of CPU were full
    passes; 8 s of 79 s frozen). What the tests make is collected as before, so unclosed
    sockets and files still warn in the test that left them.
    """
    gc.collect()
    gc.freeze()


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
