"""run_branches(workspace="copy") on real Dask and Ray clusters: each branch in its own copy.

The clusters are those of tests/test_distributed.py (local, on 127.0.0.1); the branches run
terminal commands through the stub LLM, each writing the same file in its own directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cowconv import Conversation, ExecutionStatus, run_branches
from tests.test_distributed import dask_client  # noqa: F401 - a fixture

BRANCHES = 4


def _suite(source: Conversation, executor: object) -> list[Conversation]:
    messages = [f"Run `printf '%s' 'branch-{n}' > a.txt`." for n in range(BRANCHES)]
    return list(run_branches(source, messages, executor=executor, workspace="copy"))


@pytest.fixture
def source(stub_agent, tmp_path) -> Conversation:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("source")
    (work / "kept.txt").write_text("kept")
    return Conversation(agent=stub_agent, workspace=work)


def _check(source: Conversation, forks: list[Conversation]) -> None:
    work = Path(source.workspace.working_dir)
    assert (work / "a.txt").read_text() == "source"
    assert len({fork.workspace.working_dir for fork in forks}) == BRANCHES
    for index, fork in enumerate(forks):
        assert fork.state.execution_status is ExecutionStatus.FINISHED
        directory = Path(fork.workspace.working_dir)
        assert directory != work
        assert (directory / "a.txt").read_text() == f"branch-{index}"
        assert (directory / "kept.txt").read_text() == "kept"


def test_dask_branches_each_work_in_their_own_copy(source, dask_client):  # noqa: F811
    """On a Dask LocalCluster, every branch writes its own copy; the source is unchanged."""
    from cowconv.distributed import DaskExecutor

    _check(source, _suite(source, DaskExecutor(dask_client, progress=False)))


@pytest.mark.slow
def test_ray_branches_each_work_in_their_own_copy(source, ray_session):  # noqa: F811
    """On a local Ray instance, every branch writes its own copy; the source is unchanged."""
    from cowconv.distributed import RayExecutor

    _check(source, _suite(source, RayExecutor(progress=False)))
