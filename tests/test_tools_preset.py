"""cowconv.tools.preset: OpenHands' default agent, run in process and by the agent server.

``tests/data/openhands_default_agent.json`` is what OpenHands' SDK 1.58.2 itself
writes for its default agent, made once with its environment's python::

    from openhands.sdk import LLM
    from openhands.tools.preset.default import get_default_agent
    agent = get_default_agent(LLM(model="openai/stub", base_url="http://127.0.0.1:1/v1",
                                  usage_id="agent"), cli_mode=True)
    print(json.dumps(agent.model_dump(mode="json"), indent=2, sort_keys=True))

less the two LLMs' sampling keys that are null by default and that the project's word check
refuses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationState,
    ExecutionStatus,
    InvalidValueError,
    Message,
    MessageToolCall,
    ObservationEvent,
    Tool,
    Workspace,
)
from cowconv.agent.tools import create_tools
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.backends.wire import agent_from_openhands, agent_to_openhands
from cowconv.testing import StubLLMServer, StubReply, TestLLM
from cowconv.tools.browser_use import BrowserToolSet
from cowconv.tools.preset import (
    get_default_agent,
    get_default_condenser,
    get_default_tools,
    register_default_tools,
)
from cowconv.tools.task_tracker import TaskTrackerObservation

DATA = Path(__file__).parent / "data" / "openhands_default_agent.json"
LLM_ = LLM(model="openai/gpt-4o", usage_id="agent")


def names(tools) -> list[str]:
    return [tool.name for tool in tools]


class TestGetDefaultTools:
    def test_the_coding_tools_in_openhands_order(self):
        """terminal, file_editor, task_tracker: what OpenHands' default agent has."""
        assert names(get_default_tools(enable_browser=False)) == [
            "terminal",
            "file_editor",
            "task_tracker",
        ]

    def test_openhands_order_with_every_tool_set(self):
        """The browser, then the sub-agent tool set, as OpenHands' SDK 1.58.2 lists them."""
        assert names(get_default_tools(enable_sub_agents=True)) == [
            "terminal",
            "file_editor",
            "task_tracker",
            "browser_tool_set",
            "task_tool_set",
        ]

    def test_the_browser_tool_set_gives_no_tools(self, tmp_path, caplog):
        """cowconv runs no browser: the tool set makes no tools and says so, as OpenHands'
        does when its browser cannot start."""
        state = ConversationState(
            id="c1", agent=get_default_agent(LLM_), workspace=Workspace(working_dir=str(tmp_path))
        )
        with caplog.at_level("WARNING", logger="cowconv.tools.browser_use"):
            assert create_tools(Tool(name="browser_tool_set"), state) == []
        assert not BrowserToolSet.is_usable()

    def test_sub_agents_add_the_task_tool_set(self):
        """enable_sub_agents adds OpenHands' task tool set by name."""
        assert names(get_default_tools(enable_sub_agents=True))[-1] == "task_tool_set"

    def test_register_default_tools_loads_them(self):
        """Every default tool resolves after register_default_tools()."""
        register_default_tools()
        register_default_tools(enable_browser=False)


class TestGetDefaultAgent:
    def test_tools_and_condenser(self):
        """The default tools and OpenHands' condenser (80 events, first 4 kept, own usage id)."""
        agent = get_default_agent(LLM_, cli_mode=True)
        assert names(agent.tools) == ["terminal", "file_editor", "task_tracker"]
        assert agent.llm == LLM_
        condenser = agent.condenser
        assert condenser is not None
        assert (condenser.max_size, condenser.keep_first) == (80, 4)
        assert condenser.llm == LLM_.model_copy(update={"usage_id": "condenser"})
        assert get_default_condenser(LLM_).llm is LLM_

    def test_cli_mode_only_drops_the_browser(self):
        """cli_mode leaves out the browser tool set and changes nothing else."""
        full, cli = get_default_agent(LLM_), get_default_agent(LLM_, cli_mode=True)
        assert full.tools == (*cli.tools, Tool(name="browser_tool_set"))
        assert full.model_copy(update={"tools": cli.tools}) == cli

    def test_a_finish_tool_schema_is_refused(self):
        """OpenHands' structured finish tool is not there: asking for it is a clear error."""
        with pytest.raises(InvalidValueError, match="finish_tool_response_schema"):
            get_default_agent(LLM_, finish_tool_response_schema={"type": "object"})

    def test_equivalent_to_openhands_own_json(self):
        """OpenHands' default agent JSON reads as cowconv's default agent (tools, condenser)."""
        theirs = json.loads(DATA.read_text())
        ours = agent_to_openhands(
            get_default_agent(
                LLM(model="openai/stub", base_url="http://127.0.0.1:1/v1", usage_id="agent"),
                cli_mode=True,
            ).model_dump(mode="json")
        )
        assert ours["tools"] == theirs["tools"]
        condenser = {k: theirs["condenser"][k] for k in ("kind", "max_size", "keep_first")}
        assert {k: ours["condenser"][k] for k in condenser} == condenser
        assert ours["condenser"]["llm"]["usage_id"] == theirs["condenser"]["llm"]["usage_id"]
        read = Agent.model_validate(agent_from_openhands(theirs))
        assert names(read.tools) == ["terminal", "file_editor", "task_tracker"]
        assert read.condenser is not None
        assert (read.condenser.max_size, read.condenser.keep_first) == (80, 4)

    def test_round_trips_through_json(self):
        """A preset is plain configuration: its JSON reads back equal."""
        agent = get_default_agent(LLM_)
        assert Agent.model_validate_json(agent.model_dump_json()) == agent


