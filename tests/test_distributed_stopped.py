"""A worker that hangs because it is stopped (SIGSTOP), on every engine.

The branch's own command stops the worker process that runs it (``kill -STOP
$PPID``): the process is alive but never answers again, and nothing on the
engine's side says so. The contract (docs/distributed.md, "Time limits"): with
a ``branch_timeout`` the branch is given up once its limit and a grace period
have passed, it ends ``timeout`` (a :class:`~cowconv.BranchTimeoutError`), its
worker slot is freed (the process killed, the task cancelled), and every other
branch's result is kept. In a recorded suite the branch is ``lost`` in the
store (it ran, and its LLM calls may have been paid for): a resume does not run
it again. Real parts: ProcessExecutor's processes, a Dask LocalCluster (2
worker processes), a local Ray instance (2 CPUs), a SQLite file.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    BranchesError,
    BranchTimeoutError,
    Conversation,
    ExecutionStatus,
    InvalidValueError,
    Tool,
    resume_suite,
    run_branches,
)
from cowconv.branches import ledger
from cowconv.distributed import DaskExecutor, ProcessExecutor, RayExecutor
from cowconv.stores import open_store
from cowconv.stores.tree import TreeStore
from cowconv.testing import StubLLMServer
from tests.clusters import local_client

STOP = "Run `kill -STOP $PPID`."  # the branch's shell stops the worker process running it
BRANCHES = ["Say before.", STOP, "Say after.", "Say later."]
# Seconds a branch may run. Its worker's start and first imports are not counted (litellm is
# loaded before the clock starts), so the others' run is one answer of a stub on this machine
# and a shell command, under a second unloaded: 15 s holds on 2 cores shared with other jobs,
# and every second of it is waited by the stopped branch.
LIMIT = 15.0
# Seconds past its limit a branch whose worker does not answer is waited for on Dask and Ray
# (their default is 60, for workers that start slowly or queue): these workers are running.
GRACE = 10.0


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _kill_stopped(pids: list[int]) -> list[int]:
    """Kill the stopped ones of ``pids`` (the test's own workers); return them."""
    killed = [pid for pid in pids if _stopped(pid)]
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    return killed


@pytest.fixture
def source(stub: StubLLMServer, tmp_path: Path) -> Conversation:
    llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
    agent = Agent(llm=llm, tools=[Tool(name="terminal")])
    conversation = Conversation(
        agent=agent, workspace=tmp_path, store=open_store(str(tmp_path / "cowconv.db"))
    )
    conversation.send_message("Hello.")
    return conversation


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A real Dask LocalCluster: 2 worker processes (1 thread each), default configuration."""
    pytest.importorskip("distributed")
    with local_client() as client:
        yield client


def _check(raised: BranchesError, status: str = "timeout") -> None:
    """The stopped branch ended ``status`` alone; every other branch finished."""
    errors = [f"{getattr(e, 'index', None)}: {type(e).__name__}: {e}" for e in raised.exceptions]
    assert len(raised.exceptions) == 1, errors  # each one raised, named if not the only one
    (error,) = raised.exceptions
    assert error.index == 1, repr(error)
    results = raised.forks.results
    assert [r.status for r in results] == ["finished", status, "finished", "finished"]
    assert [f.state.execution_status for i, f in enumerate(raised.forks) if i != 1] == [
        ExecutionStatus.FINISHED
    ] * 3


@pytest.mark.slow
@pytest.mark.waits
class TestStoppedWorker:
    def test_processes(self, source: Conversation) -> None:
        """A stopped worker process: its branch times out, the process is killed and
        replaced; in the recorded suite the branch is lost and a resume runs nothing."""
        with ProcessExecutor(max_workers=2, progress=False) as executor:
            with pytest.raises(BranchesError) as raised:
                run_branches(
                    source, BRANCHES, executor=executor, branch_timeout=LIMIT, suite_id="s"
                )
            _check(raised.value)
            assert isinstance(raised.value.exceptions[0], BranchTimeoutError)
            store = source.backend.sink
            assert isinstance(store, TreeStore)
            states = [row.state for row in store.suite_rows("s")[1:]]
            assert states == [ledger.DONE, ledger.LOST, ledger.DONE, ledger.DONE]
            with pytest.raises(BranchesError) as again:
                resume_suite(store, "s", executor=executor)
            _check(again.value, "lost")
            assert len(executor.worker_pids) >= 1  # usable: the stopped one was replaced

    def test_dask(self, source: Conversation, dask_client: Any) -> None:
        """A stopped Dask worker (its scheduler sees it alive for minutes): the branch is
        given up at its limit plus grace and its task cancelled; the others finish."""
        pids = list(dask_client.run(os.getpid).values())
        try:
            executor = DaskExecutor(dask_client, max_in_flight=2, progress=False, grace=GRACE)
            with pytest.raises(BranchesError) as raised:
                run_branches(source, BRANCHES, executor=executor, branch_timeout=LIMIT)
            _check(raised.value)
            assert isinstance(raised.value.exceptions[0], BranchTimeoutError)
            fork = raised.value.forks[1]
            assert fork.state.execution_status is ExecutionStatus.ERROR
            assert "did not answer" in str(raised.value.exceptions[0])
        finally:
            killed = _kill_stopped(pids)
        assert len(killed) == 1  # the one the branch stopped, cleaned up here
        dask_client.wait_for_workers(2, timeout=300)  # the nanny starts a new one

    def test_ray(self, source: Conversation, ray_session: Any) -> None:
        """A stopped Ray worker: the branch is given up, its task cancelled with force (which
        kills the stopped process); the others finish."""
        with pytest.raises(BranchesError) as raised:
            run_branches(
                source,
                BRANCHES,
                executor=RayExecutor(progress=False, grace=GRACE),
                branch_timeout=LIMIT,
            )
        _check(raised.value)
        assert isinstance(raised.value.exceptions[0], BranchTimeoutError)
        # The engine is usable afterwards: a new suite runs on both CPUs.
        forks = run_branches(source, ["Say one.", "Say two."], executor=RayExecutor(progress=False))
        assert [f.state.execution_status for f in forks] == [ExecutionStatus.FINISHED] * 2


class TestGrace:
    """``grace=``: how long past its limit a branch whose worker is silent is waited for."""

    @given(
        grace=st.one_of(
            st.floats(max_value=0, exclude_max=True),
            st.sampled_from([math.nan, math.inf, True]),
            st.text(max_size=3),
            st.none(),
        )
    )
    def test_every_executor_refuses_a_grace_that_is_not_finite_seconds(
        self, grace: Any, dask_client: Any
    ) -> None:
        for make in (
            lambda: ProcessExecutor(max_workers=1, grace=grace),
            lambda: DaskExecutor(dask_client, grace=grace),
            lambda: RayExecutor(grace=grace),
        ):
            with pytest.raises(InvalidValueError, match="grace must be a finite number"):
                make()

    @given(grace=st.one_of(st.floats(0, 1e6), st.integers(0, 10**6)))
    def test_every_executor_keeps_the_grace_it_is_given(self, grace: Any, dask_client: Any) -> None:
        executors = (
            ProcessExecutor(max_workers=1, grace=grace),
            DaskExecutor(dask_client, grace=grace),
            RayExecutor(grace=grace),
        )
        assert [executor.grace for executor in executors] == [grace] * 3

    def test_the_defaults(self, dask_client: Any) -> None:
        """5 s for worker processes of this machine; 60 s on Dask and Ray, whose workers may
        start or queue slowly."""
        assert ProcessExecutor().grace == 5.0
        assert DaskExecutor(dask_client).grace == RayExecutor().grace == 60.0
