"""``ProcessExecutor`` (worker processes on this machine) and ``PicklingExecutor`` (threads).

>>> ProcessExecutor(max_workers=2).max_workers
2
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures import ProcessPoolExecutor as _Pool
from concurrent.futures.process import BrokenProcessPool

from cowconv._exceptions import InvalidValueError, ServiceError
from cowconv.branches.wire import BranchJob, SharedPrefix
from cowconv.distributed.driver import check_job_timeout, drive
from cowconv.distributed.worker import forget_prefix, run_branch_job

__all__ = ["PicklingExecutor", "ProcessExecutor"]

# The prefix a process-pool worker got when it started (its initializer's argument).
_shipped: bytes = b""


def _receive(prefix: bytes) -> None:
    global _shipped
    _shipped = prefix


def _shipped_prefix() -> bytes:
    return _shipped


def _run_in_process(job: bytes) -> bytes:
    return run_branch_job(job, _shipped_prefix)


def _check_workers(max_workers: int | None) -> None:
    if max_workers is not None and (isinstance(max_workers, bool) or max_workers < 1):
        raise InvalidValueError(f"max_workers must be at least 1, got {max_workers!r}")


class ProcessExecutor:
    """Runs branches in worker processes of this machine (no GIL between runs).

    Each worker process gets the shared history once, when it starts; each
    branch then travels alone (``pickle``). Every worker is its own
    one-process pool, so a worker that dies fails only the branch it was
    running (it is not run again) and is replaced for the rest. Workers are
    started with ``spawn`` (default; safe with threads) and stopped when the
    suite ends. ``progress``: a rich progress bar (``None``: when
    interactive). ``ship_api_keys=False`` leaves LLM keys out of the jobs:
    workers' litellm reads them from their environment. ``job_timeout``:
    seconds after which a branch still running fails (its worker process is
    killed and replaced; the branch is not run again).

    >>> from cowconv import LLM, Agent, Conversation, run_branches
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> run_branches(source, [], executor=ProcessExecutor(max_workers=2))
    []
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        ship_api_keys: bool = True,
        progress: bool | None = None,
        start_method: str = "spawn",
        job_timeout: float | None = None,
    ) -> None:
        _check_workers(max_workers)
        check_job_timeout(job_timeout)
        self.max_workers = max_workers or os.cpu_count() or 1
        self.ship_api_keys = ship_api_keys
        self.progress = progress
        self.job_timeout = job_timeout
        self._context = multiprocessing.get_context(start_method)

    def run_jobs(
        self, prefix: SharedPrefix, jobs: Sequence[BranchJob]
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Run ``jobs`` on up to ``max_workers`` processes; yield each result as it ends."""
        if not jobs:
            return
        data = prefix.dumps()
        slots: list[_Pool | None] = [None] * min(self.max_workers, len(jobs))
        running: dict[Future[bytes], int] = {}

        def submit(job: BranchJob) -> Future[bytes]:
            payload = job.dumps()
            slot = next(i for i in range(len(slots)) if i not in running.values())
            pool = slots[slot]
            if pool is None:
                pool = slots[slot] = _Pool(
                    1, mp_context=self._context, initializer=_receive, initargs=(data,)
                )
            future = pool.submit(_run_in_process, payload)
            running[future] = slot
            return future

        def collect(future: Future[bytes]) -> bytes:
            slot = running.pop(future)
            try:
                return future.result()
            except BrokenProcessPool:
                pool, slots[slot] = slots[slot], None
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)
                raise ServiceError(
                    "its worker process died while running it; it was not run again "
                    "(that would repeat its LLM calls)"
                ) from None

        def cancel(future: Future[bytes]) -> None:
            # A hung worker: kill its process (its pool holds nothing else) and replace it.
            slot = running.pop(future)
            pool, slots[slot] = slots[slot], None
            if pool is not None:
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.kill()
                pool.shutdown(wait=False, cancel_futures=True)

        try:
            yield from drive(
                jobs,
                submit=submit,
                wait_any=lambda handles, timeout: (
                    wait(handles, timeout, return_when=FIRST_COMPLETED).done
                ),
                collect=collect,
                max_in_flight=len(slots),
                progress=self.progress,
                description="branches (processes)",
                job_timeout=self.job_timeout,
                cancel=cancel,
            )
        finally:
            for pool in slots:
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)


class PicklingExecutor:
    """Runs branches in threads of this process, through the same bytes a cluster would get.

    Every job and result is pickled and unpickled exactly as it would travel
    to a Ray or Dask worker, and the shared history is unpickled once: a
    quick check that a suite can be shipped, and the wire format under test.

    >>> from cowconv import LLM, Agent, Conversation, run_branches
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> _ = source.send_message("hi")
    >>> executor = PicklingExecutor(max_workers=2)
    >>> forks = run_branches(source, [], executor=executor)
    >>> executor.bytes_sent, executor.bytes_received
    (0, 0)
    """

    def __init__(
        self,
        max_workers: int = 4,
        *,
        ship_api_keys: bool = True,
        progress: bool | None = False,
    ) -> None:
        _check_workers(max_workers)
        self.max_workers = max_workers
        self.ship_api_keys = ship_api_keys
        self.progress = progress
        self.bytes_sent = 0
        """Bytes of the last suite sent to the worker threads (the prefix once, the jobs)."""
        self.bytes_received = 0
        """Bytes of the last suite's results."""

    def run_jobs(
        self, prefix: SharedPrefix, jobs: Sequence[BranchJob]
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Run ``jobs`` in up to ``max_workers`` threads; yield each result as it ends."""
        self.bytes_sent = self.bytes_received = 0
        if not jobs:
            return
        data = prefix.dumps()
        self.bytes_sent = len(data)

        def submit(job: BranchJob) -> Future[bytes]:
            payload = job.dumps()
            self.bytes_sent += len(payload)
            return pool.submit(run_branch_job, payload, lambda: data)

        def collect(future: Future[bytes]) -> bytes:
            result = future.result()
            self.bytes_received += len(result)
            return result

        with ThreadPoolExecutor(self.max_workers, thread_name_prefix="cowconv-pickled") as pool:
            try:
                yield from drive(
                    jobs,
                    submit=submit,
                    wait_any=lambda handles, timeout: (
                        wait(handles, timeout, return_when=FIRST_COMPLETED).done
                    ),
                    collect=collect,
                    max_in_flight=self.max_workers,
                    progress=self.progress,
                    description="branches (pickled, in process)",
                )
            finally:
                forget_prefix(prefix.key)
