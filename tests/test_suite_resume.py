"""Branch suites that survive their caller (``suite_id=``, ``resume_suite``).

Real parts only: the caller is a real Python process SIGKILLed mid-suite; its
branches run on real worker processes (ProcessExecutor) or a real Dask
cluster (a scheduler and 2 worker processes); the store is a real SQLite file
or a real PostgreSQL database; the LLM is the stub from cowconv.testing,
reached through litellm's HTTP path, answering slowly. Resuming from another
process must end every branch exactly once: the stub counts one LLM call
per branch, however the suite was cut.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cowconv import (
    LLM,
    Agent,
    BranchesError,
    BranchLostError,
    Conversation,
    CorruptStoreError,
    ExecutionStatus,
    MemoryStore,
    SuiteError,
    SuiteExistsError,
    SuiteNotFoundError,
    resume_suite,
    run_branches,
)
from cowconv.branches import ledger
from cowconv.distributed import PicklingExecutor, ProcessExecutor
from cowconv.ports import SuiteRow
from cowconv.stores import open_store
from cowconv.stores.tree import TreeStore
from cowconv.testing import StubLLMServer, StubReply
from tests.clusters import local_cluster

BRANCHES = [f"Write variant {n} of the release note." for n in range(6)]
DELAY = 4.0  # seconds the stub takes per answer: the caller is killed while branches run
LEASE = 20.0  # heartbeat every 5 s; a runner silent for 20 s is gone
SUITE = "release-notes"
WAIT = 600.0  # generous: two cores shared by several test runs


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content)
            return str(content)
    return ""


class SlowBrain:
    """Answers every request with a text, after ``DELAY`` seconds (a slow provider)."""

    def __call__(self, request: dict[str, Any]) -> StubReply:
        return StubReply.text(f"Done: {_last_user_text(request)}", delay=DELAY)


@pytest.fixture
def slow_stub() -> Iterator[StubLLMServer]:
    with StubLLMServer(brain=SlowBrain()) as server:
        yield server


def _calls(stub: StubLLMServer) -> dict[str, int]:
    counts: dict[str, int] = {}
    for request in stub.requests:
        said = _last_user_text(request.body)
        counts[said] = counts.get(said, 0) + 1
    return counts


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the suite's store is: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "cowconv.db")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


@pytest.fixture(scope="module")
def dask_cluster() -> Iterator[Any]:
    """A real Dask LocalCluster: a scheduler and 2 worker processes of 1 thread, 127.0.0.1."""
    pytest.importorskip("distributed")
    cluster = local_cluster()
    try:
        yield cluster
    finally:
        cluster.close()


CALLER = textwrap.dedent(
    """
    import json
    import sys

    from cowconv import LLM, Agent, Conversation, Tool, run_branches
    from cowconv.stores import open_store


    def main():
        location, base_url, engine, scheduler, lease = sys.argv[1:6]
        store = open_store(location)
        llm = LLM(model="openai/stub-model", base_url=base_url, api_key="stub-key")
        tools = [Tool(name="terminal")] if len(sys.argv) > 7 else []
        source = Conversation(agent=Agent(llm=llm, tools=tools), workspace=".", store=store)
        source.send_message("Plan the release.")
        if engine == "processes":
            from cowconv.distributed import ProcessExecutor

            executor = ProcessExecutor(max_workers=2, progress=False)
        elif engine == "ray":
            import ray

            from cowconv.distributed import RayExecutor

            ray.init(address=scheduler, log_to_driver=False, configure_logging=False)
            executor = RayExecutor(max_in_flight=2, progress=False)
        else:
            from distributed import Client

            from cowconv.distributed import DaskExecutor

            executor = DaskExecutor(Client(scheduler), max_in_flight=2, progress=False)
        branches = [f"Write variant {n} of the release note." for n in range(6)]
        if len(sys.argv) > 7:
            branches = json.loads(sys.argv[7])
        run_branches(source, branches, executor=executor, suite_id=sys.argv[6],
                     lease=float(lease))
        print("the suite ended before it was killed", flush=True)


    if __name__ == "__main__":
        main()
    """
)


def _start_caller(
    tmp_path: Path,
    location: str,
    stub: StubLLMServer,
    engine: str,
    scheduler: str = "",
    branches: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    script = tmp_path / "caller.py"
    script.write_text(CALLER)
    extra = [] if branches is None else [json.dumps(branches)]
    return subprocess.Popen(
        [sys.executable, str(script), location, stub.base_url, engine, scheduler, str(LEASE),
         SUITE, *extra],
        cwd=tmp_path,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )  # fmt: skip


def _wait_mid_suite(store: TreeStore, caller: subprocess.Popen[bytes]) -> list[SuiteRow]:
    """Wait until a branch has ended and another is running; return the branches' rows."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        assert caller.poll() is None, "the caller ended before it could be killed"
        rows = store.suite_rows(SUITE)[1:]
        states = [row.state for row in rows]
        if ledger.DONE in states and ledger.RUNNING in states:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"the suite never got mid-way: {store.suite_rows(SUITE)}")


