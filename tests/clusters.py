"""Dask LocalClusters for the tests: a real scheduler and worker processes on 127.0.0.1.

Their workers start from this process's fork server (Dask's ``multiprocessing-method:
forkserver``, which Dask's own test suite uses to be fast), loaded with ``distributed``
and what a ProcessExecutor worker loads (:mod:`cowconv.distributed.preload`: cowconv's
worker and litellm). A spawned Dask worker imports both itself, ~4 s of CPU each, and a
cluster whose worker is killed starts another. The workers are as real as spawned ones:
their own processes, their own memory, the nanny restarting one that dies.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
from collections.abc import Iterator
from typing import Any

PRELOAD = ["distributed", "cowconv.distributed.preload"]


def local_cluster(**options: Any) -> Any:
    """A ``distributed.LocalCluster``: 2 worker processes of 1 thread, no dashboard (its
    health-check server on a free port, not on 8787), 1 GiB per worker; ``options`` override.

    The fork server is started here with :data:`PRELOAD` (Python has one per process and
    reads its list once: started first, it is not left with Dask's list alone).
    """
    import dask
    import distributed

    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()
    settings: dict[str, Any] = {
        "n_workers": 2,
        "threads_per_worker": 1,
        "host": "127.0.0.1",
        "dashboard_address": None,
        "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"},
        "processes": True,
        "memory_limit": "1GiB",
    }
    return distributed.LocalCluster(**{**settings, **options})


@contextlib.contextmanager
def local_client(**options: Any) -> Iterator[Any]:
    """A ``distributed.Client`` of a :func:`local_cluster` (``options``), both closed after."""
    import distributed

    cluster = local_cluster(**options)
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
