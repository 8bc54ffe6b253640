"""run_branches(workspace="copy") on processes and real Dask and Ray clusters: each branch in
its own copy, made on its worker from the snapshot that travels with the shared history.

The clusters are those of tests/test_distributed.py (local, on 127.0.0.1); the branches run
terminal commands through the stub LLM, each writing the same file in its own directory. The
workers share this machine's disk, so to show that they read neither the source's directory
nor its snapshot store, :class:`Elsewhere` moves both (and with the store the forks'
directories) out of their paths while the executor runs the jobs: after the payload is built,
before any worker starts a branch. The workers' own store is ``$COWCONV_WORKSPACE_STORE`` set
for them to a directory of the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from cowconv import (
    BranchJob,
    Conversation,
    ExecutionStatus,
    ObservationEvent,
    SharedPrefix,
    SnapshotStore,
    Workspace,
    compare,
    run_branches,
)
from cowconv.distributed import ProcessExecutor
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


# -- workers that do not see the caller's files ------------------------------------------------


class Elsewhere:
    """A real executor whose workers cannot find the caller's files while they run the jobs.

    ``run_jobs`` is called with the suite's payload already built (the prefix holds the
    snapshot's objects); the paths in ``hidden`` are renamed away until every job has
    answered, then put back, before ``run_branches`` commits the outcomes here.
    """

    def __init__(self, inner: Any, hidden: Sequence[Path]) -> None:
        self.inner = inner
        self.hidden = list(hidden)
        self.ship_api_keys = True
        self.prefix: SharedPrefix | None = None
        self.jobs: list[BranchJob] = []

    def run_jobs(
        self, prefix: SharedPrefix, jobs: Sequence[BranchJob], *, deadline: float | None = None
    ) -> Iterator[tuple[int, bytes | BaseException]]:
        self.prefix, self.jobs = prefix, list(jobs)
        moved = [(path, path.with_name(path.name + ".hidden")) for path in self.hidden]
        for path, away in moved:
            path.rename(away)
        try:
            results = list(self.inner.run_jobs(prefix, jobs, deadline=deadline))
        finally:
            for path, away in moved:
                away.rename(path)
        yield from results


@pytest.fixture
def recorded_source(stub_agent, tmp_path) -> Conversation:
    """A source whose workspace records snapshots in a store of its own, its first run done."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("source")
    (work / "kept.txt").write_text("kept")
    workspace = Workspace(working_dir=str(work), snapshot_store=str(tmp_path / "snapshots"))
    source = Conversation(agent=stub_agent, workspace=workspace)
    source.send_message("Run `printf '%s' 'started' > started.txt`.")
    source.run()
    return source


def _shipped_suite(source: Conversation, executor: Any, branches: int) -> Any:
    hidden = [Path(source.workspace.working_dir), Path(str(source.workspace.snapshot_store))]
    elsewhere = Elsewhere(executor, hidden)
    messages = [f"Run `printf '%s' 'branch-{n}' > a.txt`." for n in range(branches)]
    runs = run_branches(source, messages, executor=elsewhere, workspace="copy")
    return runs, elsewhere


