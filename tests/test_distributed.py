"""Branch suites on executors: the wire format in process, a real Dask cluster, processes, Ray.

Every executor must give the same forks as the thread pool, commit what the
workers appended to the caller's forks (store and callbacks see it), and
fail a branch that cannot travel or whose worker dies alone.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from pydantic import BaseModel, PrivateAttr

from cowconv import (
    LLM,
    Agent,
    AgentErrorEvent,
    Branch,
    BranchError,
    BranchesError,
    CondensationEvent,
    Conversation,
    ExecutionStatus,
    LLMSummarizingCondenser,
    SQLiteStore,
    Tool,
    ToolDefinition,
    ToolResult,
    register_tool,
    run_branches,
)
from cowconv.agent.condenser import condenser_view
from cowconv.branches.wire import BranchJob, BranchOutcome, SharedPrefix
from cowconv.distributed import PicklingExecutor, ProcessExecutor, prefix_loads
from cowconv.distributed.worker import forget_prefix, run_branch_job
from cowconv.testing import StubLLMServer, StubReply


class ShoutParams(BaseModel):
    text: str


@register_tool
class ShoutTool(ToolDefinition[ShoutParams]):
    """Upper-case a text (a tool registered by the caller, not built in)."""

    name = "test_distributed_shout"
    Params = ShoutParams

    def execute(self, params: ShoutParams) -> ToolResult:
        return ToolResult(output=f"{params.text.upper()} (pid {os.getpid()})", exit_code=0)


class LockedLLM(LLM):
    """An LLM holding something that cannot be pickled (like a live client)."""

    _guard: threading.Lock = PrivateAttr(default_factory=threading.Lock)


_RANDOM_FIELDS = {"id", "timestamp", "tool_call_id", "llm_response_id"}


def _own_events(fork: Conversation) -> list[tuple[str, str]]:
    """What a fork added after its fork point, without ids and timestamps."""
    state = fork.state
    start = state.forked_from_event_count
    own = (state.events[i] for i in range(start, len(state.events)))
    return [(type(event).__name__, event.model_dump_json(exclude=_RANDOM_FIELDS)) for event in own]


@pytest.fixture(scope="module")
def dask_client() -> Iterator[object]:
    """A real Dask LocalCluster: 2 worker processes, 1 thread each, on 127.0.0.1."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    # A worker that dies fails its task at once instead of being run again elsewhere.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=None,
            # No dashboard; its HTTP server (health checks) on a free port, not on 8787.
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


@pytest.fixture(params=["pickling", "dask"])
def executor(request):
    """Each executor that runs on every test run."""
    if request.param == "pickling":
        return PicklingExecutor(max_workers=2)
    from cowconv.distributed import DaskExecutor

    return DaskExecutor(request.getfixturevalue("dask_client"), progress=False)


@pytest.fixture
def source(stub_agent, tmp_path) -> Conversation:
    conversation = Conversation(agent=stub_agent, workspace=tmp_path)
    conversation.send_message("Run `echo shared-start` in the terminal.")
    conversation.run()
    for n in range(200):  # a longer shared history than any one branch adds
        conversation.send_message(f"note {n}: " + "x" * 200)
    return conversation


BRANCHES = [
    Branch("Run `echo alpha`.", title="A", tags={"variant": "a"}),
    Branch("Run `echo beta` and `echo gamma`.", title="B"),
    "Say hello.",
]


