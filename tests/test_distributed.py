"""Branch suites on executors: the wire format in process, a real Dask cluster, processes, Ray.

Every executor must give the same forks as the thread pool, commit what the
workers appended to the caller's forks (store and callbacks see it), and
fail a branch that cannot travel or whose worker dies alone.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
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
    BranchLostError,
    BranchTimeoutError,
    BranchWorkspaceError,
    CondensationEvent,
    Conversation,
    ExecutionStatus,
    InvalidValueError,
    LLMSummarizingCondenser,
    SQLiteStore,
    Tool,
    ToolDefinition,
    ToolResult,
    iter_branches,
    register_tool,
    run_branches,
)
from cowconv.agent.condenser import condenser_view
from cowconv.branches.wire import BranchJob, BranchOutcome, SharedPrefix
from cowconv.distributed import PicklingExecutor, ProcessExecutor, prefix_loads
from cowconv.distributed.worker import forget_prefix, run_branch_job
from cowconv.testing import StubLLMServer, StubReply
from tests.clusters import local_client


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


def _own_events(fork: Conversation) -> list[tuple[str, int | None, str]]:
    """What a fork added after its fork point, without ids and timestamps; each event's parent
    as its position in the fork's history (the ids differ between runs, the shape may not)."""
    state = fork.state
    start = state.forked_from_event_count
    position = {event.id: index for index, event in enumerate(state.events)}
    own = (state.events[i] for i in range(start, len(state.events)))
    return [
        (
            type(event).__name__,
            None if event.parent_id is None else position.get(event.parent_id, -1),
            event.model_dump_json(exclude={*_RANDOM_FIELDS, "parent_id"}),
        )
        for event in own
    ]


@pytest.fixture(scope="module")
def dask_client() -> Iterator[object]:
    """A real Dask LocalCluster: 2 worker processes, 1 thread each, on 127.0.0.1.

    Dask's default configuration (``allowed-failures`` 3: the scheduler runs a task again when
    its worker dies): the executor itself must keep a branch from running twice.
    """
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    assert dask.config.get("distributed.scheduler.allowed-failures") == 3
    with local_client() as client:
        yield client


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
        assert [kind for kind, _, _ in _own_events(fork)][-2:] == [
            "ObservationEvent",
            "MessageEvent",
        ]
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

    def test_a_killed_dask_worker_fails_its_branch_exactly_once(self, source, stub, dask_client):
        """Under Dask's default allowed-failures (3), the branch whose worker is SIGKILLed
        mid-branch fails as lost (the scheduler's second attempt is refused) after exactly one
        LLM call; branches queued on the dead worker, never started, run once elsewhere."""
        from cowconv.distributed import DaskExecutor

        branches = [
            "Run `echo before`.",
            "Run `kill -9 $PPID`.",
            "Run `echo after`.",
            "Run `echo later`.",
        ]
        sent = len(stub.requests)
        executor = DaskExecutor(dask_client, max_in_flight=4, progress=False)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, branches, executor=executor)
        assert len(raised.value.exceptions) == 1, [repr(e) for e in raised.value.exceptions]
        (error,) = raised.value.exceptions
        assert isinstance(error, BranchLostError)
        assert error.index == 1 and "died while running it" in str(error)
        statuses = [f.state.execution_status for f in raised.value.forks]
        assert statuses == [
            ExecutionStatus.FINISHED,
            ExecutionStatus.ERROR,
            ExecutionStatus.FINISHED,
            ExecutionStatus.FINISHED,
        ]
        # One LLM call per step actually taken: the killer's only call, two for each other.
        calls = _calls_by_message(stub.requests[sent:])
        assert calls == {branches[0]: 2, branches[1]: 1, branches[2]: 2, branches[3]: 2}
        dask_client.wait_for_workers(2, timeout=120)

    def test_a_cancelled_dask_task_fails_its_branch_alone(self, source, stub, dask_client):
        """Dask's ``wait`` raises when a future it waits for is cancelled (a worker died with
        the history its task read, or a client cancelled it): that is the one branch's loss,
        not the suite's end. Here another client's cancel hits branch 1 while it runs."""
        from distributed import Future

        from cowconv.distributed import DaskExecutor

        branches = ["Say before.", "Run `sleep 6`.", "Say after.", "Say later."]
        cancelled: list[str] = []

        def cancel_branch_1() -> None:
            deadline = time.monotonic() + 120
            while not cancelled and time.monotonic() < deadline:
                for keys in dask_client.processing().values():
                    for key in map(str, keys):
                        if not (key.startswith("cowconv-branch-") and key.endswith("-1-0")):
                            continue
                        suite = key.removeprefix("cowconv-branch-").rsplit("-", 2)[0]
                        # Running: its worker noted the start ("cowconv-started" metadata).
                        if dask_client.get_metadata(["cowconv-started", suite, "1-0"], None):
                            dask_client.cancel([Future(key, dask_client)], force=True)
                            cancelled.append(key)
                time.sleep(0.05)

        canceller = threading.Thread(target=cancel_branch_1, daemon=True)
        canceller.start()
        executor = DaskExecutor(dask_client, max_in_flight=4, progress=False)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, branches, executor=executor)
        canceller.join(timeout=120)
        assert cancelled, "branch 1 was never seen running"
        errors = [repr(e) for e in raised.value.exceptions]
        assert len(errors) == 1, errors
        (error,) = raised.value.exceptions
        assert isinstance(error, BranchLostError) and error.index == 1, errors
        statuses = [f.state.execution_status for f in raised.value.forks]
        assert statuses[0] == statuses[2] == statuses[3] == ExecutionStatus.FINISHED


