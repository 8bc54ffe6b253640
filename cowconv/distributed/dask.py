"""``DaskExecutor``: branch suites on a Dask cluster (``pip install 'cowconv[dask]'``).

>>> DaskExecutor.__name__
'DaskExecutor'
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from cowconv._exceptions import BranchLostError, InvalidTypeError, InvalidValueError
from cowconv.branches.wire import BranchJob, SharedPrefix
from cowconv.distributed.driver import check_grace, drive
from cowconv.distributed.worker import run_branch_job

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["DaskExecutor"]

# How Dask ends a task whose worker died while running it: KilledWorker, or a cancellation
# (``future.result()`` raises FutureCancelledError, ``wait()`` FuturesCancelledError; older
# releases raised CancelledError for both).
_WORKER_GONE = frozenset(
    {"KilledWorker", "FutureCancelledError", "FuturesCancelledError", "CancelledError"}
)

logger = logging.getLogger("cowconv.distributed")

# The scheduler's metadata under which each branch task notes that it started (before any LLM
# call): ``[_STARTED, suite, index]``.
_STARTED = "cowconv-started"
_OPEN = "open"  # ``[_STARTED, suite, _OPEN]`` is true while the suite runs


def _claim(marker: list[str]) -> bool:
    """On the worker: note on the scheduler that this branch starts, unless it already did.

    The scheduler runs a task again when its worker dies (``allowed-failures``,
    default 3); the second attempt finds the note and is refused, so a branch
    never pays for its LLM calls twice. One attempt at a time exists, so
    reading then writing is enough. A suite that has ended starts nothing.
    """
    from distributed import get_client, get_worker

    client: Any = get_client()
    if _suite_over(marker[:2]):
        return False
    if client.get_metadata(marker, None) is not None:
        return False
    client.set_metadata(marker, get_worker().address)
    return True


def _suite_over(suite: list[str]) -> bool:
    """On the worker: whether the caller ended the suite (done, cancelled, Ctrl-C)."""
    from distributed import get_client

    try:
        client: Any = get_client()
        return not client.get_metadata([*suite, _OPEN], False)
    except Exception:  # the suite's notes were dropped: it is over
        return True


def _run_on_dask(job: bytes, prefix: bytes, marker: list[str]) -> bytes:
    # ``prefix`` is the broadcast bytes, already in this worker's memory: no transfer, and the
    # events are unpickled once per worker process (run_branch_job caches them by key).
    # Dask cannot stop a running task: the run looks at the suite's notes every few seconds
    # and ends itself once the caller has ended the suite.
    return run_branch_job(
        job,
        lambda: prefix,
        claim=lambda: _claim(marker),
        cancelled=lambda: _suite_over(marker[:2]),
    )


def _check_options(
    resources: Mapping[str, float] | None,
    workers: str | Sequence[str] | None,
    priority: int,
) -> None:
    if resources is not None:
        if not isinstance(resources, Mapping) or not all(
            isinstance(name, str)
            and isinstance(amount, int | float)
            and not isinstance(amount, bool)
            and amount > 0
            for name, amount in resources.items()
        ):
            raise InvalidValueError(
                "resources must map resource names to positive amounts, e.g. {'GPU': 1}, "
                f"got {resources!r}"
            )
    if workers is not None and not (
        isinstance(workers, str)
        or (
            isinstance(workers, Sequence)
            and workers
            and all(isinstance(worker, str) for worker in workers)
        )
    ):
        raise InvalidValueError(
            f"workers must be a worker address or name, or a list of them, got {workers!r}"
        )
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidTypeError(f"priority must be an int, got {type(priority).__name__}")


class DaskExecutor:
    """Runs branches on the workers of a Dask ``distributed.Client``.

    The shared history is broadcast to every worker once
    (``client.scatter([bytes], broadcast=True)``); each branch is a task that
    gets it by reference plus its own pickled job (cloudpickle, so tools
    defined in ``__main__`` travel by value). Tasks are submitted with
    ``retries=0`` and at most ``max_in_flight`` at a time (default: twice the
    cluster's threads).

    Exactly once, under any ``allowed-failures``: before its first LLM call a
    branch notes on the scheduler that it started. If its worker dies, the
    scheduler's next attempt finds the note and is refused: the branch fails
    with a :class:`~cowconv.BranchLostError` ("died while running it")
    instead of paying for its LLM calls twice. A branch whose worker died
    before it started is run by the scheduler elsewhere, as any task; if the
    scheduler gives it up (``allowed-failures`` 0), it is submitted once
    more, since it never ran.

    In a ``with`` block the executor keeps the histories it scattered for
    later suites of the same conversation (released when the block ends);
    otherwise each suite releases its own.

    ``resources``, ``workers`` (addresses or names) and ``priority`` go to
    every task (``client.submit``); they are checked here, not when the
    first branch fails. ``grace`` (default 60): the seconds a branch whose
    worker does not answer is waited for past its time limit (twice its
    limit from its submission, as it may queue behind another) before it is
    given up and its task cancelled.

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
        resources: Mapping[str, float] | None = None,
        workers: str | Sequence[str] | None = None,
        priority: int = 0,
        grace: float = 60.0,
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
        _check_options(resources, workers, priority)
        self.grace = check_grace(grace)
        self.client = client
        # distributed is not fully typed: talk to it through Any.
        self._client: Any = cast(Any, client)
        self.max_in_flight = max_in_flight
        self.ship_api_keys = ship_api_keys
        self.progress = progress
        self.resources = dict(resources) if resources is not None else None
        self.workers = workers if workers is None or isinstance(workers, str) else list(workers)
        self.priority = priority
        self._shared: dict[str, Any] = {}
        self._keep = False  # keep the scattered histories between suites (``with`` block)

    def close(self) -> None:
        """Release the histories kept scattered on the workers for later suites.

        >>> DaskExecutor.close.__name__
        'close'
        """
        self._keep = False
        shared, self._shared = self._shared, {}
        for future in shared.values():
            future.release()

    def __enter__(self) -> DaskExecutor:
        self._keep = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run_jobs(
        self,
        prefix: SharedPrefix,
        jobs: Sequence[BranchJob],
        *,
        deadline: float | None = None,
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Broadcast the prefix, run every job as a task; yield each result as it ends.

        ``deadline`` (a :func:`time.monotonic` value) ends the suite. A task
        given up (its time limit, the suite's, Ctrl-C) is cancelled; Dask
        cannot stop a running task, so a branch still running when the suite
        ends (Ctrl-C) sees that on the scheduler within seconds and ends itself.
        """
        import cloudpickle
        from distributed import wait as _wait

        wait: Any = _wait

        if not jobs:
            return
        client = self._client
        suite = uuid.uuid4().hex
        packed: list[bytes] = []

        def scatter() -> Any:
            if not packed:
                packed.append(prefix.dumps())
            # A list of one: scatter splits sequences; hash=False: naming it would pickle it again.
            [future] = client.scatter([packed[0]], broadcast=True, hash=False)
            return future

        # The prefix scattered by an earlier suite of the same history is still on the workers.
        shared: Any = self._shared.get(prefix.key)
        if shared is None or shared.status != "finished":
            shared = self._shared[prefix.key] = scatter()
        while len(self._shared) > 4:
            self._shared.pop(next(iter(self._shared))).release()
        limit = self.max_in_flight or 2 * max(1, sum(client.nthreads().values()))
        options: dict[str, Any] = {"retries": 0, "pure": False, "priority": self.priority}
        if self.resources is not None:
            options["resources"] = self.resources
        if self.workers is not None:
            options["workers"] = self.workers
        jobs_of: dict[Any, tuple[BranchJob, bytes, list[str]]] = {}
        client.set_metadata([_STARTED, suite, _OPEN], True)

        def send(job: BranchJob, payload: bytes, attempt: int) -> Any:
            nonlocal shared
            if shared.status != "finished":
                # A dying worker can take the scattered prefix with it (Dask then reports it
                # lost, replicas or not): send it again for the jobs still to come.
                shared = self._shared[prefix.key] = scatter()
            marker = [_STARTED, suite, f"{job.index}-{attempt}"]
            future = client.submit(
                _run_on_dask,
                payload,
                shared,
                marker,
                key=f"cowconv-branch-{suite}-{job.index}-{attempt}",
                **options,
            )
            jobs_of[future] = (job, payload, marker)
            return future

        def submit(job: BranchJob) -> Any:
            return send(job, job.dumps(cloudpickle.dumps), 0)

        def wait_any(handles: list[Any], timeout: float | None) -> Any:
            try:
                return wait(handles, timeout=timeout, return_when="FIRST_COMPLETED").done
            except TimeoutError:
                return ()
            except Exception as error:
                # Dask's wait() raises when a future it waited for was cancelled (its worker
                # died with the scattered history it read, or another client cancelled it):
                # that ends one branch, which collect() names, not the suite.
                if type(error).__name__ not in _WORKER_GONE:
                    raise
                return [handle for handle in handles if handle.status != "pending"]

        def collect(future: Any) -> bytes:
            job, payload, marker = jobs_of.pop(future)
            try:
                result: bytes = future.result()
                return result
            except Exception as error:
                started = client.get_metadata(marker, None)
                if started is not None:
                    # Its worker died mid-run: Dask says KilledWorker, or cancels the task
                    # ("already forgotten") when the scattered history it read died too.
                    if type(error).__name__ not in _WORKER_GONE:
                        raise
                    raise BranchLostError(
                        job.index,
                        str(job.conversation_id),
                        f"its Dask worker {started} died while running it; it was not run "
                        f"again ({error})",
                    ) from None
                if marker[-1].endswith("-0"):
                    # Never started (the scheduler gave up on it while it was queued, or its
                    # copy of the shared history was lost with a worker): no LLM call was
                    # made, so it is safe to run, once more.
                    logger.info(
                        "branch %d never started (%s: %s): resubmitted",
                        job.index,
                        type(error).__name__,
                        error,
                    )
                    again = send(job, payload, 1)
                    return collect(wait_for(again))
                if type(error).__name__ not in _WORKER_GONE:
                    raise
                raise BranchLostError(
                    job.index,
                    str(job.conversation_id),
                    f"its Dask workers died twice before it started; it never ran ({error})",
                ) from None
            finally:
                future.release()

        def wait_for(future: Any) -> Any:
            try:
                wait([future])
            except Exception as error:  # cancelled: collect() reads why from the future
                if type(error).__name__ not in _WORKER_GONE:
                    raise
            return future

        def cancel(future: Any) -> None:
            jobs_of.pop(future, None)
            future.cancel()

        try:
            yield from drive(
                jobs,
                submit=submit,
                wait_any=wait_any,
                collect=collect,
                max_in_flight=limit,
                progress=self.progress,
                description="branches (Dask)",
                cancel=cancel,
                deadline=deadline,
                grace=self.grace,
                queued_runs=2,
            )
        finally:
            for future in list(jobs_of):
                cancel(future)
            try:
                # The suite's notes, dropped: a branch still running on a worker (cancelled:
                # Dask cannot stop it) sees that and ends itself.
                client.set_metadata([_STARTED, suite], None)
                if not self._keep:
                    self.close()
            except Exception as error:  # a closed client: nothing left to tidy
                logger.debug("could not drop the suite's notes on the scheduler: %s", error)
