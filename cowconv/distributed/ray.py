"""``RayExecutor``: branch suites on a Ray cluster (``pip install 'cowconv[ray]'``).

>>> RayExecutor(num_cpus=1).options
{'num_cpus': 1, 'max_retries': 0}
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from cowconv._exceptions import (
    BranchLostError,
    InvalidTypeError,
    InvalidValueError,
    ServiceError,
)
from cowconv.branches.wire import BranchJob, SharedPrefix
from cowconv.distributed.driver import check_grace, drive
from cowconv.distributed.worker import run_branch_job

__all__ = ["RayExecutor"]


def _run_on_ray(job: bytes, box: list[Any]) -> bytes:
    # The prefix's ObjectRef comes inside a list, so Ray does not fetch and unpickle it for
    # every task; the worker fetches it only the first time it sees this prefix.
    import ray

    return run_branch_job(job, lambda: ray.get(box[0]))


_remote: Any = None


def _task() -> Any:
    """The remote function, made once per process (importing Ray on first use)."""
    global _remote
    if _remote is None:
        try:
            import ray
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("RayExecutor needs Ray: pip install 'cowconv[ray]'") from error
        _remote = ray.remote(_run_on_ray)
    return _remote


class RayExecutor:
    """Runs branches as tasks on the Ray cluster this process is connected to (``ray.init``).

    The shared history is put in the object store once; each task gets a
    reference to it inside a list and a per-worker-process cache loads it at
    most once per worker. Each branch's job travels pickled with
    cloudpickle. ``options`` go to ``.options()`` of the remote function
    (``num_cpus``, ``resources``, ``runtime_env``...) and are checked here,
    as ``.options()`` checks them; ``max_retries`` is always 0 (Ray retries
    tasks 3 times by default, which would pay for a branch's LLM calls
    again): a task whose worker dies fails its branch
    (:class:`~cowconv.BranchLostError`). At most ``max_in_flight`` tasks are
    submitted at a time (default: twice the cluster's CPUs). A branch given
    up (its time limit, the suite's, Ctrl-C) is cancelled with
    ``ray.cancel(force=True)``, which ends its worker process. ``grace``
    (default 60): the seconds a branch whose worker does not answer is
    waited for past its time limit (twice its limit from its submission, as
    it may queue behind another) before it is given up and cancelled.

    Use: ``ray.init(...)``, then ``run_branches(source, branches,
    executor=RayExecutor(num_cpus=1))`` (see ``docs/distributed.md``).

    >>> RayExecutor(num_cpus=0.5, max_retries=3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: RayExecutor never retries a branch ...
    >>> RayExecutor(address="ray://head:10001")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: address= is not a task option: ...
    >>> RayExecutor(grace=float("nan"))
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: grace must be a finite number of seconds >= 0, got nan
    """

    def __init__(
        self,
        *,
        max_in_flight: int | None = None,
        ship_api_keys: bool = True,
        progress: bool | None = None,
        grace: float = 60.0,
        **options: Any,
    ) -> None:
        if options.get("max_retries", 0) != 0 or options.get("retry_exceptions"):
            raise InvalidValueError(
                "RayExecutor never retries a branch (a retry would repeat its LLM calls): "
                "leave out max_retries and retry_exceptions"
            )
        if "address" in options:
            raise InvalidValueError(
                "address= is not a task option: connect this process to the cluster first, "
                f"with ray.init(address={options['address']!r}), then use RayExecutor()"
            )
        if max_in_flight is not None and max_in_flight < 1:
            raise InvalidValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        grace = check_grace(grace)  # checked before Ray is asked about the options
        self.options = {**options, "max_retries": 0}
        try:
            _task().options(**self.options)
        except (ValueError, TypeError) as error:
            kind = InvalidTypeError if isinstance(error, TypeError) else InvalidValueError
            raise kind(f"Ray refuses these task options: {error}") from None
        self.max_in_flight = max_in_flight
        self.ship_api_keys = ship_api_keys
        self.progress = progress
        self.grace = grace

    def run_jobs(
        self,
        prefix: SharedPrefix,
        jobs: Sequence[BranchJob],
        *,
        deadline: float | None = None,
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Put the prefix once, run every job as a task; yield each result as it ends.

        ``deadline`` (a :func:`time.monotonic` value) ends the suite.
        """
        import cloudpickle
        import ray

        if not ray.is_initialized():
            raise ServiceError("RayExecutor runs on a Ray cluster: call ray.init(...) first")
        if not jobs:
            return
        task = _task().options(**self.options)
        box = [ray.put(prefix.dumps())]
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        limit = self.max_in_flight or 2 * max(1, int(resources.get("CPU", 1)))
        jobs_of: dict[Any, BranchJob] = {}

        def submit(job: BranchJob) -> Any:
            reference = task.remote(job.dumps(cloudpickle.dumps), box)
            jobs_of[reference] = job
            return reference

        def wait_any(handles: list[Any], timeout: float | None) -> list[Any]:
            done: list[Any] = ray.wait(handles, num_returns=1, timeout=timeout)[0]
            return done

        def collect(reference: Any) -> bytes:
            job = jobs_of.pop(reference)
            try:
                result: bytes = ray.get(reference)
            except ray.exceptions.WorkerCrashedError as error:
                raise BranchLostError(
                    job.index,
                    str(job.conversation_id),
                    f"its Ray worker died while running it; it was not run again ({error})",
                ) from None
            return result

        def cancel(reference: Any) -> None:
            jobs_of.pop(reference, None)
            ray.cancel(reference, force=True)

        try:
            yield from drive(
                jobs,
                submit=submit,
                wait_any=wait_any,
                collect=collect,
                max_in_flight=limit,
                progress=self.progress,
                description="branches (Ray)",
                cancel=cancel,
                deadline=deadline,
                grace=self.grace,
                queued_runs=2,
            )
        finally:
            del box[:]