def _kill(caller: subprocess.Popen[bytes]) -> None:
    os.kill(caller.pid, signal.SIGKILL)
    assert caller.wait(60) == -signal.SIGKILL


def _in_flight(rows: list[SuiteRow]) -> dict[int, str | None]:
    return {row.branch: row.owner for row in rows if row.state == ledger.RUNNING}


def _committed_by(store: TreeStore, in_flight: dict[int, str | None]) -> dict[int, str | None]:
    """Who committed the branches that were running when the caller died."""
    rows = store.suite_rows(SUITE)[1:]
    return {row.branch: row.owner for row in rows if row.branch in in_flight}


def _check_exactly_once(forks: list[Conversation], stub: StubLLMServer) -> None:
    """Every branch finished, once: one reply in its fork, one LLM call at the stub."""
    assert [fork.state.execution_status for fork in forks] == [ExecutionStatus.FINISHED] * 6
    for fork, message in zip(forks, BRANCHES, strict=True):
        texts = [getattr(event, "text", "") for event in fork.state.events]
        assert texts.count(f"Done: {message}") == 1, texts
    assert _calls(stub) == dict.fromkeys(BRANCHES, 1)
    assert len(stub.requests) == len(BRANCHES)


@pytest.mark.slow
@pytest.mark.waits
class TestCallerKilled:
    def test_processes_the_caller_is_killed_and_another_process_resumes(
        self, tmp_path: Path, location: str, slow_stub: StubLLMServer
    ) -> None:
        """SIGKILL the caller while its worker processes run branches: they commit what
        they run to the store themselves; resuming here runs what never started, waits for
        what was in flight, and every branch ends once (one LLM call each)."""
        caller = _start_caller(tmp_path, location, slow_stub, "processes")
        store = open_store(location)
        assert isinstance(store, TreeStore)
        try:
            rows = _wait_mid_suite(store, caller)
            _kill(caller)
        finally:
            if caller.poll() is None:
                caller.kill()
        assert ledger.PENDING in [row.state for row in rows]  # never started: resume runs it
        with ProcessExecutor(max_workers=2, progress=False) as executor:
            forks = resume_suite(store, SUITE, executor=executor, lease=LEASE, timeout=WAIT)
        _check_exactly_once(forks, slow_stub)
        # What ran when the caller died was finished and committed by its own worker process
        # (the resume waited for it), not run again.
        assert _committed_by(store, _in_flight(rows)) == _in_flight(rows)
        assert [row.state for row in store.suite_rows(SUITE)[1:]] == [ledger.DONE] * 6
        # Resuming again runs nothing and reads the same forks back.
        again = resume_suite(location, SUITE)
        assert [f.state.events[-1].id for f in again] == [f.state.events[-1].id for f in forks]
        assert len(slow_stub.requests) == len(BRANCHES)
        store.close()

    def test_dask_the_caller_is_killed_and_another_process_resumes(
        self, tmp_path: Path, location: str, slow_stub: StubLLMServer, dask_cluster: Any
    ) -> None:
        """The same on a Dask cluster: the dead caller's client goes, the tasks running on
        the workers go on and commit; the resume's client runs the rest, once each."""
        from distributed import Client

        from cowconv.distributed import DaskExecutor

        caller = _start_caller(
            tmp_path, location, slow_stub, "dask", dask_cluster.scheduler_address
        )
        store = open_store(location)
        assert isinstance(store, TreeStore)
        try:
            rows = _wait_mid_suite(store, caller)
            _kill(caller)
        finally:
            if caller.poll() is None:
                caller.kill()
        with Client(dask_cluster) as client:
            executor = DaskExecutor(client, max_in_flight=2, progress=False)
            forks = resume_suite(store, SUITE, executor=executor, lease=LEASE, timeout=WAIT)
        _check_exactly_once(forks, slow_stub)
        assert _committed_by(store, _in_flight(rows)) == _in_flight(rows)
        store.close()


