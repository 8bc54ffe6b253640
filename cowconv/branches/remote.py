"""Branch suites of a conversation kept by an agent server: the forks, runs and results stay there.

``run_branches(source, branches)`` with a :class:`~cowconv.RemoteConversation`
forks on the server (each branch's agent, title and tags go in the fork
request), sends each fork its message there and has the server run it: in
this process's threads, or from an executor's workers, which attach to the
fork by id and wait for its run (:class:`RemoteBranchJob`: a few hundred
bytes, no history). What a run does is recorded on the server, where any
process reads it.

With ``suite_id``, every fork gets an id derived from the source, the suite
and its index, and the tags ``cowconvsuite`` (the suite id),
``cowconvbranch`` (``index/size``) and ``cowconvmessage`` (a digest of its
message): the server's conversations are the suite's ledger. A resume (from
any process, the first one killed) reads each fork's state there: a fork that
ran (or runs now) is not run again, one that never started runs.

>>> suite_fork_id("3c199340-32ca-4abd-a1a6-000000000002", "plans", 0) == suite_fork_id(
...     "3c199340-32ca-4abd-a1a6-000000000002", "plans", 0)
True
>>> branch_tags("plans", 2, 20, "Be bold.")["cowconvbranch"]
'2/20'
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cowconv._exceptions import (
    BranchError,
    ConversationRunError,
    InvalidValueError,
    RemoteError,
    SuiteExistsError,
    SuiteNotFoundError,
)
from cowconv.backends.remote import CONVERSATIONS_PATH, RemoteBackend, answer_json, send_request
from cowconv.branches.wire import BranchOutcome, SharedPrefix, pickled
from cowconv.conversation import _AGENT_FORKS_ON_SERVER, Conversation, RemoteConversation
from cowconv.core.agent import Agent
from cowconv.core.events import MessageEvent
from cowconv.core.history import EventLog
from cowconv.core.state import ExecutionStatus
from cowconv.core.waits import first_done
from cowconv.core.workspace import Workspace
from cowconv.ports import BranchExecutor, EventCallback, notify

__all__ = [
    "BRANCH_TAG",
    "MESSAGE_TAG",
    "SUITE_TAG",
    "RemoteBranchJob",
    "RemoteSuite",
    "branch_tags",
    "find_suite",
    "is_remote",
    "message_digest",
    "run_remote_job",
    "suite_fork_id",
]

SUITE_TAG = "cowconvsuite"
"""The tag naming a fork's suite (OpenHands' tag keys are lowercase letters and digits)."""
BRANCH_TAG = "cowconvbranch"
"""The tag giving a fork's branch as ``index/size``."""
MESSAGE_TAG = "cowconvmessage"
"""The tag holding a digest of the branch's message (:func:`message_digest`)."""

_Ended = tuple[int, BaseException | None, float | None, str | None]
"""A branch that ended: its index, its error, its run's wall time, the worker that drove it."""

_NAMESPACE = uuid.UUID("6f1c2a52-8f0e-4d53-9a43-2b9f3c0b6e11")
_POLL = 0.5  # seconds between two looks at a run another process started
_DONE = frozenset(
    s for s in ExecutionStatus if s not in (ExecutionStatus.IDLE, ExecutionStatus.RUNNING)
)


def is_remote(conversation: object) -> bool:
    """Whether ``conversation`` is kept by an agent server (a remote backend).

    >>> from cowconv import LLM, Agent, Conversation
    >>> is_remote(Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace="."))
    False
    """
    return isinstance(getattr(conversation, "backend", None), RemoteBackend)


def suite_fork_id(source_id: object, suite_id: str, index: int) -> str:
    """The id of branch ``index``'s fork in suite ``suite_id`` of ``source_id`` (a UUID).

    The same in every process: a resume finds the forks by id.

    >>> suite_fork_id("c-1", "s", 0) != suite_fork_id("c-1", "s", 1)
    True
    """
    return str(uuid.uuid5(_NAMESPACE, f"{source_id}\n{suite_id}\n{index}"))


