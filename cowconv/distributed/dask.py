"""``DaskExecutor``: branch suites on a Dask cluster (``pip install 'cowconv[dask]'``).

>>> DaskExecutor.__name__
'DaskExecutor'
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from cowconv._exceptions import InvalidTypeError, InvalidValueError, ServiceError
from cowconv.branches.wire import BranchJob, SharedPrefix
from cowconv.distributed.driver import check_job_timeout, drive
from cowconv.distributed.worker import run_branch_job

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["DaskExecutor"]

logger = logging.getLogger("cowconv.distributed")


def _run_on_dask(job: bytes, prefix: bytes) -> bytes:
    # ``prefix`` is the broadcast bytes, already in this worker's memory: no transfer, and the
    # events are unpickled once per worker process (run_branch_job caches them by key).
    return run_branch_job(job, lambda: prefix)


def _allowed_failures(dask_scheduler: Any) -> int:
    return int(dask_scheduler.allowed_failures)


class DaskExecutor:
    """Runs branches on the workers of a Dask ``distributed.Client``.

    The shared history is broadcast to every worker once
    (``client.scatter([bytes], broadcast=True)``); each branch is a task that
    gets it by reference plus its own pickled job (cloudpickle, so tools
    defined in ``__main__`` travel by value). Tasks are submitted with
    ``retries=0`` and at most ``max_in_flight`` at a time (default: twice the
    cluster's threads). A worker that dies mid-run makes Dask's scheduler run
    the task again unless ``distributed.scheduler.allowed-failures`` is 0
    (a warning says so); set it to 0 so the branch fails instead of paying
    for its LLM calls twice.

    Use: ``run_branches(source, branches, executor=DaskExecutor(client))``
    with ``client = distributed.Client(...)`` (see ``docs/distributed.md``).

    >>> DaskExecutor("tcp://scheduler:8786")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidTypeError: DaskExecutor takes a distributed.Client, got str
    """

    def __init__(
        self,
        client: Client,
        *,
        max_in_flight: int | None = None,
        ship_api_keys: bool = True,
        progress: bool | None = None,
        job_timeout: float | None = None,
    ) -> None:
        try:
            from distributed import Client
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError(
                "DaskExecutor needs dask.distributed: pip install 'cowconv[dask]'"
            ) from error
        if not isinstance(client, Client):
            raise InvalidTypeError(
                f"DaskExecutor takes a distributed.Client, got {type(client).__name__}"
            )
        if max_in_flight is not None and max_in_flight < 1:
            raise InvalidValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.client = client
        # distributed is not fully typed: talk to it through Any.
        self._client: Any = cast(Any, client)
        self.max_in_flight = max_in_flight
        self.ship_api_keys = ship_api_keys
        self.progress = progress
        check_job_timeout(job_timeout)
        self.job_timeout = job_timeout
        allowed = self._client.run_on_scheduler(_allowed_failures)
        if allowed:
            logger.warning(
                "the Dask scheduler runs a task again when its worker dies (allowed-failures=%s):"
                " a branch whose worker dies would repeat its LLM calls; set "
                "distributed.scheduler.allowed-failures to 0 on the scheduler to fail it instead",
                allowed,
            )

    def run_jobs(
        self, prefix: SharedPrefix, jobs: Sequence[BranchJob]
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Broadcast the prefix, run every job as a task; yield each result as it ends."""
        import cloudpickle
        from distributed import wait as _wait

        wait: Any = _wait

        if not jobs:
            return
        client = self._client
        data = prefix.dumps()

        def scatter() -> Any:
            # A list of one: scatter splits sequences; hash=False: naming it would pickle it again.
            [future] = client.scatter([data], broadcast=True, hash=False)
            return future

        shared = [scatter()]
        limit = self.max_in_flight or 2 * max(1, sum(client.nthreads().values()))

        def submit(job: BranchJob) -> Any:
            if shared[0].status != "finished":
                # A dying worker can take the scattered prefix with it (Dask then reports it
                # lost, replicas or not): send it again for the jobs still to come.
                shared[0] = scatter()
            return client.submit(
                _run_on_dask,
                job.dumps(cloudpickle.dumps),
                shared[0],
                key=f"cowconv-branch-{prefix.key}-{job.index}",
                pure=False,
                retries=0,
            )

        def collect(future: Any) -> bytes:
            try:
                result: bytes = future.result()
            except Exception as error:
                if type(error).__name__ == "KilledWorker":
                    raise ServiceError(
                        f"its Dask worker died while running it; it was not run again ({error})"
                    ) from None
                raise
            finally:
                future.release()
            return result

        def wait_any(handles: list[Any], timeout: float | None) -> Any:
            try:
                return wait(handles, timeout=timeout, return_when="FIRST_COMPLETED").done
            except TimeoutError:  # distributed.wait raises when the timeout passes first
                return ()

        try:
            yield from drive(
                jobs,
                submit=submit,
                wait_any=wait_any,
                collect=collect,
                max_in_flight=limit,
                progress=self.progress,
                description="branches (Dask)",
                job_timeout=self.job_timeout,
                cancel=lambda future: future.cancel(),
            )
        finally:
            shared[0].release()