@pytest.mark.slow
class TestCallerKilledOnRay:
    def test_ray_ends_the_dead_drivers_tasks_their_branches_are_lost_not_run_twice(
        self, tmp_path: Path, slow_stub: StubLLMServer, ray_session: Any
    ) -> None:
        """Ray ties a task's fate to its owner, the driver: when the caller is killed, Ray
        ends the branches it was running. The resume finds their heartbeats stalled and
        reports them lost (never run again); the branches that never started run once."""
        from cowconv.distributed import RayExecutor

        location = str(tmp_path / "cowconv.db")
        address = ray_session.get_runtime_context().gcs_address
        caller = _start_caller(tmp_path, location, slow_stub, "ray", address)
        store = open_store(location)
        assert isinstance(store, TreeStore)
        try:
            _wait_running(store, caller)
            _kill(caller)
        finally:
            if caller.poll() is None:
                caller.kill()
        try:
            forks = resume_suite(
                store, SUITE, executor=RayExecutor(progress=False), lease=LEASE, timeout=WAIT
            )
            errors: list[BaseException] = []
        except BranchesError as raised:
            forks, errors = raised.forks, list(raised.exceptions)
        statuses = [result.status for result in forks.results]
        lost = {index for index, status in enumerate(statuses) if status == "lost"}
        # A task of the dead driver may still claim a branch before Ray ends it, after the
        # rows were read: what is lost was claimed by a runner (an owner), never by none.
        owners = {row.branch: row.owner for row in store.suite_rows(SUITE)[1:]}
        assert all(owners[index] is not None for index in lost), owners
        assert {e.index for e in errors} == lost  # type: ignore[attr-defined]
        assert all(status in ("finished", "lost") for status in statuses), statuses
        calls = _calls(slow_stub)
        assert all(count == 1 for count in calls.values()), calls  # nothing paid twice
        for index, status in enumerate(statuses):
            if status == "finished":
                assert calls.get(BRANCHES[index]) == 1
        store.close()


