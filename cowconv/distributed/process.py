"""``ProcessExecutor`` (worker processes on this machine) and ``PicklingExecutor`` (threads).

>>> ProcessExecutor(max_workers=2).max_workers
2
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

from cowconv._exceptions import BranchLostError, InvalidValueError, ServiceError
from cowconv.branches.wire import BranchJob, SharedPrefix
from cowconv.core.llm import LLM
from cowconv.distributed.driver import check_grace, drive
from cowconv.distributed.worker import CACHE_SIZE, forget_prefix, has_prefix, run_branch_job

__all__ = ["PicklingExecutor", "ProcessExecutor"]

_NEED_PREFIX = "need-prefix"
_READY = "ready"


def _constant(value: bytes) -> Callable[[], bytes]:
    return lambda: value


def _serve(connection: Connection, environ: dict[str, str]) -> None:
    """A worker process: run the jobs it is sent, one at a time, until told to stop.

    ``environ`` is the caller's environment when it started this process (a fork server's
    children would otherwise see the environment of when the fork server started). Each
    message is ``(job bytes, prefix key, prefix bytes or None)``; the
    prefix comes only when the caller does not know this process to hold it
    already. Answers ``("done", outcome bytes)``, ``("need-prefix",)`` when
    it was not sent but is not (or no longer) cached here, or ``("error", text)``.
    """
    os.environ.clear()
    os.environ.update(environ)
    LLM.preload()  # warm up before the first job: its time limit counts the run alone
    connection.send((_READY,))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job, key, data = message
        if data is None and not has_prefix(key):
            connection.send((_NEED_PREFIX,))
            continue
        try:
            result = run_branch_job(job, _constant(data if data is not None else b""))
            answer: tuple[str, object] = ("done", result)
        except Exception as error:
            answer = ("error", f"{type(error).__name__}: {error}")
        try:
            connection.send(answer)
        except OSError:
            # The caller is gone (killed): a branch of a recorded suite was committed to its
            # store by run_branch_job already; nothing else is waiting for it.
            return


# What the fork server imports before it forks any worker: ``preload`` imports cowconv's
# worker and litellm as a branch run would.
_PRELOAD = ["cowconv.distributed.preload"]


def _context(start_method: str | None) -> BaseContext:
    """The multiprocessing context workers start in (see :class:`ProcessExecutor`)."""
    if start_method is None:
        methods = multiprocessing.get_all_start_methods()
        start_method = "forkserver" if "forkserver" in methods else "spawn"
    try:
        context = multiprocessing.get_context(start_method)
    except ValueError as error:
        raise InvalidValueError(f"start_method: {error}") from None
    if start_method == "forkserver":
        # The list of this process's one fork server, read when it starts: once it runs
        # (started here earlier, or by other code), workers import what they need themselves.
        context.set_forkserver_preload(_PRELOAD)
    return context


def _check_workers(max_workers: int | None) -> None:
    if max_workers is not None and (isinstance(max_workers, bool) or max_workers < 1):
        raise InvalidValueError(f"max_workers must be at least 1, got {max_workers!r}")


class _Worker:
    """One worker process, its end of the pipe, and the prefixes the caller sent it."""

    def __init__(self, context: BaseContext) -> None:
        ours, theirs = context.Pipe()
        self.connection = ours
        self.process: BaseProcess = context.Process(  # type: ignore[attr-defined]
            target=_serve,
            args=(theirs, dict(os.environ)),
            name="cowconv-branch-worker",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self.prefixes: OrderedDict[str, None] = OrderedDict()
        self.job: tuple[BranchJob, bytes] | None = None
        self.ready = False

    def wait_ready(self) -> None:
        """Wait until the process has started and imported what a run needs."""
        while not self.ready:
            try:
                answer = self.connection.recv()
            except (EOFError, OSError):
                self.kill()
                raise ServiceError(
                    f"a worker process exited while starting (exit code {self.process.exitcode})"
                ) from None
            self.ready = answer[0] == _READY

    def send(self, job: BranchJob, payload: bytes, key: str, data: bytes | None) -> None:
        self.job = (job, payload)
        self.connection.send((payload, key, data))
        if data is not None:
            self.prefixes[key] = None
            while len(self.prefixes) > CACHE_SIZE:
                self.prefixes.popitem(last=False)
        else:
            self.prefixes.move_to_end(key)

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(30)
        self.connection.close()

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except OSError:
            pass
        self.process.join(10)
        self.kill()


class ProcessExecutor:
    """Runs branches in worker processes of this machine (no GIL between runs).

    Each branch travels alone (``pickle``); the shared history goes to a
    worker process only if that process does not hold it yet (the history is
    keyed by its content, so a later suite of the same conversation sends
    none). A worker that dies fails only the branch it was running (it is not
    run again) and is replaced for the rest.

    Workers are started from multiprocessing's fork server where the platform has one
    (``start_method="forkserver"``, the default there; else ``"spawn"``; both are safe with
    threads). The fork server imports cowconv's worker and litellm once
    (:mod:`cowconv.distributed.preload`), so a new worker costs a ``fork``, not seconds of
    imports; it starts with the caller's environment and working directory of that moment,
    as a spawned one does. ``start_method="spawn"`` starts each from a new interpreter.

    Used as a context manager, the executor keeps its worker processes
    between suites (warm: cowconv and litellm imported, histories loaded)
    until the block ends; otherwise they are stopped when each suite ends.
    ``progress``: a rich progress bar (``None``: when interactive).
    ``ship_api_keys=False`` leaves LLM keys out of the jobs: workers'
    litellm reads them from their environment. ``bytes_sent`` and
    ``prefix_bytes_sent`` count what the last suite sent. ``grace``: seconds
    past a branch's time limit to wait for a worker process that does not
    answer (a stopped or hung one) before the branch is given up and the
    process killed.

    >>> from cowconv import LLM, Agent, Conversation, run_branches
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> with ProcessExecutor(max_workers=2) as executor:
    ...     run_branches(source, [], executor=executor)
    []
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        ship_api_keys: bool = True,
        progress: bool | None = None,
        start_method: str | None = None,
        grace: float = 5.0,
    ) -> None:
        _check_workers(max_workers)
        self.grace = check_grace(grace)
        self.max_workers = max_workers or os.cpu_count() or 1
        self.ship_api_keys = ship_api_keys
        self.progress = progress
        self._context = _context(start_method)
        self._workers: list[_Worker] = []
        self._warm = False
        self._busy = threading.Lock()
        self.bytes_sent = 0
        """Bytes the last suite sent to the workers (jobs and prefixes)."""
        self.prefix_bytes_sent = 0
        """Bytes of shared history the last suite sent (0: every worker held it)."""

    def __enter__(self) -> ProcessExecutor:
        self._warm = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (a later suite starts new ones)."""
        self._warm = False
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()

    @property
    def worker_pids(self) -> tuple[int | None, ...]:
        """The process ids of the workers running now (kept between suites when warm)."""
        return tuple(worker.process.pid for worker in self._workers if worker.alive())

    def run_jobs(
        self,
        prefix: SharedPrefix,
        jobs: Sequence[BranchJob],
        *,
        deadline: float | None = None,
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Run ``jobs`` on up to ``max_workers`` processes; yield each result as it ends.

        ``deadline`` (a :func:`time.monotonic` value) ends the suite; a branch
        past its own time limit, or the suite's, has its worker process killed.
        """
        self.bytes_sent = self.prefix_bytes_sent = 0
        if not jobs:
            return
        if not self._busy.acquire(blocking=False):
            raise ServiceError("this ProcessExecutor is running another suite")
        packed: list[bytes] = []

        def data() -> bytes:
            if not packed:
                packed.append(prefix.dumps())
            return packed[0]

        idle = [w for w in self._workers if w.alive()]
        # Start the workers this suite needs together, and let them warm up (spawn, imports)
        # before any job is sent: a job's time limit counts its run, not a process start.
        wanted = min(self.max_workers, len(jobs)) - len(idle)
        idle.extend(_Worker(self._context) for _ in range(max(0, wanted)))
        self._workers = list(idle)
        for worker in list(idle):
            try:
                worker.wait_ready()
            except ServiceError:
                idle.remove(worker)
                self._workers.remove(worker)
        busy: set[_Worker] = set()

        def submit(job: BranchJob) -> _Worker:
            payload = job.dumps()
            # Prefer a worker that holds this prefix already.
            idle.sort(key=lambda w: prefix.key not in w.prefixes)
            if idle:
                worker = idle.pop(0)
            else:
                worker = _Worker(self._context)  # replaces one that died or was given up
                self._workers.append(worker)
                worker.wait_ready()
            sent = None if prefix.key in worker.prefixes else data()
            worker.send(job, payload, prefix.key, sent)
            self.bytes_sent += len(payload) + (len(sent) if sent is not None else 0)
            self.prefix_bytes_sent += len(sent) if sent is not None else 0
            busy.add(worker)
            return worker

        def wait_any(handles: list[_Worker], timeout: float | None) -> list[_Worker]:
            ready = set(
                wait(
                    [w.connection for w in handles] + [w.process.sentinel for w in handles], timeout
                )
            )
            return [w for w in handles if w.connection in ready or w.process.sentinel in ready]

        def retire(worker: _Worker) -> None:
            busy.discard(worker)
            worker.kill()
            if worker in self._workers:
                self._workers.remove(worker)

        def collect(worker: _Worker) -> bytes:
            while True:
                try:
                    answer = worker.connection.recv()
                except (EOFError, OSError):
                    retire(worker)
                    raise BranchLostError(
                        worker.job[0].index if worker.job else -1,
                        str(worker.job[0].conversation_id) if worker.job else "",
                        "its worker process died while running it; it was not run again "
                        "(that would repeat its LLM calls)",
                    ) from None
                if answer[0] == _NEED_PREFIX and worker.job is not None:
                    job, payload = worker.job
                    sent = data()
                    worker.send(job, payload, prefix.key, sent)
                    self.bytes_sent += len(sent)
                    self.prefix_bytes_sent += len(sent)
                    continue
                busy.discard(worker)
                idle.append(worker)
                if answer[0] == "error":
                    raise ServiceError(f"the worker process could not run it: {answer[1]}")
                result: bytes = answer[1]
                return result

        try:
            yield from drive(
                jobs,
                submit=submit,
                wait_any=wait_any,
                collect=collect,
                max_in_flight=self.max_workers,
                progress=self.progress,
                description="branches (processes)",
                cancel=retire,
                deadline=deadline,
                grace=self.grace,
            )
        finally:
            for worker in list(busy):
                retire(worker)  # a branch given up or cancelled: its process goes with it
            if not self._warm:
                self.close()
            self._busy.release()


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
        self.prefix_bytes_sent = 0
        """Bytes of shared history the last suite sent (once per suite)."""

    def run_jobs(
        self,
        prefix: SharedPrefix,
        jobs: Sequence[BranchJob],
        *,
        deadline: float | None = None,
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        """Run ``jobs`` in up to ``max_workers`` threads; yield each result as it ends.

        A branch past its time limit is cut off by its worker thread (which
        cannot be killed: a hung call holds it until the call ends).
        """
        self.bytes_sent = self.bytes_received = self.prefix_bytes_sent = 0
        if not jobs:
            return
        data = prefix.dumps()
        self.bytes_sent = self.prefix_bytes_sent = len(data)

        def submit(job: BranchJob) -> Future[bytes]:
            payload = job.dumps()
            self.bytes_sent += len(payload)
            return pool.submit(run_branch_job, payload, lambda: data)

        def collect(future: Future[bytes]) -> bytes:
            result = future.result()
            self.bytes_received += len(result)
            return result

        pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="cowconv-pickled")
        try:
            yield from drive(
                jobs,
                submit=submit,
                wait_any=lambda handles, timeout: (
                    wait_futures(handles, timeout, FIRST_COMPLETED).done
                ),
                collect=collect,
                max_in_flight=self.max_workers,
                progress=self.progress,
                description="branches (pickled, in process)",
                cancel=lambda future: future.cancel(),
                deadline=deadline,
            )
        finally:
            # Not waiting: a cancelled suite returns now (a run cut off at its limit is left
            # to its thread).
            pool.shutdown(wait=False, cancel_futures=True)
            forget_prefix(prefix.key)