def _last_user_text(body: dict) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content)
            return str(content)
    return ""


def _calls_by_message(requests) -> dict[str, int]:
    """How many LLM requests the stub got for each branch (by its latest user message)."""
    counts: dict[str, int] = {}
    for request in requests:
        said = _last_user_text(request.body)
        counts[said] = counts.get(said, 0) + 1
    return counts


class TestProcessExecutor:
    def test_workers_start_from_a_fork_server_with_the_callers_environment_of_that_moment(
        self, source, stub, monkeypatch
    ):
        """The default start method is the fork server; each worker still starts with the
        caller's environment as it is when the worker starts (a key set between two suites
        reaches the second one's workers), as a spawned worker would."""
        executor = ProcessExecutor(max_workers=1, progress=False, ship_api_keys=False)
        assert executor._context.get_start_method() == "forkserver"
        seen = []
        for key in ("key-before", "key-after"):
            monkeypatch.setenv("OPENAI_API_KEY", key)
            before = len(stub.requests)
            (fork,) = run_branches(source, ["Say hello."], executor=executor)
            assert fork.state.execution_status is ExecutionStatus.FINISHED
            seen.append(stub.requests[before].headers["authorization"])
        assert seen == ["Bearer key-before", "Bearer key-after"]

    def test_an_unknown_start_method_is_refused_in_one_line(self):
        with pytest.raises(InvalidValueError, match="start_method: cannot find context for 'x'"):
            ProcessExecutor(start_method="x")

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


class TestRayExecutor:
    @pytest.mark.slow
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

    def test_ray_failures_come_back_per_branch(self, source, stub, ray_session):
        """An unpicklable agent and a killed worker each fail their own branch, once: the
        branch whose worker is SIGKILLed mid-branch made exactly one LLM call."""
        from cowconv.distributed import RayExecutor

        locked = Agent(llm=LockedLLM(model=source.agent.llm.model))
        branches = [
            "Run `echo before`.",
            Branch("Say hi.", agent=locked),
            "Run `kill -9 $PPID`.",
            "Run `echo after`.",
        ]
        executor = RayExecutor(max_in_flight=1, progress=False)
        sent = len(stub.requests)
        with pytest.raises(BranchesError) as raised:
            run_branches(source, branches, executor=executor)
        errors = sorted(raised.value.exceptions, key=lambda e: e.index)
        assert [e.index for e in errors] == [1, 2]
        assert "cannot be sent to a worker" in str(errors[0])
        assert isinstance(errors[1], BranchLostError) and "died" in str(errors[1])
        calls = _calls_by_message(stub.requests[sent:])
        assert calls == {branches[0]: 2, branches[2]: 1, branches[3]: 2}
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
                    wait_any=lambda handles, timeout: wait(handles, timeout, FIRST_COMPLETED).done,
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


