"""Issue 22, part 6: a worker that dies or hangs fails its branch alone, on every executor.

Real parts: worker processes (ProcessExecutor), a real Dask LocalCluster with
worker processes, a real local Ray instance; the branch's command runs in a
real shell that stops (SIGSTOP) or kills its own worker process.
Worker death on Dask and Ray is also covered in tests/test_distributed.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cowconv import (
    BranchError,
    BranchesError,
    Conversation,
    ExecutionStatus,
    InvalidValueError,
    run_branches,
)
from cowconv.distributed import ProcessExecutor

# A worker that never answers: its own shell stops it. A worker that dies: killed.
HANG = "Run `kill -STOP $PPID`."
DIE = "Run `kill -9 $PPID`."
SLEEP = "Run `sleep 100`."
# Generous: a worker process imports cowconv and litellm before its first branch.
TIMEOUT = 75.0


@pytest.fixture
def source(stub_agent: Any, tmp_path: Any) -> Conversation:
    conversation = Conversation(agent=stub_agent, workspace=tmp_path)
    conversation.send_message("Say hello.")
    conversation.run()
    return conversation


def _failed_alone(raised: BranchesError, index: int, words: str) -> None:
    errors = list(raised.exceptions)
    assert [type(error) for error in errors] == [BranchError], errors
    (error,) = errors
    assert error.index == index and words in str(error), str(error)
    statuses = [fork.state.execution_status for fork in raised.forks]
    assert statuses[index] is ExecutionStatus.ERROR
    assert all(s is ExecutionStatus.FINISHED for i, s in enumerate(statuses) if i != index)


class TestProcessExecutor:
    def test_a_hung_worker_fails_its_branch_alone(self, source: Conversation) -> None:
        """A worker process that stops answering: its branch fails after job_timeout, the
        process is killed and replaced, the other branches finish."""
        executor = ProcessExecutor(max_workers=2, progress=False, job_timeout=TIMEOUT)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, ["Run `echo before`.", HANG, "Say bye."], executor=executor)
        _failed_alone(raised.value, 1, "did not finish within job_timeout")

    def test_a_dead_worker_fails_its_branch_alone(self, source: Conversation) -> None:
        executor = ProcessExecutor(max_workers=2, progress=False)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, ["Say hi.", DIE, "Say bye."], executor=executor)
        _failed_alone(raised.value, 1, "died")

    @pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "10", True])
    def test_job_timeout_is_checked(self, bad: Any) -> None:
        with pytest.raises(InvalidValueError):
            ProcessExecutor(job_timeout=bad)


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A LocalCluster of its own (2 worker processes): these tests leave a worker busy."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=None,
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            processes=True,
            memory_limit="1GiB",
        )
        client = distributed.Client(cluster)
        try:
            yield client
        finally:
            client.close()
            cluster.close()


class TestDaskExecutor:
    def test_a_hung_task_fails_its_branch_alone(
        self, source: Conversation, dask_client: Any
    ) -> None:
        """A task that does not end: its branch fails after job_timeout, the others finish."""
        from cowconv.distributed import DaskExecutor

        executor = DaskExecutor(dask_client, progress=False, job_timeout=TIMEOUT)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, ["Say hi.", SLEEP, "Say bye."], executor=executor)
        _failed_alone(raised.value, 1, "did not finish within job_timeout")


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()


class TestRayExecutor:
    def test_a_hung_worker_fails_its_branch_alone(
        self, source: Conversation, ray_session: Any
    ) -> None:
        """A Ray worker that stops answering: its branch fails after job_timeout (the worker
        is killed), the others finish."""
        from cowconv.distributed import RayExecutor

        executor = RayExecutor(progress=False, job_timeout=TIMEOUT)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, ["Say hi.", HANG, "Say bye."], executor=executor)
        _failed_alone(raised.value, 1, "did not finish within job_timeout")