def message_digest(message: str) -> str:
    """A short digest of a branch's message, kept in a tag (values may be 256 characters).

    >>> len(message_digest("Be bold."))
    16
    """
    return hashlib.sha256(message.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def branch_tags(suite_id: str, index: int, size: int, message: str) -> dict[str, str]:
    """The tags that record branch ``index`` of ``size`` of suite ``suite_id`` on its fork.

    >>> sorted(branch_tags("s", 0, 2, "Hi."))
    ['cowconvbranch', 'cowconvmessage', 'cowconvsuite']
    """
    return {
        SUITE_TAG: suite_id,
        BRANCH_TAG: f"{index}/{size}",
        MESSAGE_TAG: message_digest(message),
    }


@dataclass(frozen=True)
class RemoteBranchJob:
    """One branch of a remote suite as it travels to a worker: where its fork is, nothing more.

    The worker attaches to the fork on the server, starts its run there
    (unless it already ended) and waits for its end (:func:`run_remote_job`).

    >>> job = RemoteBranchJob(0, "c-1", "http://127.0.0.1:8000", ".", None)
    >>> len(job.dumps()) < 1000
    True
    """

    index: int
    conversation_id: str
    host: str
    working_dir: str
    api_key: str | None
    timeout: float | None = None
    """Unused (a remote suite takes no time limits); read by the executors' drivers."""

    def dumps(self, dumps: Callable[[Any], bytes] = pickled) -> bytes:
        """This job as bytes for a worker."""
        return dumps(self)


def run_remote_job(
    job: RemoteBranchJob,
    claim: Callable[[], bool] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> bytes:
    """Run a remote branch from a worker; the pickled :class:`BranchOutcome` (nothing of its
    events: they are on the server).

    ``committed`` is set: the outcome is on the server already. A fork whose
    run ended before (a resumed suite) is not run again.
    """
    worker = f"{socket.gethostname()}:{os.getpid()}"
    if claim is not None and not claim():
        return pickled(
            BranchOutcome.failed(
                job.index,
                "the engine tried to run it a second time: refused (it runs on the server)",
                "lost",
            )
        )
    started = time.perf_counter()
    try:
        fork = RemoteConversation.attach(
            job.host, job.conversation_id, api_key=job.api_key, working_dir=job.working_dir
        )
    except Exception as error:
        return pickled(BranchOutcome.failed(job.index, f"{type(error).__name__}: {error}"))
    try:
        status = _run_once(fork)
    except Exception as error:
        return pickled(BranchOutcome.failed(job.index, f"{type(error).__name__}: {error}"))
    finally:
        fork.close()
    return pickled(
        BranchOutcome(
            index=job.index,
            execution_status=status,
            wall_seconds=time.perf_counter() - started,
            worker=worker,
            committed=True,
        )
    )


def _run_once(fork: Conversation) -> ExecutionStatus:
    """Run ``fork`` on its server unless its run ended or goes on already; its status at the end.

    A run going on (started by a process now gone) is waited for, never
    started again: that would repeat its LLM calls.
    """
    status = fork.state.execution_status
    if status is ExecutionStatus.IDLE:
        try:
            fork.run()
        except ConversationRunError:
            pass  # ended in error or stuck: recorded on the fork, read below
        return fork.state.execution_status
    while status is ExecutionStatus.RUNNING:
        time.sleep(_POLL)
        status = fork.state.execution_status
    return status


def find_suite(workspace: Workspace, suite_id: str) -> dict[int, str]:
    """The forks of suite ``suite_id`` on the server of ``workspace``, by branch index.

    Read from the conversations' tags (OpenHands' ``GET /search``, page by
    page). :class:`~cowconv.SuiteNotFoundError` if none has them; a
    :class:`~cowconv.SuiteExistsError` if two sources' suites share the id.
    """
    probe = _ServerClient(workspace)
    try:
        found: dict[int, str] = {}
        sizes: set[int] = set()
        page: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 100}
            if page is not None:
                params["page_id"] = page
            answer = answer_json(
                send_request(probe.client, "GET", f"{CONVERSATIONS_PATH}/search", params=params)
            )
            for item in answer.get("items") or () if isinstance(answer, dict) else ():
                tags = item.get("tags") or {} if isinstance(item, dict) else {}
                if tags.get(SUITE_TAG) != suite_id:
                    continue
                index, _, size = str(tags.get(BRANCH_TAG, "")).partition("/")
                if not (index.isdigit() and size.isdigit()):
                    continue
                if int(index) in found:
                    raise SuiteExistsError(
                        f"two suites {suite_id!r} on {workspace.host} (branch {index} twice): "
                        "resume with run_branches(source, branches, suite_id=..., resume=True)"
                    )
                found[int(index)] = str(item["id"])
                sizes.add(int(size))
            page = answer.get("next_page_id") if isinstance(answer, dict) else None
            if not page:
                break
    finally:
        probe.close()
    if not found:
        raise SuiteNotFoundError(f"the agent server {workspace.host} has no suite {suite_id!r}")
    for position in range(max(sizes)):
        found.setdefault(position, "")
    return dict(sorted(found.items()))


class _ServerClient:
    """An HTTP client to an agent server, for requests outside a conversation."""

    def __init__(self, workspace: Workspace) -> None:
        self.client = workspace.new_client()

    def close(self) -> None:
        self.client.close()


@dataclass
class RemoteSuite:
    """The forks of a suite on an agent server, and how to run them (see the module)."""

    forks: list[Conversation]
    executor: BranchExecutor | None
    max_workers: int | None
    todo: list[int]
    """Branches whose fork never started a run: run now."""
    watch: list[int] = field(default_factory=list)
    """Branches whose run goes on on the server (started by a process now gone): waited for."""
    known: list[int] = field(default_factory=list)
    """Branches whose run had ended: not run again."""
    missing: dict[int, str] = field(default_factory=dict)
    """Branches that cannot run, and why (a resumed suite whose fork lacks its message)."""
    fatal: list[BaseException] = field(default_factory=list)

    @property
    def remote(self) -> bool:
        """Whether the runs are driven from an executor's workers."""
        return self.executor is not None

    @classmethod
    def start(
        cls,
        source: Conversation,
        messages: Sequence[str],
        agents: Sequence[Agent | None],
        titles: Sequence[str | None],
        tags: Sequence[Mapping[str, str] | None],
        *,
        from_event_id: str | None,
        reset_metrics: bool,
        max_workers: int | None,
        executor: BranchExecutor | None,
        callbacks: Iterable[EventCallback],
        workspace: object,
        suite_id: str | None,
        resume: bool,
    ) -> RemoteSuite:
        """Fork ``source`` on its server once per branch (or find the forks a suite made),
        send each its message there; nothing runs yet.

        Whatever cannot be done is refused here, before the first fork and LLM call.
        """
        backend = source.backend
        assert isinstance(backend, RemoteBackend)
        callbacks = tuple(callbacks)
        if workspace is not None and not backend.speaks_cowconv:
            raise InvalidValueError(
                "OpenHands' agent server cannot give a fork its own copy of the files: leave "
                "out workspace= (the forks share the source's directory there)"
            )
        if not backend.speaks_cowconv:
            for agent in agents:
                if agent is not None:
                    backend.openhands_fork_plan(agent, from_event_id)  # raises if it cannot
        size = len(messages)
        ids: list[str | None] = [None] * size
        found: dict[int, Conversation] = {}
        if suite_id is not None:
            ids = [suite_fork_id(source.id, suite_id, index) for index in range(size)]
            for index, fork_id in enumerate(ids):
                assert fork_id is not None
                existing = _attach(source, fork_id, callbacks)
                if existing is not None:
                    found[index] = existing
            if found and not resume:
                for fork in found.values():
                    fork.close()
                raise SuiteExistsError(
                    f"the agent server already has suite {suite_id!r} of this conversation: "
                    "resume it (run_branches(..., resume=True)) or choose another suite_id"
                )
        forks: list[Conversation] = []
        for index, message in enumerate(messages):
            known = found.get(index)
            if known is not None:
                fork = known
            else:
                fork_tags = dict(tags[index] or {})
                if suite_id is not None:
                    fork_tags.update(branch_tags(suite_id, index, size, message))
                allowed = _AGENT_FORKS_ON_SERVER.set(True)  # the suite's forks may take one
                try:
                    fork = source.fork(
                        conversation_id=ids[index],
                        agent=agents[index],
                        title=titles[index],
                        tags=fork_tags,
                        reset_metrics=reset_metrics,
                        from_event_id=from_event_id,
                        callbacks=callbacks,
                        workspace="copy" if workspace == "copy" else "shared",
                    )
                finally:
                    _AGENT_FORKS_ON_SERVER.reset(allowed)
            forks.append(fork)
        suite = cls(forks, executor, max_workers, [])
        for index, fork in enumerate(forks):
            suite._place(index, fork, messages[index], made=index not in found)
        return suite

    @classmethod
    def reopen(
        cls,
        workspace: Workspace,
        suite_id: str,
        *,
        max_workers: int | None,
        executor: BranchExecutor | None,
        callbacks: Iterable[EventCallback],
    ) -> RemoteSuite:
        """The suite ``suite_id`` as the server at ``workspace`` records it in its forks' tags."""
        found = find_suite(workspace, suite_id)
        key = None if workspace.api_key is None else workspace.api_key.get_secret_value()
        forks: list[Conversation] = []
        for index, fork_id in found.items():
            if not fork_id:
                for fork in forks:
                    fork.close()
                raise SuiteNotFoundError(
                    f"the suite {suite_id!r} on {workspace.host} lacks the fork of branch "
                    f"{index}: resume with run_branches(..., suite_id=..., resume=True)"
                )
            forks.append(
                RemoteConversation.attach(
                    str(workspace.host),
                    fork_id,
                    api_key=key,
                    working_dir=workspace.working_dir,
                    callbacks=tuple(callbacks),
                )
            )
        suite = cls(forks, executor, max_workers, [])
        for index, fork in enumerate(forks):
            suite._place(index, fork, None, made=False)
        return suite

    def _place(self, index: int, fork: Conversation, message: str | None, *, made: bool) -> None:
        """Sort branch ``index`` by its fork's state on the server; a fork just ``made``, or
        one found without its message, is sent it now."""
        if made:
            assert message is not None
            fork.send_message(message)
            self.todo.append(index)
            return
        state = fork.state
        status = state.execution_status
        if status is ExecutionStatus.RUNNING:
            self.watch.append(index)
            return
        if status in _DONE:
            self.known.append(index)
            return
        digest = state.tags.get(MESSAGE_TAG)
        if message is not None and digest is not None and digest != message_digest(message):
            raise SuiteExistsError(
                f"branch {index} of the suite on the server has another message: resume it "
                "as it was started (resume_suite) or choose another suite_id"
            )
        last = _last_user_text(state.events)
        if last is None or digest is None or message_digest(last) != digest:
            if message is None:
                self.missing[index] = (
                    "its fork never got its message: resume with run_branches(source, "
                    "branches, suite_id=..., resume=True)"
                )
                return
            fork.send_message(message)
        self.todo.append(index)

    def results(self) -> Iterator[_Ended]:
        """Run the branches; yield ``(index, error, wall_seconds, worker)`` as each ends."""
        for index in self.known:
            yield index, None, None, None
        for index, why in sorted(self.missing.items()):
            yield index, BranchError(index, str(self.forks[index].id), why), None, None
        if self.executor is None:
            yield from self._in_threads()
        else:
            yield from self._on(self.executor)
        yield from self._watched()

    def _in_threads(self) -> Iterator[_Ended]:
        if not self.todo:
            return
        pool = ThreadPoolExecutor(
            self.max_workers or min(32, len(self.todo)), thread_name_prefix="cowconv-branch"
        )

        def run(index: int) -> float:
            started = time.perf_counter()
            _run_once(self.forks[index])
            return time.perf_counter() - started

        futures: dict[Future[float], int] = {pool.submit(run, i): i for i in self.todo}
        completed = False
        try:
            while futures:
                for future in first_done(futures):
                    index = futures.pop(future)
                    error = future.exception()
                    if error is not None and not isinstance(error, Exception):
                        self.fatal.append(error)
                        error = None
                    yield index, error, None if error is not None else future.result(), None
            completed = True
        finally:
            if not completed:
                for future, index in futures.items():
                    if not future.cancel():
                        self.forks[index].interrupt()  # the server ends it after its step
            pool.shutdown(wait=completed, cancel_futures=True)

    def _on(self, executor: BranchExecutor) -> Iterator[_Ended]:
        if not self.todo:
            return
        ship = bool(getattr(executor, "ship_api_keys", True))
        jobs = []
        for index in self.todo:
            where = self.forks[index].workspace
            key = where.api_key.get_secret_value() if ship and where.api_key else None
            jobs.append(
                RemoteBranchJob(
                    index, str(self.forks[index].id), str(where.host), where.working_dir, key
                )
            )
        # The workers follow the runs; callbacks here hear each fork's new events when its run
        # ends (on OpenHands' server the fork's events socket brings them as they happen).
        heard = {
            index: len(self.forks[index].state.events)
            for index in self.todo
            if _callbacks_to_catch_up(self.forks[index])
        }
        pending = set(self.todo)
        stream = iter(executor.run_jobs(SharedPrefix.of(EventLog()), jobs))  # type: ignore[arg-type]
        completed = False
        try:
            for index, result in stream:
                if index not in pending:
                    continue
                pending.discard(index)
                cid = str(self.forks[index].id)
                if isinstance(result, BaseException):
                    error = result if isinstance(result, BranchError) else None
                    yield index, error or BranchError(index, cid, f"{result}"), None, None
                    continue
                outcome = BranchOutcome.loads(result)
                if index in heard:
                    fork = self.forks[index]
                    events = fork.state.events
                    for position in range(heard[index], len(events)):
                        notify(_callbacks_to_catch_up(fork), events[position])
                if outcome.error is not None:
                    yield index, BranchError(index, cid, outcome.error), None, outcome.worker
                    continue
                yield index, None, outcome.wall_seconds, outcome.worker or None
            completed = True
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            if not completed:  # Ctrl-C or the caller stopped: the server ends what still runs
                for index in pending:
                    try:
                        self.forks[index].interrupt()
                    except Exception:  # best effort: the run goes on there, a resume waits
                        pass
        for index in sorted(pending):
            cid = str(self.forks[index].id)
            why = "the executor returned no result for it (its run may go on on the server)"
            yield index, BranchError(index, cid, why), None, None

    def _watched(self) -> Iterator[_Ended]:
        for index in self.watch:
            _run_once(self.forks[index])  # waits: never starts a run again
            yield index, None, None, None


def _callbacks_to_catch_up(fork: Conversation) -> tuple[EventCallback, ...]:
    """The callbacks of a fork on cowconv's server (which hear a run only while following it)."""
    backend = fork.backend
    if isinstance(backend, RemoteBackend) and backend.speaks_cowconv:
        return backend.callbacks
    return ()


def _last_user_text(events: Sequence[Any]) -> str | None:
    if not events:
        return None
    last = events[-1]
    if isinstance(last, MessageEvent) and last.source == "user":
        return last.text
    return None


def _attach(
    source: Conversation, fork_id: str, callbacks: tuple[EventCallback, ...]
) -> Conversation | None:
    """The conversation ``fork_id`` on ``source``'s server, or ``None`` if it has none."""
    where = source.workspace
    key = None if where.api_key is None else where.api_key.get_secret_value()
    try:
        return RemoteConversation.attach(
            str(where.host), fork_id, api_key=key, working_dir=where.working_dir,
            callbacks=callbacks,
        )  # fmt: skip
    except RemoteError as error:
        if error.status_code == 404:
            return None
        raise