# -- time limits, cancellation, workspaces, warm workers, engine options ----------------------


class HangingBrain:
    """The stub's brain, except that a request whose latest user message says HANG is held
    until ``release`` (a provider that hangs); ``on_hang`` runs when one arrives."""

    def __init__(self, on_hang=None) -> None:
        self.release = threading.Event()
        self.on_hang = on_hang

    def __call__(self, request):
        from cowconv.testing import default_brain

        if "HANG" in _last_user_text(request):
            if self.on_hang is not None:
                self.on_hang()
            self.release.wait(300)
        return default_brain(request)


@pytest.fixture
def hanging():
    """A stub LLM server whose HANG requests hang (released when the test ends)."""
    brain = HangingBrain()
    with StubLLMServer(brain=brain) as server:
        try:
            yield server, brain
        finally:
            brain.release.set()


def _source_on(server: StubLLMServer, workspace, store=None) -> Conversation:
    llm = LLM(**server.llm_settings(), retry_min_wait=0, retry_max_wait=0)
    agent = Agent(llm=llm, tools=[Tool(name="terminal")])
    source = Conversation(agent=agent, workspace=workspace, store=store)
    source.send_message("Hello.")
    return source


def _last_event_text(fork: Conversation) -> str:
    event = fork.state.events[-1]
    return getattr(event, "error", None) or getattr(event, "text", "")


@pytest.fixture(scope="module")
def processes() -> Iterator[ProcessExecutor]:
    """Two warm worker processes, kept for every test of the module that uses them."""
    with ProcessExecutor(max_workers=2, progress=False) as executor:
        yield executor


class TestTimeLimits:
    @pytest.mark.slow
    @pytest.mark.waits
    @pytest.mark.parametrize("engine", ["processes", "dask", "ray", "threads"])
    def test_a_hanging_branch_ends_at_its_limit_and_the_others_finish(
        self, hanging, tmp_path, engine, request
    ):
        """The branch whose LLM hangs ends ``timeout`` at its limit (its fork says so), its
        slot runs the next branch, the others finish; the hung call was made once."""
        from cowconv.distributed import DaskExecutor, RayExecutor

        server, _ = hanging
        source = _source_on(server, tmp_path)
        executor = {
            "processes": lambda: request.getfixturevalue("processes"),
            "dask": lambda: DaskExecutor(
                request.getfixturevalue("dask_client"), max_in_flight=2, progress=False
            ),
            "ray": lambda: request.getfixturevalue("ray_session") and RayExecutor(progress=False),
            "threads": lambda: None,
        }[engine]()
        branches = ["HANG now.", "Run `echo one`.", "Say two.", "Say three."]
        seen = []
        with pytest.raises(BranchesError) as raised:
            run_branches(
                source,
                branches,
                executor=executor,
                max_workers=2,
                # The others (a stub's answer, an echo: under a second) must finish in it
                # on a loaded machine; the hung branch waits all of it.
                branch_timeout=15,
                on_result=lambda result: seen.append((result.index, result.status)),
            )
        assert len(raised.value.exceptions) == 1, [repr(e) for e in raised.value.exceptions]
        (error,) = raised.value.exceptions
        assert isinstance(error, BranchTimeoutError) and error.index == 0
        forks = raised.value.forks
        assert [r.status for r in forks.results] == ["timeout", "finished", "finished", "finished"]
        assert forks[0].state.execution_status is ExecutionStatus.ERROR
        assert "time limit" in _last_event_text(forks[0])
        assert sorted(seen) == [(0, "timeout"), (1, "finished"), (2, "finished"), (3, "finished")]
        assert _calls_by_message(server.requests)["HANG now."] == 1

    def test_the_suite_limit_ends_every_branch_still_out(self, hanging, tmp_path):
        """Past the suite's ``timeout`` the hung branch is cut off and the one still queued
        never starts: both end ``timeout``."""
        server, _ = hanging
        source = _source_on(server, tmp_path)
        with pytest.raises(BranchesError) as raised:
            run_branches(
                source,
                ["HANG now.", "Say hi."],
                executor=PicklingExecutor(max_workers=1),
                timeout=3,
            )
        assert sorted(type(e).__name__ for e in raised.value.exceptions) == [
            "BranchTimeoutError",
            "BranchTimeoutError",
        ]
        assert [r.status for r in raised.value.forks.results] == ["timeout", "timeout"]
        assert _calls_by_message(server.requests).get("Say hi.", 0) <= 1

    def test_limits_are_checked(self, source):
        """A limit that is not a positive number of seconds is refused before any fork."""
        before = source.state
        with pytest.raises(ValueError, match="branch_timeout"):
            run_branches(source, ["x"], branch_timeout=0)
        with pytest.raises(TypeError, match="timeout"):
            run_branches(source, ["x"], timeout="10")
        assert source.state is before