def tool_call(n: int, name: str, **arguments: Any) -> Message:
    call = MessageToolCall(id=f"c{n}", name=name, arguments=json.dumps(arguments))
    return Message(role="assistant", content="", tool_calls=[call])


class TestDefaultAgentRuns:
    def test_plans_edits_and_runs_with_the_three_tools(self, tmp_path):
        """A TestLLM-driven run: a plan, a file created by the editor, read by the terminal."""
        target = tmp_path / "hello.py"
        llm = TestLLM.from_messages(
            [
                tool_call(0, "task_tracker", command="plan", task_list=[{"title": "Write it"}]),
                tool_call(
                    1, "file_editor", command="create", path=str(target), file_text="print('hi')\n"
                ),
                tool_call(2, "terminal", command="python3 hello.py"),
                Message(role="assistant", content="Done."),
            ]
        )
        agent = get_default_agent(llm, cli_mode=True)
        with Conversation(agent=agent, workspace=tmp_path) as conversation:
            conversation.send_message("Write hello.py and run it.")
            conversation.run()
            state = conversation.state
        assert state.execution_status is ExecutionStatus.FINISHED
        observed = [e for e in state.events if isinstance(e, ObservationEvent)]
        assert [e.tool_name for e in observed] == ["task_tracker", "file_editor", "terminal"]
        assert isinstance(observed[0].observation, TaskTrackerObservation)
        assert target.read_text() == "print('hi')\n"
        assert observed[2].output == "hi\n"


class TestAgentServerRunsOpenHandsDefaultAgent:
    def test_openhands_default_agent_json_gets_all_three_tools(self, tmp_path):
        """Over real uvicorn: OpenHands' default agent JSON plans and edits through the stub."""
        agent = json.loads(DATA.read_text())
        work = tmp_path / "work"
        work.mkdir()
        target = work / "notes.md"
        tasks = [{"title": "Write the notes", "status": "in_progress"}]
        with StubLLMServer() as stub:
            for llm in (agent["llm"], agent["condenser"]["llm"]):
                llm.update(base_url=stub.base_url, api_key="sk-stub", num_retries=0)
            stub.script(
                StubReply.tool_call("task_tracker", command="plan", task_list=tasks),
                StubReply.tool_call(
                    "file_editor", command="create", path=str(target), file_text="# Notes\n"
                ),
                StubReply.tool_call("task_tracker", command="view"),
                StubReply.text("Written."),
            )
            app = create_app(data_dir=tmp_path / "data")
            with (
                BackgroundServer(app) as server,
                httpx.Client(base_url=server.url, timeout=120) as client,
            ):
                created = client.post(
                    "/api/conversations",
                    json={
                        "agent": agent,
                        "workspace": {"kind": "LocalWorkspace", "working_dir": str(work)},
                        "initial_message": {
                            "role": "user",
                            "content": [{"type": "text", "text": "Plan, then write notes.md"}],
                            "run": True,
                        },
                    },
                )
                assert created.status_code == 201, created.text
                conversation_id = created.json()["id"]
                info = _wait_finished(client, conversation_id)
                events = client.get(
                    f"/api/conversations/{conversation_id}/events/search", params={"limit": 100}
                ).json()["items"]
            sent_tools = [tool["function"]["name"] for tool in stub.requests[0].body["tools"]]
        assert info["execution_status"] == "finished", info
        assert info["agent"]["tools"] == agent["tools"]
        assert sorted(sent_tools) == ["file_editor", "task_tracker", "terminal"]
        assert target.read_text() == "# Notes\n"
        observations = [e["observation"] for e in events if e["kind"] == "ObservationEvent"]
        assert [o["kind"] for o in observations] == [
            "TaskTrackerObservation",
            "FileEditorObservation",
            "TaskTrackerObservation",
        ]
        assert not any(o["is_error"] for o in observations)
        assert observations[2]["task_list"] == [
            {"title": "Write the notes", "notes": "", "status": "in_progress"}
        ]


def _wait_finished(client: httpx.Client, conversation_id: str) -> dict[str, Any]:
    """Follow the run's event stream to its end, then the conversation's info."""
    with client.stream(
        "GET",
        f"/api/conversations/{conversation_id}/events/stream",
        params={"offset": 0, "until_idle": "true"},
    ) as response:
        assert response.status_code == 200
        for _ in response.iter_lines():
            pass
    info: dict[str, Any] = client.get(f"/api/conversations/{conversation_id}").json()
    return info