class TestSameAsThreads:
    def test_executor_gives_the_forks_the_thread_pool_gives(self, source, executor):
        """Each fork ends as in the thread pool: same events, status, stats, title and tags."""
        before = source.state
        source_tokens = source.agent.llm.metrics.prompt_tokens
        threaded = run_branches(source, BRANCHES)
        remote = run_branches(source, BRANCHES, executor=executor)
        assert source.state is before
        assert [_own_events(f) for f in remote] == [_own_events(f) for f in threaded]
        for mine, theirs in zip(remote, threaded, strict=True):
            assert mine.state.execution_status is ExecutionStatus.FINISHED
            assert mine.state.stats == theirs.state.stats
            assert dict(mine.state.tags) == dict(theirs.state.tags)
            assert mine.state.forked_from_conversation_id == source.id
            assert mine.state.events.take(len(before.events)) == before.events
        # Each fork reports its own usage, wherever it ran; the source's is its own.
        for fork in [*remote, *threaded]:
            assert fork.agent.llm.metrics.usage == fork.state.stats.get_combined_metrics()
        assert source.agent.llm.metrics.prompt_tokens == source_tokens
        rows = remote.report().rows
        assert [row.title for row in rows] == ["A", "B", None]
        assert rows[0].final_answer is not None and "alpha" in rows[0].final_answer
        assert all(row.wall_seconds is not None and row.steps >= 1 for row in rows)

    def test_each_fork_reports_its_own_usage_cached_tokens_too(self, executor, tmp_path):
        """fork.agent.llm.metrics is the fork's own usage (cached tokens included), not a
        total shared with its source or its siblings."""
        with StubLLMServer(prompt_cache=True) as cached_stub:
            llm = LLM(**cached_stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
            source = Conversation(agent=Agent(llm=llm), workspace=tmp_path)
            source.send_message("A long shared question. " * 50)
            source.run()
            mine = source.agent.llm.metrics.usage
            forks = run_branches(source, ["Say A.", "Say B.", "Say C."], executor=executor)
        assert source.agent.llm.metrics.usage == mine == source.state.stats.by_usage_id["default"]
        for fork in forks:
            own = fork.state.stats.by_usage_id["default"]
            assert fork.agent.llm.metrics.usage == own
            assert own.cache_read_tokens > 0 and own.prompt_tokens < 2 * mine.prompt_tokens

    def test_outcomes_are_committed_through_the_backend_not_a_private_door(
        self, source, executor, monkeypatch
    ):
        """run_branches records every outcome through the fork's backend (Conversation._commit
        is for tests only): with _commit refusing, the forks still end with their runs."""

        def refuse(self, change):
            raise AssertionError("run_branches wrote through Conversation._commit")

        monkeypatch.setattr(Conversation, "_commit", refuse)
        forks = run_branches(source, ["Say hello."], executor=executor)
        assert forks[0].state.execution_status is ExecutionStatus.FINISHED
        assert len(forks[0].state.events) > len(source.state.events) + 1

    def test_the_prefix_travels_once_not_once_per_branch(self, source, stub_agent):
        """Bytes sent: the shared history once plus small jobs, far below one copy per branch."""
        executor = PicklingExecutor(max_workers=2)
        messages = [f"Say hi {n}." for n in range(8)]
        forks = run_branches(source, messages, executor=executor)
        whole_fork = len(pickle.dumps(forks[0].state))
        prefix = len(pickle.dumps(source.state.events))
        assert executor.bytes_sent < prefix + len(messages) * whole_fork / 20
        assert executor.bytes_received < len(messages) * whole_fork / 20

    def test_dask_workers_unpickle_the_prefix_at_most_once(self, source, dask_client):
        """Across 6 branches on 2 workers, each worker deserialises the shared history once."""
        from cowconv.distributed import DaskExecutor

        before = dask_client.run(prefix_loads)
        run_branches(source, [f"Say hi {n}." for n in range(6)], executor=DaskExecutor(dask_client))
        after = dask_client.run(prefix_loads)
        assert all(after[w] - before.get(w, 0) <= 1 for w in after)
        assert sum(after[w] - before.get(w, 0) for w in after) >= 1


class TestMergedBack:
    def test_store_and_callbacks_see_what_workers_appended(self, stub_agent, tmp_path, executor):
        """The caller's store holds the runs' events and each fork's callbacks saw them."""
        store = SQLiteStore(tmp_path / "suite.db")
        source = Conversation(agent=stub_agent, workspace=tmp_path, store=store)
        source.send_message("Remember the number 7.")
        seen: list[str] = []
        forks = run_branches(
            source,
            ["Run `echo one`.", "Run `echo two`."],
            executor=executor,
            callbacks=[lambda event: seen.append(event.id)],
        )
        for fork in forks:
            stored = store.load(fork.id)
            assert stored.events == fork.state.events
            assert stored.execution_status is ExecutionStatus.FINISHED
            assert stored.stats == fork.state.stats and stored.stats.prompt_tokens > 0
        shared = len(source.state.events)
        own = [e.id for fork in forks for e in list(fork.state.events)[shared:]]
        assert sorted(seen) == sorted(own)
        assert store.info(source.id).event_count == 2  # the system prompt, the message

    def test_cowconv_tree_shows_the_suite(self, stub_agent, tmp_path, executor):
        """The suite's forks are ordinary forks in the store: ``cowconv tree`` draws them."""
        source = Conversation(
            agent=stub_agent, workspace=tmp_path, persistence_dir=tmp_path / "store"
        )
        source.set_tag("title", "Suite source")
        source.send_message("Remember the number 7.")
        run_branches(
            source,
            [Branch("Say A.", title="Arm A"), Branch("Say B.", title="Arm B")],
            executor=executor,
        )
        done = subprocess.run(
            [sys.executable, "-m", "cowconv", "tree", str(tmp_path / "store")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "3 conversations" in lines[0]

        def depth(text: str) -> int:
            (line,) = [line for line in lines if text in line]
            return len(line) - len(line.lstrip(" │├└─"))

        assert depth("Suite source") < depth("Arm A") == depth("Arm B")
        assert all("forked after 2 events" in line for line in lines if "Arm" in line)

    def test_llm_errors_are_recorded_not_raised(self, source, stub, executor):
        """A failed LLM call ends its branch in ``error`` with the reason; nothing is raised."""
        stub.script(StubReply.error(400, "bad request for this branch"))
        (fork,) = run_branches(source, ["Say hello."], executor=executor)
        assert fork.state.execution_status is ExecutionStatus.ERROR
        assert isinstance(fork.state.events[-1], AgentErrorEvent)
        assert "bad request for this branch" in fork.state.events[-1].error

    def test_custom_tools_reach_the_workers(self, source, stub, executor):
        """A tool registered in the caller runs on the worker that runs the branch."""
        agent = Agent(llm=source.agent.llm, tools=[Tool(name=ShoutTool.name)])
        stub.script(StubReply.tool_call(ShoutTool.name, text="quiet"), StubReply.text("Done."))
        (fork,) = run_branches(source, [Branch("Shout 'quiet'.", agent=agent)], executor=executor)
        assert fork.state.execution_status is ExecutionStatus.FINISHED
        assert [kind for kind, _ in _own_events(fork)][-2:] == ["ObservationEvent", "MessageEvent"]
        assert "QUIET (pid" in fork.state.events[-2].output

    def test_keys_can_stay_off_the_wire(self, source, stub, monkeypatch, tmp_path):
        """With ship_api_keys=False no job carries the key; the worker's environment has it."""
        monkeypatch.setenv("OPENAI_API_KEY", "key-from-worker-env")
        sent: list[bytes] = []

        class Recording(PicklingExecutor):
            def run_jobs(self, prefix, jobs):
                sent.extend(job.dumps() for job in jobs)
                return super().run_jobs(prefix, jobs)

        before = len(stub.requests)
        (fork,) = run_branches(source, ["Say hello."], executor=Recording(ship_api_keys=False))
        assert fork.state.execution_status is ExecutionStatus.FINISHED
        assert sent and all(b"stub-key" not in job for job in sent)
        assert stub.requests[before].headers["authorization"] == "Bearer key-from-worker-env"
        assert fork.agent.llm.api_key.get_secret_value() == "stub-key"  # kept here


class TestCondensedBranches:
    @staticmethod
    def _condensed(stub: StubLLMServer, workspace: object) -> Conversation:
        """A conversation whose runs condensed it (real summary calls to the stub)."""
        llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        condenser = LLMSummarizingCondenser(llm=llm, max_size=8, keep_first=1)
        conversation = Conversation(agent=Agent(llm=llm, condenser=condenser), workspace=workspace)
        for n in range(12):
            conversation.send_message(f"Turn {n}: " + "y" * 100)
            conversation.run()
        assert any(isinstance(e, CondensationEvent) for e in conversation.state.events)
        return conversation

    def test_a_branch_of_a_condensed_conversation_sends_only_its_view(self, stub, tmp_path):
        """The worker sends the condenser's view (head, summary, recent), not the whole prefix."""
        source = self._condensed(stub, tmp_path)
        condenser = source.agent.condenser
        assert condenser is not None
        expected = source.fork()
        expected.send_message("Branch.")
        view = condenser_view(condenser, expected.state.events).messages(source.agent.system_prompt)
        assert len(view) < len(source.state.events) // 2
        sent = len(stub.requests)
        forks = run_branches(source, ["Branch."], executor=PicklingExecutor(max_workers=1))
        (request,) = stub.requests[sent:]
        assert request.messages == view
        assert forks[0].state.execution_status is ExecutionStatus.FINISHED

    @pytest.mark.parametrize("condensed", [True, False])
    def test_the_worker_renders_the_whole_prefix_only_for_agents_without_a_condenser(
        self, stub, tmp_path, condensed
    ):
        """Rendering every shared event is wasted work when the model sees a condensed view."""
        from cowconv.agent import messages as _messages
        from cowconv.distributed import worker

        source = self._condensed(stub, tmp_path)
        agent = source.agent if condensed else source.agent.model_copy(update={"condenser": None})
        fork = source.fork(agent=agent)
        fork.send_message("Branch.")
        prefix = SharedPrefix.of(source.state.events)
        job = BranchJob.of(0, prefix, fork.state, 5)
        try:
            outcome = BranchOutcome.loads(run_branch_job(job.dumps(), prefix.dumps))
            assert outcome.error is None and outcome.events
            events = worker._prefixes[prefix.key]
            rendered, _ = _messages._renderings.find(events)
            assert rendered == (0 if condensed else len(events))
        finally:
            forget_prefix(prefix.key)


class TestFailures:
    def test_unpicklable_agent_fails_its_branch_alone(self, source, executor):
        """A branch whose agent cannot be pickled fails with a clear error; the others finish."""
        locked = Agent(llm=LockedLLM(**{k: getattr(source.agent.llm, k) for k in ("model",)}))
        with pytest.raises(BranchesError) as raised:
            run_branches(
                source, ["Say hi.", Branch("Say hi.", agent=locked), "Say bye."], executor=executor
            )
        group = raised.value
        assert [type(e) for e in group.exceptions] == [BranchError]
        (error,) = group.exceptions
        assert error.index == 1 and "cannot be sent to a worker" in str(error)
        assert "lock" in str(error)
        forks = group.forks
        statuses = [f.state.execution_status for f in forks]
        assert statuses == [
            ExecutionStatus.FINISHED,
            ExecutionStatus.ERROR,
            ExecutionStatus.FINISHED,
        ]
        assert "cannot be sent to a worker" in forks[1].state.events[-1].error

    def test_raising_commits_come_back_together(self, source, executor, monkeypatch):
        """Commits that raise (a failing store) come back as one group, with every fork."""
        from cowconv.branches.wire import BranchOutcome

        def broken(self, state):
            raise OSError("disk full")

        monkeypatch.setattr(BranchOutcome, "apply", broken)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, ["a", "b"], executor=executor)
        assert [str(e) for e in raised.value.exceptions] == ["disk full", "disk full"]
        assert len(raised.value.forks) == 2

    def test_a_killed_dask_worker_fails_its_branch(self, source, dask_client):
        """The branch whose worker dies fails (not run again); the suite goes on."""
        from cowconv.distributed import DaskExecutor

        branches = ["Run `echo before`.", "Run `kill -9 $PPID`.", "Run `echo after`."]
        # One at a time, so the dying worker runs nothing but the branch that kills it.
        executor = DaskExecutor(dask_client, max_in_flight=1, progress=False)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, branches, executor=executor)
        (error,) = raised.value.exceptions
        assert error.index == 1 and "died" in str(error)
        statuses = [f.state.execution_status for f in raised.value.forks]
        assert statuses == [
            ExecutionStatus.FINISHED,
            ExecutionStatus.ERROR,
            ExecutionStatus.FINISHED,
        ]
        dask_client.wait_for_workers(2, timeout=120)


class TestProcessExecutor:
    def test_processes_run_branches_and_a_dead_worker_fails_alone(self, source):
        """Worker processes give the thread pool's results; a killed one fails only its branch."""
        threaded = run_branches(source, ["Run `echo alpha`.", "Say hello."])
        branches = ["Run `echo alpha`.", "Run `kill -9 $PPID`.", "Say hello."]
        with pytest.raises(BranchesError) as raised:
            run_branches(source, branches, executor=ProcessExecutor(max_workers=2, progress=False))
        (error,) = raised.value.exceptions
        assert error.index == 1 and "worker process died" in str(error)
        forks = raised.value.forks
        assert [_own_events(forks[0]), _own_events(forks[2])] == [_own_events(f) for f in threaded]
        assert forks[1].state.execution_status is ExecutionStatus.ERROR


@pytest.fixture(scope="module")
def ray_session() -> Iterator[object]:
    """A real local Ray instance: 2 CPUs, no dashboard, on 127.0.0.1 (``cowconv[ray]``)."""
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
    def test_ray_runs_the_suite_like_the_thread_pool(self, source, ray_session):
        """Same forks as the thread pool; each Ray worker loads the shared history once."""
        from cowconv.distributed import RayExecutor

        threaded = run_branches(source, BRANCHES)
        remote = run_branches(source, BRANCHES, executor=RayExecutor(progress=False))
        assert [_own_events(f) for f in remote] == [_own_events(f) for f in threaded]
        assert [f.state.stats for f in remote] == [f.state.stats for f in threaded]
        more = run_branches(
            source, [f"Say hi {n}." for n in range(6)], executor=RayExecutor(progress=False)
        )
        assert all(f.state.execution_status is ExecutionStatus.FINISHED for f in more)
        assert set(more.prefix_loads) == {1}  # every worker that ran one loaded it once
        assert len(set(more.workers)) <= 2

    def test_ray_failures_come_back_per_branch(self, source, ray_session):
        """An unpicklable agent and a killed worker each fail their own branch, once."""
        from cowconv.distributed import RayExecutor

        locked = Agent(llm=LockedLLM(model=source.agent.llm.model))
        branches = [
            "Run `echo before`.",
            Branch("Say hi.", agent=locked),
            "Run `kill -9 $PPID`.",
            "Run `echo after`.",
        ]
        executor = RayExecutor(max_in_flight=1, progress=False)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, branches, executor=executor)
        errors = sorted(raised.value.exceptions, key=lambda e: e.index)
        assert [e.index for e in errors] == [1, 2]
        assert "cannot be sent to a worker" in str(errors[0])
        assert "died" in str(errors[1])
        statuses = [f.state.execution_status for f in raised.value.forks]
        assert statuses == [
            ExecutionStatus.FINISHED,
            ExecutionStatus.ERROR,
            ExecutionStatus.ERROR,
            ExecutionStatus.FINISHED,
        ]


class TestDrive:
    def test_bounds_runs_in_flight_and_shows_progress(self, capsys):
        """At most max_in_flight jobs run at once; each yields once; a failing submit yields it."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
        from types import SimpleNamespace

        from cowconv.distributed.driver import drive

        running = peak = 0
        jobs = [SimpleNamespace(index=n) for n in range(7)]

        def submit(job):
            nonlocal running, peak
            if job.index == 3:
                raise ValueError("cannot submit 3")
            running += 1
            peak = max(peak, running)
            return pool.submit(lambda: b"ran %d" % job.index)

        def collect(future):
            nonlocal running
            running -= 1
            return future.result()

        with ThreadPoolExecutor(4) as pool:
            results = list(
                drive(
                    jobs,
                    submit=submit,
                    wait_any=lambda handles, timeout: (
                        wait(handles, timeout, return_when=FIRST_COMPLETED).done
                    ),
                    collect=collect,
                    max_in_flight=2,
                    progress=True,
                    description="suite under test",
                )
            )
        assert peak == 2
        assert sorted(index for index, _ in results) == list(range(7))
        by_index = dict(results)
        assert isinstance(by_index[3], ValueError)
        assert by_index[5] == b"ran 5"
        assert "suite under test" in capsys.readouterr().err