@pytest.mark.usefixtures("sigint_raises_keyboard_interrupt")
class TestCancellation:
    @pytest.mark.slow
    def test_ctrl_c_cancels_the_suite_and_the_executor_stays_usable(self, tmp_path, processes):
        """SIGINT while a branch hangs on a worker process: KeyboardInterrupt propagates, the
        hung branch's process is killed and its fork recorded cancelled; the next suite runs."""
        interrupted = threading.Event()

        def ctrl_c() -> None:  # once: the first hung request interrupts this process
            if not interrupted.is_set():
                interrupted.set()
                os.kill(os.getpid(), signal.SIGINT)

        brain = HangingBrain(on_hang=ctrl_c)
        with StubLLMServer(brain=brain) as server:
            try:
                store = SQLiteStore(tmp_path / "suite.db")
                source = _source_on(server, tmp_path, store=store)
                forks = []
                suite = iter_branches(source, ["HANG now.", "HANG too."], executor=processes)
                with pytest.raises(KeyboardInterrupt):
                    for result in suite:
                        forks.append(result)
                assert forks == []
                assert len(store.list()) == 3  # the source and its two forks
                for info in store.list():
                    if info.id != source.id:
                        assert "cancelled" in store.load(info.id).events[-1].error
                assert len(processes.worker_pids) == 0  # both busy workers were killed
                after = run_branches(source, ["Say hi."], executor=processes)
                assert after[0].state.execution_status is ExecutionStatus.FINISHED
            finally:
                brain.release.set()

    @pytest.mark.slow
    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_ctrl_c_received_by_another_thread_cancels_the_suite(self, tmp_path, engine, request):
        """The system may hand Ctrl-C to any thread of the process, and Python raises
        KeyboardInterrupt in the main thread only when that thread runs: a suite waiting on
        hung branches wakes for it (it waited for ever, until the branches ended)."""
        executor = request.getfixturevalue("processes") if engine == "processes" else None
        interrupted = threading.Event()

        def ctrl_c_to_this_thread() -> None:  # the stub server's thread, never the main one
            if not interrupted.is_set():
                interrupted.set()
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)

        brain = HangingBrain(on_hang=ctrl_c_to_this_thread)
        given_up = threading.Event()

        def watchdog() -> None:  # without the wake, only the branches' end woke the suite
            if not brain.release.wait(60):
                given_up.set()
                brain.release.set()

        with StubLLMServer(brain=brain) as server:
            threading.Thread(target=watchdog, daemon=True).start()
            try:
                source = _source_on(server, tmp_path)
                with pytest.raises(KeyboardInterrupt):
                    list(iter_branches(source, ["HANG now.", "HANG too."], executor=executor))
                assert interrupted.is_set() and not given_up.is_set()
            finally:
                brain.release.set()

    def test_ctrl_c_on_dask_ends_the_running_task_on_its_worker(self, tmp_path, dask_client):
        """Dask cannot stop a running task: after Ctrl-C the hung branch sees on the scheduler
        that its suite ended and ends itself, freeing its worker thread while the LLM still
        holds the call; its fork is recorded cancelled."""
        from cowconv.distributed import DaskExecutor

        interrupted = threading.Event()

        def ctrl_c() -> None:
            if not interrupted.is_set():
                interrupted.set()
                os.kill(os.getpid(), signal.SIGINT)

        def executing(dask_worker) -> int:
            return len(dask_worker.state.executing)

        brain = HangingBrain(on_hang=ctrl_c)
        with StubLLMServer(brain=brain) as server:
            try:
                store = SQLiteStore(tmp_path / "suite.db")
                source = _source_on(server, tmp_path, store=store)
                executor = DaskExecutor(dask_client, progress=False)
                with pytest.raises(KeyboardInterrupt):
                    run_branches(source, [Branch("HANG now.", title="hung")], executor=executor)
                (hung,) = store.list(tags={"title": "hung"})
                assert "cancelled" in store.load(hung.id).events[-1].error
                deadline = time.monotonic() + 120
                while sum(dask_client.run(executing).values()) and time.monotonic() < deadline:
                    time.sleep(0.5)
                assert sum(dask_client.run(executing).values()) == 0
                assert not brain.release.is_set()  # the LLM call is still held
            finally:
                brain.release.set()

    def test_closing_the_iterator_cancels_what_is_left(self, hanging, tmp_path):
        """Leaving iter_branches after the first result records the rest as cancelled."""
        server, brain = hanging
        store = SQLiteStore(tmp_path / "suite.db")
        source = _source_on(server, tmp_path, store=store)
        suite = iter_branches(
            source,
            [Branch("Say hi.", title="quick"), Branch("HANG now.", title="hung")],
            executor=PicklingExecutor(2),
        )
        first = next(suite)
        suite.close()
        brain.release.set()
        assert first.index == 0 and first.status == "finished"
        (hung,) = store.list(tags={"title": "hung"})
        state = store.load(hung.id)
        assert state.execution_status is ExecutionStatus.ERROR
        assert "cancelled" in state.events[-1].error