def _check_shipped(source: Conversation, runs: Any, elsewhere: Elsewhere, workers: Path) -> None:
    work = Path(source.workspace.working_dir)
    assert (work / "a.txt").read_text() == "source"  # the source's files untouched
    assert elsewhere.prefix is not None and elsewhere.prefix.files is not None
    [tree] = elsewhere.prefix.files.trees  # one fork point: one snapshot travels
    assert all(job.files == tree for job in elsewhere.jobs)
    store = SnapshotStore(str(source.workspace.snapshot_store))
    for index, fork in enumerate(runs):
        assert fork.state.execution_status is ExecutionStatus.FINISHED, fork.state.events[-1]
        directory = Path(fork.workspace.working_dir)
        assert directory != work
        # The fork's own directory here holds what its branch wrote there.
        assert (directory / "a.txt").read_text() == f"branch-{index}"
        assert (directory / "kept.txt").read_text() == "kept"
        assert (directory / "started.txt").read_text() == "started"
        # Its events name snapshots this machine's store now holds, and the file diff shows.
        observed = [
            e
            for e in fork.state.events[len(source.state.events) :]
            if isinstance(e, ObservationEvent)
        ]
        assert observed and all(store.has(e.workspace_snapshot) for e in observed)
        files = compare(source, fork).b.files
        assert files is not None and dict(files.changes) == {"a.txt": "modified"}
        assert f"+branch-{index}" in files.patch()
    # The branches ran in directories of the workers' store (gone once each ended).
    assert (workers / "received" / "objects.git").is_dir()
    assert not any((workers / "received" / "worktrees").iterdir())
    # Once per worker: every branch's process had unpacked the snapshot once.
    assert set(runs.snapshot_loads) == {1}
    assert set(runs.prefix_loads) == {1}


class TestShippedSnapshots:
    def test_processes_make_each_branch_s_directory_from_the_shipped_snapshot(
        self, recorded_source, tmp_path, monkeypatch
    ):
        """Worker processes that cannot see the source's files run every branch in a copy of
        their own; the snapshot goes to each worker process once; the files come back."""
        workers = tmp_path / "worker-store"
        monkeypatch.setenv("COWCONV_WORKSPACE_STORE", str(workers))  # the spawned workers'
        with ProcessExecutor(max_workers=2, progress=False) as executor:
            runs, elsewhere = _shipped_suite(recorded_source, executor, 6)
            assert executor.prefix_bytes_sent <= 2 * len(elsewhere.prefix.dumps())
        _check_shipped(recorded_source, runs, elsewhere, workers)
        assert len(set(runs.workers)) <= 2

    def test_dask_workers_make_each_branch_s_directory_from_the_shipped_snapshot(
        self,
        recorded_source,
        tmp_path,
        dask_client,  # noqa: F811
    ):
        """On a Dask LocalCluster that cannot see the source's files: each worker unpacks the
        snapshot once, every branch runs in its own copy there, the files come back."""
        from cowconv.distributed import DaskExecutor

        workers = tmp_path / "worker-store"
        before = dask_client.run(lambda: os.environ.get("COWCONV_WORKSPACE_STORE"))
        dask_client.run(lambda: os.environ.__setitem__("COWCONV_WORKSPACE_STORE", str(workers)))
        try:
            runs, elsewhere = _shipped_suite(
                recorded_source, DaskExecutor(dask_client, progress=False), 4
            )
        finally:
            dask_client.run(_restore_environment, before)
        _check_shipped(recorded_source, runs, elsewhere, workers)

    def test_ray_workers_make_each_branch_s_directory_from_the_shipped_snapshot(
        self,
        recorded_source,
        tmp_path,
        ray_session,  # noqa: F811
    ):
        """On a local Ray instance whose workers cannot see the source's files: the snapshot
        is unpacked once per worker, every branch runs in its own copy, the files come back."""
        from cowconv.distributed import RayExecutor

        workers = tmp_path / "worker-store"
        executor = RayExecutor(
            progress=False, runtime_env={"env_vars": {"COWCONV_WORKSPACE_STORE": str(workers)}}
        )
        runs, elsewhere = _shipped_suite(recorded_source, executor, 4)
        _check_shipped(recorded_source, runs, elsewhere, workers)


def _restore_environment(before: dict[str, str | None], dask_worker: Any = None) -> None:
    """On a Dask worker: put ``COWCONV_WORKSPACE_STORE`` back as it was there."""
    value = before.get(dask_worker.address) if dask_worker is not None else None
    if value is None:
        os.environ.pop("COWCONV_WORKSPACE_STORE", None)
    else:
        os.environ["COWCONV_WORKSPACE_STORE"] = value