def _wait_running(store: TreeStore, caller: subprocess.Popen[bytes]) -> list[SuiteRow]:
    """Wait until a branch is running; return the branches' rows."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        assert caller.poll() is None, "the caller ended before it could be killed"
        rows = store.suite_rows(SUITE)[1:]
        if ledger.RUNNING in [row.state for row in rows]:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"no branch ever ran: {store.suite_rows(SUITE)}")


def _source(stub: StubLLMServer, store: object, tmp_path: Path) -> Conversation:
    llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
    source = Conversation(agent=Agent(llm=llm), workspace=tmp_path, store=store)
    source.send_message("Plan the release.")
    return source


class TestRecordedSuite:
    def test_a_suite_needs_a_store_other_processes_can_open(
        self, stub: StubLLMServer, tmp_path: Path
    ) -> None:
        """A memory store (or none) cannot hold a suite that outlives this process."""
        source = _source(stub, MemoryStore(), tmp_path)
        with pytest.raises(SuiteError, match="other processes"):
            run_branches(source, ["a"], suite_id="s")
        with pytest.raises(SuiteError, match="other processes"):
            run_branches(_source(stub, None, tmp_path), ["a"], suite_id="s")
        assert stub.requests == []

    def test_ids_are_checked_and_a_taken_id_is_refused(
        self, stub: StubLLMServer, tmp_path: Path
    ) -> None:
        store = open_store(str(tmp_path / "cowconv.db"))
        source = _source(stub, store, tmp_path)
        for bad in ("", "x" * 201, "a\nb"):
            with pytest.raises(ValueError, match="suite_id"):
                run_branches(source, ["a"], suite_id=bad)
        with pytest.raises(TypeError, match="suite_id"):
            run_branches(source, ["a"], suite_id=7)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="resume=True"):
            run_branches(source, ["a"], resume=True)
        with pytest.raises(SuiteNotFoundError, match="no suite 'nope'"):
            resume_suite(store, "nope")
        run_branches(source, ["a", "b"], suite_id="s", executor=PicklingExecutor(2))
        with pytest.raises(SuiteExistsError, match="resume it"):
            run_branches(source, ["a", "b"], suite_id="s")
        with pytest.raises(SuiteError, match="other ones"):
            run_branches(source, ["a", "c"], suite_id="s", resume=True)
        # The same suite again with resume=True: nothing runs twice.
        forks = run_branches(source, ["a", "b"], suite_id="s", resume=True)
        assert [f.state.execution_status for f in forks] == [ExecutionStatus.FINISHED] * 2
        assert len(stub.requests) == 2
        store.close()

    @pytest.mark.parametrize(
        "damaged",
        [
            "[1",
            "",
            "[]",
            "5",
            '"messages"',
            '{"messages": "a"}',
            '{"messages": ["a", "b"], "max_iteration_per_run": [1, "x"]}',
            '{"messages": ["a", "b"], "max_iteration_per_run": [true, 0]}',
        ],
    )
    def test_a_damaged_suite_row_is_a_corrupt_store_error(
        self, stub: StubLLMServer, tmp_path: Path, location: str, damaged: str
    ) -> None:
        """The suite's own row holding anything but a JSON object (a damaged file, a hand
        edit): resuming it says so, naming the suite, and changes nothing in the store."""
        store = open_store(location)
        try:
            source = _source(stub, store, tmp_path)
            run_branches(source, ["a", "b"], suite_id="s", executor=PicklingExecutor(2))
            head, (first, _) = ledger.header(store, "s")
            lost = first._replace(state=ledger.LOST)  # what rerun_lost=True would reset
            for row in (head._replace(detail=damaged), lost):
                store.change_suite(lambda rows, row=row: rows.put_suite_row(row))
            before = store.suite_rows("s")
            with pytest.raises(CorruptStoreError, match="the suite 's' is damaged"):
                resume_suite(store, "s")
            with pytest.raises(CorruptStoreError, match="the suite 's' is damaged"):
                resume_suite(store, "s", rerun_lost=True)
            with pytest.raises(CorruptStoreError, match="the suite 's' is damaged"):
                run_branches(source, ["a", "b"], suite_id="s", resume=True)
            assert store.suite_rows("s") == before
            assert len(stub.requests) == 2  # nothing ran again
        finally:
            store.close()

    @pytest.mark.slow
    def test_a_worker_killed_mid_branch_is_lost_not_run_again_unless_asked(
        self, stub: StubLLMServer, tmp_path: Path
    ) -> None:
        """A recorded branch whose worker process dies is ``lost`` in the store: a resume
        reports it (its LLM calls may have been paid for), ``rerun_lost=True`` runs it."""
        store = open_store(str(tmp_path / "cowconv.db"))
        llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        from cowconv import Tool

        source = Conversation(
            agent=Agent(llm=llm, tools=[Tool(name="terminal")]), workspace=tmp_path, store=store
        )
        source.send_message("Hello.")
        branches = ["Say hi.", "Run `kill -9 $PPID`.", "Say bye."]
        with ProcessExecutor(max_workers=2, progress=False) as executor:
            with pytest.raises(BranchesError) as raised:
                run_branches(source, branches, executor=executor, suite_id="s")
            (error,) = raised.value.exceptions
            assert isinstance(error, BranchLostError) and error.index == 1
            statuses = [r.status for r in raised.value.forks.results]
            assert statuses == ["finished", "lost", "finished"]
            states = [row.state for row in store.suite_rows("s")[1:]]
            assert states == [ledger.DONE, ledger.LOST, ledger.DONE]
            calls = len(stub.requests)
            with pytest.raises(BranchesError) as again:
                resume_suite(store, "s", executor=executor)
            statuses = [r.status for r in again.value.forks.results]
            assert statuses == ["finished", "lost", "finished"]
            assert len(stub.requests) == calls  # nothing ran again
            # Asked to, the lost branch runs once more (and kills its worker again).
            with pytest.raises(BranchesError):
                resume_suite(store, "s", executor=executor, rerun_lost=True)
            assert len(stub.requests) == calls + 1
        store.close()


class TestRunnerGone:
    @pytest.mark.slow
    @pytest.mark.waits
    def test_a_runner_whose_heartbeat_stalls_is_lost_and_not_run_again(
        self, tmp_path: Path, stub: StubLLMServer
    ) -> None:
        """The caller is killed while one of its workers is stopped (SIGSTOP) mid-branch:
        that branch's row says ``running`` but its heartbeat no longer moves. The resume
        waits ``lease`` seconds, declares it lost (its LLM call was paid: not run again)
        and finishes the rest; the stopped worker is found by the owner name it wrote."""
        location = str(tmp_path / "cowconv.db")
        branches = ["Run `kill -STOP $PPID`.", "Say one.", "Say two."]
        caller = _start_caller(tmp_path, location, stub, "processes", branches=branches)
        store = open_store(location)
        assert isinstance(store, TreeStore)
        stopped = 0
        try:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and not stopped:
                assert caller.poll() is None, "the caller ended before it could be killed"
                rows = store.suite_rows(SUITE)[1:]
                if rows and rows[0].state == ledger.RUNNING and rows[0].owner:
                    pid = int(rows[0].owner.split(":")[1])
                    stopped = pid if _is_stopped(pid) else 0
                time.sleep(0.2)
            assert stopped, f"the worker never stopped: {store.suite_rows(SUITE)}"
            _kill(caller)
            forks = resume_suite(store, SUITE, lease=LEASE, timeout=WAIT)
        except BranchesError as raised:
            (error,) = raised.exceptions
            assert isinstance(error, BranchLostError) and error.index == 0, repr(error)
            assert "stopped beating" in str(error)
            forks = raised.forks
        else:
            raise AssertionError(f"the stalled branch was not reported: {forks.results}")
        finally:
            if caller.poll() is None:
                caller.kill()
            if stopped:
                os.kill(stopped, signal.SIGKILL)
        assert [r.status for r in forks.results] == ["lost", "finished", "finished"]
        assert [row.state for row in store.suite_rows(SUITE)[1:]] == [
            ledger.LOST,
            ledger.DONE,
            ledger.DONE,
        ]
        assert _calls(stub).get(branches[0]) == 1  # its one LLM call, never made again
        store.close()


def _is_stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False