def scratch_workspace(index: int, conversation_id: str) -> str:
    """A workspace factory, run on the worker: a fresh directory per branch."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), "cowconv-test-ws", f"{conversation_id}-{index}")
    os.makedirs(path, exist_ok=True)
    return path


class TestWorkspaces:
    def test_a_missing_workspace_fails_before_the_llm_call(self, stub, tmp_path, executor):
        """A workspace missing on the worker fails its branch with no LLM call at all."""
        source = _source_on(stub, tmp_path)
        sent = len(stub.requests)
        with pytest.raises(BranchesError) as raised:
            run_branches(
                source,
                ["Run `echo a`.", "Run `echo b`."],
                executor=executor,
                workspace="/nonexistent/cowconv-{index}",
            )
        assert [type(e) for e in raised.value.exceptions] == [BranchWorkspaceError] * 2
        assert "'/nonexistent/cowconv-1' does not exist" in str(raised.value.exceptions[1])
        assert len(stub.requests) == sent  # the stub counted 0 calls

    def test_a_factory_gives_each_branch_its_own_directory(self, stub, tmp_path, executor):
        """The factory runs on the worker; each branch's terminal works in its directory."""
        source = _source_on(stub, tmp_path)
        forks = run_branches(
            source, ["Run `pwd`.", "Run `pwd`."], executor=executor, workspace=scratch_workspace
        )
        for index, fork in enumerate(forks):
            expected = scratch_workspace(index, str(fork.id))
            assert fork.state.execution_status is ExecutionStatus.FINISHED
            assert expected in fork.state.events[-1].text


