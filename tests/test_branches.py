"""run_branches: A/B fan-out of one conversation, run concurrently against the stub."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from rich.cells import cell_len
from rich.console import Console

from cowconv import (
    LLM,
    Agent,
    Branch,
    BranchesError,
    BranchRow,
    BranchRunError,
    Conversation,
    ExecutionStatus,
    MessageEvent,
    SQLiteStore,
    SuiteReport,
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


class TestSuiteReport:
    """The report of an A/B suite over two models, as a person and a program read it."""

    @pytest.fixture
    def runs(self, stub, tmp_path):
        other = Agent(llm=LLM(**{**stub.llm_settings(), "model": "openai/stub-model-large"}))
        source = Conversation(agent=Agent(llm=LLM(**stub.llm_settings())), workspace=tmp_path)
        source.send_message("Propose a plan.")
        long_answer = "Plan with many words " * 12
        stub.script(*[StubReply.text(f"Answer {n}. " + long_answer) for n in range(4)])
        branches = [
            Branch("Be bold.", tags={"variant": "bold"}),
            Branch("Be careful.", tags={"variant": "careful"}),
            Branch("Be bold.", tags={"variant": "bold"}, agent=other),
            Branch("Be careful.", tags={"variant": "careful"}, agent=other, title="careful L"),
        ]
        return run_branches(source, branches, max_workers=1)

    def test_table_fits_80_columns_and_wraps_only_the_answer(self, runs):
        """At 80 columns every line fits; number, model, variant and status cells are whole."""
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(runs.report().table())
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= 80
        header = next(line for line in lines if line.startswith("#"))
        assert header.split()[:9] == [
            "#",
            "variant",
            "model",
            "status",
            "steps",
            "cost",
            "$",
            "tokens",
            "wall",
        ]
        firsts = [line for line in lines if line[:1].isdigit()]
        assert [line.split()[:4] for line in firsts] == [
            ["0", "bold", "stub-model", "finished"],
            ["1", "careful", "stub-model", "finished"],
            ["2", "bold", "stub-model-la…", "finished"],
            ["3", "careful", "stub-model-la…", "finished"],
        ]
        assert "…" not in "".join(line[:60] for line in firsts).replace("stub-model-la…", "")
        # The answer wraps over the following lines: nothing of it is lost.
        text = " ".join(line[60:].strip() for line in lines[lines.index(firsts[0]) :])
        assert "Answer 3. Plan with many words" in text

    def test_totals_by_variant_and_by_model(self, runs):
        """totals() groups by any tag, or by model; every branch counts once."""
        report = runs.report()
        by_variant = {total.group: total for total in report.totals()}
        assert list(by_variant) == ["bold", "careful"]
        assert [by_variant[v].branches for v in by_variant] == [2, 2]
        assert sum(total.total_tokens for total in by_variant.values()) == sum(
            row.total_tokens for row in report.rows
        )
        by_model = report.totals(by="model")
        assert [(t.group, t.branches, t.finished) for t in by_model] == [
            ("openai/stub-model", 2, 2),
            ("openai/stub-model-large", 2, 2),
        ]
        assert [t.group for t in report.totals(by="missing-tag")] == ["(none)"]
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(report.totals_table(by="model"))
        assert max(len(line) for line in console.export_text().splitlines()) <= 80
        assert json.loads(report.totals_to_json(by="model"))[1]["group"] == (
            "openai/stub-model-large"
        )

    def test_json_has_model_tags_and_each_branch_diff(self, runs):
        """JSON rows carry the full model, the tags and what each branch added."""
        rows = json.loads(runs.report().to_json())
        assert [row["model"] for row in rows] == ["openai/stub-model"] * 2 + [
            "openai/stub-model-large"
        ] * 2
        assert rows[3]["title"] == "careful L" and rows[3]["tags"] == {"variant": "careful"}
        assert rows[0]["added"][0] == "MessageEvent user: Be bold."
        assert rows[0]["added"][1].startswith("MessageEvent agent: Answer 0.")

    def test_plot_is_titled_and_coloured_by_variant(self, runs, tmp_path):
        """plot() writes a titled figure whose bars take one colour per variant."""
        import matplotlib.image

        target = runs.report().plot(tmp_path / "suite.png", title="two models")
        pixels = matplotlib.image.imread(target)
        assert pixels.shape[0] > 100
        svg = runs.report().plot(tmp_path / "suite.svg").read_text()
        assert "4 branches, coloured by variant" in svg
        assert svg.count("#1f77b4") >= 2 and svg.count("#ff7f0e") >= 2  # bold, careful

    def test_html_page_is_self_contained(self, runs, tmp_path):
        """to_html() is one page: totals, table, the plot inline, each branch's diff."""
        page = runs.report().to_html(title="<A/B> suite")
        assert "<h1>&lt;A/B&gt; suite</h1>" in page
        assert 'src="data:image/png;base64,' in page
        assert "http://" not in page and "https://" not in page
        assert page.count("<h3>") == 4 and "+ MessageEvent user: Be careful." in page

    def test_tables_do_not_import_matplotlib(self, stub, tmp_path):
        """A report's table, JSON and totals leave matplotlib unimported."""
        code = (
            "import sys, io\n"
            "from rich.console import Console\n"
            "from cowconv import SuiteReport\n"
            "report = SuiteReport(rows=())\n"
            "Console(file=io.StringIO()).print(report.table(), report.totals_table())\n"
            "report.to_json(); report.totals_to_json()\n"
            "print('matplotlib' in sys.modules)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert result.stdout == "False\n", result.stderr


_rows = st.lists(
    st.builds(
        BranchRow,
        index=st.integers(0, 99),
        conversation_id=st.uuids().map(str),
        title=st.none() | st.text(max_size=8),
        tags=st.dictionaries(st.sampled_from(["variant", "arm"]), st.sampled_from("AB")),
        status=st.sampled_from(["finished", "error", "stuck"]),
        steps=st.integers(0, 5),
        cost=st.floats(0, 1, allow_nan=False),
        tokens=st.fixed_dictionaries(
            {"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**4)}
        ),
        wall_seconds=st.none() | st.floats(0, 100, allow_nan=False),
        final_answer=st.none() | st.text(max_size=300),
        error=st.none(),
        model=st.sampled_from(["openai/a", "anthropic/b"]),
    ),
    max_size=12,
)


class TestTotalsProperties:
    @settings(max_examples=40)
    @given(rows=_rows, by=st.sampled_from(["variant", "arm", "model"]))
    def test_totals_partition_the_rows(self, rows, by):
        """Each branch is in exactly one group, in order of first appearance; the totals
        add up to the suite's, and the table of any rows fits 80 columns."""
        report = SuiteReport(rows=tuple(rows))
        totals = report.totals(by=by)
        assert [t.group for t in totals] == list(dict.fromkeys(r.group(by) for r in rows))
        assert sum(t.branches for t in totals) == len(rows)
        assert sum(t.finished for t in totals) == sum(r.status == "finished" for r in rows)
        assert sum(t.total_tokens for t in totals) == sum(r.total_tokens for r in rows)
        assert math.isclose(sum(t.cost for t in totals), sum(r.cost for r in rows), abs_tol=1e-9)
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(report.table(by=by), report.totals_table(by=by))
        lines = console.export_text().splitlines()
        assert max((cell_len(line) for line in lines), default=0) <= 80  # terminal cells
