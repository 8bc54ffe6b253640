"""run_branches: A/B fan-out of one conversation, run concurrently against the stub."""

from __future__ import annotations

import threading

import pytest
from pydantic import BaseModel

from cowconv import (
    LLM,
    Agent,
    Branch,
    BranchesError,
    BranchRunError,
    Conversation,
    ExecutionStatus,
    MessageEvent,
    SQLiteStore,
    Tool,
    ToolDefinition,
    ToolResult,
    iter_branches,
    register_tool,
    run_branches,
)
from cowconv.testing import StubLLMServer, StubReply, default_brain


@pytest.fixture
def source(stub_agent: Agent, tmp_path) -> Conversation:
    conversation = Conversation(agent=stub_agent, workspace=tmp_path)
    conversation.send_message("Run `echo shared-start` in the terminal.")
    conversation.run()
    return conversation


class TestRunBranches:
    def test_hundred_branches_finish_and_leave_the_source_alone(self, source, stub):
        """100 branches all finish with their own answer; the source is unchanged."""
        before = source.state
        requests_before = len(stub.requests)
        forks = run_branches(source, [f"Run `echo branch-{n}`." for n in range(100)])
        assert source.state is before
        assert len({fork.id for fork in forks}) == 100
        for n, fork in enumerate(forks):
            assert fork.state.execution_status is ExecutionStatus.FINISHED
            assert fork.state.events[: len(before.events)] == before.events
            assert fork.state.events[-1].text.endswith(f"branch-{n}\n\n[exit code: 0]")
            assert fork.state.forked_from_conversation_id == source.id
        assert len(stub.requests) - requests_before == 200

    def test_branches_with_their_own_agent_tags_and_title(self, source, stub):
        """A Branch can bring its own agent, title and tags; the rest keep the source's agent."""
        alt = Agent(llm=LLM(**stub.llm_settings(), usage_id="alt"))
        forks = run_branches(
            source,
            [Branch("Hello A", title="A", tags={"variant": "A"}), Branch("Hello B", agent=alt)],
        )
        assert forks[0].state.tags == {"title": "A", "variant": "A"}
        assert forks[0].state.agent is source.state.agent
        assert forks[1].state.agent is alt
        assert set(forks[1].state.stats.by_usage_id) == {"alt"}
        assert set(forks[0].state.stats.by_usage_id) == {"default"}
        last_asks = [
            [e.text for e in f.state.events if isinstance(e, MessageEvent) and e.role == "user"][-1]
            for f in forks
        ]
        assert last_asks == ["Hello A", "Hello B"]
        assert {f.state.events[-1].text for f in forks} == {"Earlier I ran: `echo shared-start`"}

    def test_from_event_and_carried_metrics(self, source):
        """from_event_id and reset_metrics are passed to every fork."""
        first = source.state.events[1]  # the first message, after the system prompt
        (fork,) = run_branches(source, ["Hi"], from_event_id=first.id, reset_metrics=False)
        messages = [e.text for e in fork.state.events if isinstance(e, MessageEvent)]
        assert messages[:2] == ["Run `echo shared-start` in the terminal.", "Hi"]
        assert fork.state.stats.prompt_tokens > source.state.stats.prompt_tokens

    def test_no_branches(self, source):
        """No branches, no forks."""
        assert run_branches(source, []) == []

    def test_bad_branches_are_refused_before_any_fork(self, source):
        """A branch that is neither a Branch nor a str is a TypeError, and nothing runs."""
        before = source.state
        with pytest.raises(TypeError, match="Branch values or str"):
            run_branches(source, ["fine", 42])
        with pytest.raises(TypeError, match="message must be a str"):
            Branch(b"bytes")
        with pytest.raises(ValueError, match="max_workers"):
            run_branches(source, ["x"], max_workers=0)
        assert source.state is before

    def test_raising_runs_are_reported_together(self, source, monkeypatch):
        """Runs that raise (not errors a run records) come back as an exception group."""

        def broken(self):
            raise OSError("disk full")

        monkeypatch.setattr(Conversation, "run", broken)
        with pytest.raises(ExceptionGroup) as raised:
            run_branches(source, ["a", "b"])
        assert [str(e) for e in raised.value.exceptions] == ["disk full", "disk full"]


class CrashParams(BaseModel):
    text: str


@register_tool
class CrashTool(ToolDefinition[CrashParams]):
    """A tool that crashes (a bug in a user's tool)."""

    name = "test_branches_crash"
    Params = CrashParams

    def execute(self, params: CrashParams) -> ToolResult:
        raise RuntimeError(f"the crash tool broke on {params.text!r}")