class TestWarmWorkers:
    def test_a_repeat_suite_ships_no_prefix_bytes(self, source, processes):
        """The same workers run the second suite, which sends the history to none of them and
        makes none load it again."""
        first = run_branches(source, ["Say A.", "Say B."], executor=processes)
        assert processes.prefix_bytes_sent > 0 or set(first.prefix_loads) == {1}
        pids = set(processes.worker_pids)
        second = run_branches(source, ["Say C.", "Say D.", "Say E."], executor=processes)
        assert processes.prefix_bytes_sent == 0 and processes.bytes_sent > 0
        assert set(processes.worker_pids) == pids
        assert {w.rsplit(":", 1)[1] for w in second.workers} <= {str(p) for p in pids}
        assert set(second.prefix_loads) == {1}
        assert all(f.state.execution_status is ExecutionStatus.FINISHED for f in second)

    def test_the_block_stops_the_workers(self, source):
        """Leaving the with block stops the worker processes it kept."""
        with ProcessExecutor(max_workers=1, progress=False) as executor:
            run_branches(source, ["Say A."], executor=executor)
            (pid,) = executor.worker_pids
        assert executor.worker_pids == ()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


class TestEngineOptions:
    def test_ray_refuses_at_construction_what_options_refuses(self):
        """A misspelt option or address= fails when the executor is made, not per branch."""
        from cowconv.distributed import RayExecutor

        with pytest.raises(ValueError, match="task options"):
            RayExecutor(num_cpu=1)
        with pytest.raises(ValueError, match=r"ray.init\(address="):
            RayExecutor(address="auto")

    def test_dask_options_are_checked_and_passed(self, source, dask_client):
        """resources/workers/priority are checked here; workers= pins every branch."""
        from cowconv.distributed import DaskExecutor

        with pytest.raises(ValueError, match="resources"):
            DaskExecutor(dask_client, resources={"GPU": -1})
        with pytest.raises(ValueError, match="workers"):
            DaskExecutor(dask_client, workers=[1])
        with pytest.raises(TypeError, match="priority"):
            DaskExecutor(dask_client, priority="high")
        address = sorted(dask_client.scheduler_info()["workers"])[0]
        executor = DaskExecutor(dask_client, workers=[address], priority=5, progress=False)
        runs = run_branches(source, ["Say A.", "Say B.", "Say C."], executor=executor)
        assert len(set(runs.workers)) == 1


class TestDriveLimits:
    def test_a_job_whose_worker_never_answers_is_given_up_and_cancelled(self):
        """Past its limit plus the grace, a job still out is cancelled and reported as timed
        out; the jobs after it still run."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
        from dataclasses import dataclass

        from cowconv.distributed.driver import drive

        @dataclass(frozen=True)
        class Job:
            index: int
            timeout: float | None = 0.2
            conversation_id: str = "c"

        never = threading.Event()
        cancelled = []
        with ThreadPoolExecutor(2) as pool:
            try:
                results = dict(
                    drive(
                        [Job(0), Job(1), Job(2)],
                        submit=lambda job: pool.submit(
                            lambda: never.wait(60) and b"" if job.index == 0 else b"ran"
                        ),
                        wait_any=lambda handles, timeout: (
                            wait(handles, timeout, FIRST_COMPLETED).done
                        ),
                        collect=lambda future: future.result(),
                        cancel=cancelled.append,
                        max_in_flight=2,
                        progress=False,
                        grace=0.1,
                    )
                )
            finally:
                never.set()
        assert isinstance(results[0], BranchTimeoutError) and "given up" in str(results[0])
        assert results[1] == results[2] == b"ran"
        assert len(cancelled) == 1

    def test_the_suite_deadline_stops_submitting(self):
        """Jobs not submitted before the suite's deadline are reported, never submitted."""
        import time as _time

        from cowconv.distributed.driver import drive

        submitted = []
        results = dict(
            drive(
                [type("Job", (), {"index": n, "conversation_id": "c"})() for n in range(3)],
                submit=submitted.append,
                wait_any=lambda handles, timeout: handles,
                collect=lambda handle: b"",
                max_in_flight=1,
                progress=False,
                deadline=_time.monotonic() - 1,
            )
        )
        assert submitted == []
        assert all(isinstance(r, BranchTimeoutError) for r in results.values())
