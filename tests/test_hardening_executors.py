"""A worker process that dies or stops answering fails its branch alone.

Real parts: ProcessExecutor's worker processes; the branch's command runs in a
real shell that stops (SIGSTOP) or kills (SIGKILL) its own worker process.
tests/test_distributed.py covers the rest on every executor: a hanging branch
ends at its ``branch_timeout`` (TestTimeLimits: processes, Dask, Ray, threads)
and a killed worker fails its branch (TestFailures, TestProcessExecutor,
TestRayExecutor).
"""

from __future__ import annotations

from typing import Any

import pytest

from cowconv import (
    BranchError,
    BranchesError,
    BranchTimeoutError,
    Conversation,
    ExecutionStatus,
    run_branches,
)
from cowconv.distributed import ProcessExecutor

# A worker that never answers: its own shell stops it. A worker that dies: killed.
HANG = "Run `kill -STOP $PPID`."
DIE = "Run `kill -9 $PPID`."
# The limit counts the run, not a worker's start or its first imports; the other branches (a
# stub's answer, a shell command) must finish in it on 2 cores shared with other jobs.
TIMEOUT = 15.0


@pytest.fixture
def source(stub_agent: Any, tmp_path: Any) -> Conversation:
    conversation = Conversation(agent=stub_agent, workspace=tmp_path)
    conversation.send_message("Say hello.")
    conversation.run()
    return conversation


def _failed_alone(raised: BranchesError, index: int, words: str) -> None:
    errors = list(raised.exceptions)
    assert len(errors) == 1 and isinstance(errors[0], BranchError), errors
    (error,) = errors
    assert error.index == index and words in str(error), str(error)
    statuses = [fork.state.execution_status for fork in raised.forks]
    assert statuses[index] is ExecutionStatus.ERROR
    assert all(s is ExecutionStatus.FINISHED for i, s in enumerate(statuses) if i != index)


@pytest.mark.slow
class TestProcessExecutor:
    @pytest.mark.waits
    def test_a_stopped_worker_fails_its_branch_alone(self, source: Conversation) -> None:
        """A worker process that stops answering (SIGSTOP): its branch is given up after its
        limit (a BranchTimeoutError), the process is replaced, the other branches finish."""
        with ProcessExecutor(max_workers=2, progress=False) as executor:
            with pytest.raises(BranchesError) as raised:
                run_branches(
                    source,
                    ["Run `echo before`.", HANG, "Say bye."],
                    executor=executor,
                    branch_timeout=TIMEOUT,
                )
            (error,) = raised.value.exceptions
            assert isinstance(error, BranchTimeoutError) and error.index == 1, repr(error)
            statuses = [fork.state.execution_status for fork in raised.value.forks]
            assert statuses == [
                ExecutionStatus.FINISHED,
                ExecutionStatus.ERROR,
                ExecutionStatus.FINISHED,
            ]
            # The executor is usable again: the stopped worker was replaced.
            (again,) = run_branches(source, ["Say again."], executor=executor)
            assert again.state.execution_status is ExecutionStatus.FINISHED

    def test_a_dead_worker_fails_its_branch_alone(self, source: Conversation) -> None:
        """A worker process killed mid-branch (SIGKILL): that branch fails, the others finish."""
        with ProcessExecutor(max_workers=2, progress=False) as executor:
            with pytest.raises(BranchesError) as raised:
                run_branches(source, ["Say hi.", DIE, "Say bye."], executor=executor)
        _failed_alone(raised.value, 1, "died")