class TestFailuresRaised:
    def test_recorded_failures_are_raised_on_request(self, source, stub, stub_llm):
        """raise_on_error=True raises what runs recorded (an LLM 5xx after its retries, a
        crashed tool) as BranchRunErrors; without it they are only recorded."""
        crashing = Agent(llm=stub_llm, tools=[Tool(name=CrashTool.name)])
        stub.script(
            *[StubReply.error(503, "provider down")] * 4,
            StubReply.tool_call(CrashTool.name, text="x"),
        )
        with pytest.raises(BranchesError) as raised:
            run_branches(
                source,
                ["Say hi.", Branch("Crash it.", agent=crashing)],
                max_workers=1,
                raise_on_error=True,
            )
        errors = sorted(raised.value.exceptions, key=lambda e: e.index)
        assert [type(e) for e in errors] == [BranchRunError, BranchRunError]
        assert "provider down" in errors[0].reason and errors[0].tool_name is None
        assert "after 4 attempt(s)" in errors[0].reason
        assert errors[1].tool_name == CrashTool.name
        stub.script(StubReply.tool_call(CrashTool.name, text="x"))
        forks = run_branches(source, [Branch("Crash it.", agent=crashing)])
        assert forks[0].state.execution_status is ExecutionStatus.ERROR  # recorded, not raised
        assert forks.results[0].ok is False and forks.results[0].error is None

    def test_a_crashed_tool_is_named(self, source, stub, stub_llm):
        """The BranchRunError of a crashed tool names the tool."""
        crashing = Agent(llm=stub_llm, tools=[Tool(name=CrashTool.name)])
        stub.script(StubReply.tool_call(CrashTool.name, text="x"))
        with pytest.raises(BranchRunError) as raised:
            list(iter_branches(source, [Branch("Crash it.", agent=crashing)], raise_on_error=True))
        assert raised.value.tool_name == CrashTool.name and "broke on 'x'" in raised.value.reason

    def test_missing_credentials_fail_at_once(self, source, stub, monkeypatch):
        """No API key anywhere: one attempt, nothing sent, a clear BranchRunError."""
        for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY"):
            monkeypatch.delenv(name, raising=False)
        keyless = Agent(llm=LLM(model="openai/stub-model", base_url=stub.base_url))
        sent = len(stub.requests)
        with pytest.raises(BranchRunError) as raised:
            next(iter_branches(source, [Branch("Hi.", agent=keyless)], raise_on_error=True))
        assert "Missing credentials" in raised.value.reason
        assert "after 1 attempt(s)" in raised.value.reason
        assert len(stub.requests) == sent


class TestResultsAsTheyCome:
    def test_the_first_result_comes_while_another_branch_still_runs(self, tmp_path):
        """iter_branches yields a finished branch while another is still held by the LLM."""
        release = threading.Event()

        def brain(request):
            said = request["messages"][-1]["content"]
            if "HOLD" in str(said):
                release.wait(120)
            return default_brain(request)

        with StubLLMServer(brain=brain) as stub:
            try:
                llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
                source = Conversation(agent=Agent(llm=llm), workspace=tmp_path)
                source.send_message("Hello.")
                suite = iter_branches(source, ["HOLD on.", "Say hi."])
                first = next(suite)
                assert (first.index, first.status) == (1, "finished")
                release.set()
                (second,) = list(suite)
                assert (second.index, second.status) == (0, "finished")
            finally:
                release.set()

    def test_on_result_hears_every_branch_once(self, source):
        """on_result gets each branch's result once, as it ends."""
        heard = []
        runs = run_branches(source, ["a", "b", "c"], on_result=heard.append)
        assert sorted(r.index for r in heard) == [0, 1, 2]
        assert [r.fork for r in sorted(heard, key=lambda r: r.index)] == list(runs)

    def test_ctrl_c_in_the_thread_pool_cancels_what_has_not_started(self, tmp_path):
        """KeyboardInterrupt while branches run in threads: it propagates; a branch not yet
        started is recorded cancelled and never calls the LLM."""
        release = threading.Event()

        def brain(request):
            if "HOLD" in str(request["messages"][-1]["content"]):
                release.wait(120)
            return default_brain(request)

        with StubLLMServer(brain=brain) as stub:
            try:
                llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
                store = SQLiteStore(tmp_path / "s.db")
                source = Conversation(agent=Agent(llm=llm), workspace=tmp_path, store=store)
                source.send_message("Hello.")

                def interrupt(result):
                    raise KeyboardInterrupt

                with pytest.raises(KeyboardInterrupt):
                    run_branches(
                        source,
                        [
                            Branch("Say hi.", title="first"),
                            Branch("HOLD.", title="held"),
                            Branch("Never.", title="queued"),
                        ],
                        max_workers=1,
                        on_result=interrupt,
                    )
                (queued,) = store.list(tags={"title": "queued"})
                state = store.load(queued.id)
                assert state.execution_status is ExecutionStatus.ERROR
                assert "cancelled" in state.events[-1].error
                assert all("Never." not in str(r.messages) for r in stub.requests)
            finally:
                release.set()
