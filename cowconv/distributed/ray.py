"""``RayExecutor``: branch suites on a Ray cluster (``pip install 'cowconv[ray]'``).

>>> RayExecutor(num_cpus=1).options
{'num_cpus': 1, 'max_retries': 0}
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from cowconv._exceptions import InvalidValueError, ServiceError
from cowconv.branches.wire import BranchJob, SharedPrefix
from cowconv.distributed.driver import check_job_timeout, drive
from cowconv.distributed.worker import run_branch_job

__all__ = ["RayExecutor"]


def _run_on_ray(job: bytes, box: list[Any]) -> bytes:
    # The prefix's ObjectRef comes inside a list, so Ray does not fetch and unpickle it for
    # every task; the worker fetches it only the first time it sees this prefix.
    import ray

    return run_branch_job(job, lambda: ray.get(box[0]))


_remote: Any = None


class RayExecutor:
    """Runs branches as tasks on the Ray cluster this process is connected to (``ray.init``).

    The shared history is put in the object store once; each task gets a
    reference to it inside a list and a per-worker-process cache loads it at
    most once per worker. Each branch's job travels pickled with
    cloudpickle. ``options`` go to ``.options()`` of the remote function
    (``num_cpus``, ``resources``, ``runtime_env``...); ``max_retries`` is
    always 0 (Ray retries tasks 3 times by default, which would pay for a
    branch's LLM calls again): a task whose worker dies fails its branch. At
    most ``max_in_flight`` tasks are submitted at a time (default: twice the
    cluster's CPUs).

    Use: ``ray.init(...)``, then ``run_branches(source, branches,
    executor=RayExecutor(num_cpus=1))`` (see ``docs/distributed.md``).

    >>> RayExecutor(num_cpus=0.5, max_retries=3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: RayExecutor never retries a branch ...
    """

    def __init__(
        self,
        *,
        max_in_flight: int | None = None,
        ship_api_keys: bool = True,
        progress: bool | None = None,
        job_timeout: float | None = None,
        **options: Any,
    ) -> None:
        check_job_timeout(job_timeout)
        self.job_timeout = job_timeout
        if options.get("max_retries", 0) != 0 or options.get("retry_exceptions"):
            raise InvalidValueError(
                "RayExecutor never retries a branch (a retry would repeat its LLM calls): "
                "leave out max_retries and retry_exceptions"
            )
        if max_in_flight is not None and max_in_flight < 1:
            raise InvalidValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.options = {**options, "max_retries": 0}
        self.max_in_flight = max_in_flight
        self.ship_api_keys = ship_api_keys
        self.progress = progress

    def run_jobs(
        self, prefix: SharedPrefix, jobs: Sequence[BranchJob]
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Put the prefix once, run every job as a task; yield each result as it ends."""
        global _remote
        try:
            import cloudpickle
            import ray
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("RayExecutor needs Ray: pip install 'cowconv[ray]'") from error
        if not ray.is_initialized():
            raise ServiceError("RayExecutor runs on a Ray cluster: call ray.init(...) first")
        if not jobs:
            return
        if _remote is None:
            _remote = ray.remote(_run_on_ray)
        task = _remote.options(**self.options)
        box = [ray.put(prefix.dumps())]
        resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        limit = self.max_in_flight or 2 * max(1, int(resources.get("CPU", 1)))

        def collect(reference: Any) -> bytes:
            try:
                result: bytes = ray.get(reference)
            except ray.exceptions.WorkerCrashedError as error:
                raise ServiceError(
                    f"its Ray worker died while running it; it was not run again ({error})"
                ) from None
            return result

        try:
            yield from drive(
                jobs,
                submit=lambda job: task.remote(job.dumps(cloudpickle.dumps), box),
                wait_any=lambda handles, timeout: ray.wait(handles, num_returns=1, timeout=timeout)[
                    0
                ],
                collect=collect,
                max_in_flight=limit,
                progress=self.progress,
                description="branches (Ray)",
                job_timeout=self.job_timeout,
                # A hung task: force kills its worker process (the branch is not run again).
                cancel=lambda reference: ray.cancel(reference, force=True),
            )
        finally:
            del box[:]
