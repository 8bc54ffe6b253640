"""One REST protocol, both directions, with real processes.

* OpenHands' own ``RemoteConversation`` (openhands-sdk 1.58.2, in the Python
  >= 3.12 environment ``tests/openhands/venv.py`` builds from the registry,
  cached) drives a cowconv agent server (real uvicorn on 127.0.0.1, with a
  session key, so the WebSocket's first-message auth is exercised): create
  with OpenHands' terminal tool, send a message, run against the stub LLM
  (which has the command run), list events, fork with a title, tags and an
  event, navigate, pause.
* cowconv's ``RemoteConversation`` does the same against ``python -m
  openhands.agent_server`` (a subprocess of that environment), whose own
  terminal tool runs the command.
* ``TestClient(create_app())`` (``Host: testserver``) works on ``/api``
  routes; the same ``Host`` over a network is still refused.

The first run builds the OpenHands environment (several minutes, once per
machine; see ``tests/openhands/README.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from cowconv import LLM, Agent, Conversation, Tool, Workspace
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.testing import StubLLMServer, StubReply
from tests.conftest import openhands_temporary_directory

# Building the environment (first run only) takes minutes; each test then takes under two.
pytestmark = pytest.mark.timeout(3600)

SESSION_KEY = "wire-test-session-key"

# Our script, run by OpenHands' SDK: what an OpenHands user's code does with a server.
OPENHANDS_CLIENT = """
import json, os, sys
from pydantic import SecretStr
from openhands.sdk import LLM, Agent, Conversation
from openhands.sdk.workspace import RemoteWorkspace
from openhands.sdk import Tool
from openhands.tools.terminal import TerminalTool

url, base_url, working_dir = sys.argv[1:4]
agent = Agent(
    llm=LLM(model="openai/stub", base_url=base_url, api_key=SecretStr("sk-stub"),
            usage_id="agent", num_retries=0),
    tools=[Tool(name=TerminalTool.name)],
)
workspace = RemoteWorkspace(host=url, working_dir=working_dir, api_key=os.environ["SESSION_KEY"])
conversation = Conversation(
    agent=agent, workspace=workspace, visualizer=None, delete_on_close=False
)
out = {"class": type(conversation).__name__, "id": str(conversation.id)}
conversation.send_message("Run `echo hi-from-openhands` please")
conversation.run()
events = [e for e in conversation.state.events if e.kind != "ConversationStateUpdateEvent"]
out["kinds"] = [e.kind for e in events]
out["texts"] = [e.llm_message.content[0].text for e in events if e.kind == "MessageEvent"]
out["commands"] = [e.tool_call.arguments for e in events if e.kind == "ActionEvent"]
out["outputs"] = [e.observation.content[0].text for e in events if e.kind == "ObservationEvent"]
out["status"] = conversation.state.execution_status.value
first = next(e for e in events if e.kind == "MessageEvent" and e.source == "user")
out["first_message_id"] = first.id
fork = conversation.fork(title="Branch B", tags={"variant": "b"}, from_event_id=first.id)
out["fork_id"] = str(fork.id)
out["fork_kinds"] = sorted(
    e.kind for e in fork.state.events if e.kind != "ConversationStateUpdateEvent"
)
conversation.navigate_to(first.id)
out["leaf_after_navigate"] = conversation.state.model_dump()["leaf_event_id"]
conversation.pause()
out["status_after_pause"] = conversation.state.execution_status.value
fork.close()
conversation.close()
print("RESULT " + json.dumps(out))
"""


def _environment() -> dict[str, str]:
    return {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENHANDS_SUPPRESS_BANNER": "1",
        "SESSION_KEY": SESSION_KEY,
        "TMPDIR": openhands_temporary_directory(),
    }


class TestOpenHandsClientOnCowconvServer:
    @pytest.mark.slow
    def test_create_message_run_events_fork_navigate_pause(
        self, openhands: Path, stub: StubLLMServer, tmp_path: Path
    ):
        script = tmp_path / "openhands_client.py"
        script.write_text(OPENHANDS_CLIENT)
        working_dir = tmp_path / "work"
        working_dir.mkdir()
        app = create_app(data_dir=tmp_path / "data", session_api_key=SESSION_KEY)
        with BackgroundServer(app) as server:
            done = subprocess.run(
                [str(openhands), str(script), server.url, stub.base_url, str(working_dir)],
                capture_output=True,
                text=True,
                env=_environment(),
                timeout=900,
            )
            assert done.returncode == 0, done.stderr[-4000:]
            result = json.loads(done.stdout.split("RESULT ", 1)[1])
            headers = {"X-Session-API-Key": SESSION_KEY}
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
                source = client.get(f"/api/conversations/{result['id']}").json()
                fork = client.get(f"/api/conversations/{result['fork_id']}").json()

        assert result["class"] == "RemoteConversation"
        # the message was sent; the run, through the stub LLM, ran the command with the
        # terminal tool OpenHands' agent asked for, and OpenHands' client read every event
        assert result["kinds"] == [
            "SystemPromptEvent",
            "MessageEvent",
            "ActionEvent",
            "ObservationEvent",
            "MessageEvent",
        ]
        assert result["commands"] == ['{"command": "echo hi-from-openhands"}']
        assert result["outputs"] == ["hi-from-openhands\n"]
        assert result["texts"] == [
            "Run `echo hi-from-openhands` please",
            "The terminal printed:\nhi-from-openhands\n\n[exit code: 0]",
        ]
        assert result["status"] == "finished"
        assert len(stub.requests) == 2
        # the fork: its title and tags, the history up to the event, linked to its source
        assert result["fork_kinds"] == ["MessageEvent", "SystemPromptEvent"]
        assert fork.get("title") == "Branch B", fork
        assert fork["tags"]["variant"] == "b"
        assert fork["forked_from_conversation_id"] == result["id"]
        assert fork["forked_from_event_id"] == result["first_message_id"]
        assert fork["event_count"] == 2
        # navigate moved the active branch; pause answered
        assert result["leaf_after_navigate"] == result["first_message_id"]
        assert source["leaf_event_id"] == result["first_message_id"]
        assert result["status_after_pause"] in ("finished", "paused")
        # what OpenHands' client sent and cowconv does not implement came back as sent
        assert source["stuck_detection"] is True
        assert source["agent"]["kind"] == "Agent"
        assert source["agent"]["llm"]["api_key"] == "**********"
        assert source["agent"]["llm"]["usage_id"] == "agent"
        assert source["agent"]["tools"] == [{"name": "terminal", "params": {}}]


# OpenHands' client with its terminal and task tracker: the plan comes back typed.
OPENHANDS_TRACKER_CLIENT = """
import json, os, sys
from pydantic import SecretStr
from openhands.sdk import LLM, Agent, Conversation, Tool
from openhands.sdk.workspace import RemoteWorkspace
from openhands.tools.task_tracker import TaskTrackerObservation, TaskTrackerTool
from openhands.tools.terminal import TerminalTool

url, base_url, working_dir = sys.argv[1:4]
agent = Agent(
    llm=LLM(model="openai/stub", base_url=base_url, api_key=SecretStr("sk-stub"),
            usage_id="agent", num_retries=0),
    tools=[Tool(name=TerminalTool.name), Tool(name=TaskTrackerTool.name)],
)
workspace = RemoteWorkspace(host=url, working_dir=working_dir, api_key=os.environ["SESSION_KEY"])
conversation = Conversation(agent=agent, workspace=workspace, visualizer=None)
conversation.send_message("Plan the work")
conversation.run()
observations = [e.observation for e in conversation.state.events if e.kind == "ObservationEvent"]
out = {
    "status": conversation.state.execution_status.value,
    "typed": [isinstance(o, TaskTrackerObservation) for o in observations],
    "commands": [o.command for o in observations],
    "task_lists": [[t.model_dump() for t in o.task_list] for o in observations],
    "texts": [o.text for o in observations],
}
conversation.close()
print("RESULT " + json.dumps(out))
"""


class TestOpenHandsClientRunsTheTaskTracker:
    @pytest.mark.slow
    def test_plan_and_view_come_back_as_openhands_observations(
        self, openhands: Path, stub: StubLLMServer, tmp_path: Path
    ):
        """OpenHands' client sends its task tracker; cowconv's server runs it; the client reads
        TaskTrackerObservations (OpenHands' own class) with the plan."""
        script = tmp_path / "openhands_tracker_client.py"
        script.write_text(OPENHANDS_TRACKER_CLIENT)
        working_dir = tmp_path / "work"
        working_dir.mkdir()
        tasks = [{"title": "Write tests", "notes": "hypothesis", "status": "in_progress"}]
        stub.script(
            StubReply.tool_call("task_tracker", command="plan", task_list=tasks),
            StubReply.tool_call("task_tracker", command="view"),
            StubReply.text("Planned."),
        )
        app = create_app(data_dir=tmp_path / "data", session_api_key=SESSION_KEY)
        with BackgroundServer(app) as server:
            done = subprocess.run(
                [str(openhands), str(script), server.url, stub.base_url, str(working_dir)],
                capture_output=True,
                text=True,
                env=_environment(),
                timeout=900,
            )
        assert done.returncode == 0, done.stderr[-4000:]
        result = json.loads(done.stdout.split("RESULT ", 1)[1])
        assert result["status"] == "finished"
        assert result["typed"] == [True, True]
        assert result["commands"] == ["plan", "view"]
        assert result["task_lists"] == [tasks, tasks]
        assert result["texts"] == [
            "Task list has been updated with 1 item(s).",
            "# Task List\n\n1. 🔄 Write tests\n   hypothesis",
        ]
        sent = [tool["function"]["name"] for tool in stub.requests[0].body["tools"]]
        assert sorted(sent) == ["task_tracker", "terminal"]


class Recording(httpx.HTTPTransport):
    """Real HTTP, every request kept."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return super().handle_request(request)

    def __enter__(self) -> Recording:
        return self


class TestCowconvClientOnOpenHandsServer:
    @pytest.mark.slow
    def test_create_message_run_events_fork_navigate_pause(
        self, openhands_server: str, stub: StubLLMServer, tmp_path: Path
    ):
        seen: list[str] = []
        agent = Agent(
            llm=LLM(model="openai/stub", base_url=stub.base_url, api_key="sk-stub", num_retries=0),
            tools=[Tool(name="terminal")],
        )
        conversation = Conversation(
            agent=agent,
            workspace=Workspace(host=openhands_server, working_dir=str(tmp_path)),
            callbacks=[lambda event: seen.append(event.kind)],
        )
        try:
            message = conversation.send_message("Run `echo hi-from-cowconv` now")
            assert message.text == "Run `echo hi-from-cowconv` now"
            assert seen == ["SystemPromptEvent", "MessageEvent"]

            # OpenHands' server runs the command with its terminal tool
            conversation.run()
            state = conversation.state
            assert state.execution_status == "finished"
            kinds = ["SystemPromptEvent", "MessageEvent", "ActionEvent", "ObservationEvent"]
            assert [e.kind for e in state.events] == [*kinds, "MessageEvent"]
            assert seen == [e.kind for e in state.events]
            action, observation = state.events[2], state.events[3]
            assert action.arguments["command"] == "echo hi-from-cowconv"
            # The output and the answer as the server recorded them. (On a loaded machine the
            # first output of OpenHands' terminal can be its shell's setup lines instead of the
            # command's: OpenHands' own behaviour, seen in CI, which this client only reads.)
            with httpx.Client(base_url=openhands_server, timeout=60) as client:
                search = f"/api/conversations/{conversation.id}/events/search"
                served = client.get(search, params={"limit": 100}).json()["items"]
            by_id = {item["id"]: item for item in served}
            content = by_id[observation.id]["observation"]["content"]
            assert observation.output == "".join(part["text"] for part in content)
            answer = by_id[state.events[-1].id]["llm_message"]["content"]
            assert state.events[-1].text == "".join(part["text"] for part in answer)
            assert observation.output and state.events[-1].text

            fork = conversation.fork(
                title="Branch B", tags={"variant": "b"}, from_event_id=message.id
            )
            try:
                assert fork.state.title == "Branch B"
                assert fork.state.tags["variant"] == "b"
                assert [e.id for e in fork.state.events][-1] == message.id
                assert fork.state.forked_from_conversation_id == conversation.id
            finally:
                fork.close()

            conversation.navigate_to(message.id)
            assert conversation.state.leaf_event_id == message.id
            with httpx.Client(base_url=openhands_server, timeout=60) as client:
                info = client.get(f"/api/conversations/{conversation.id}").json()
            assert info["leaf_event_id"] == message.id

            conversation.pause()
            assert conversation.state.execution_status in ("finished", "paused")
        finally:
            conversation.close()

    def test_fork_body_is_openhands(self, stub: StubLLMServer, tmp_path: Path):
        """The fork body: ``title`` its own key, nothing sent that is unset (the server logs it)."""
        app = create_app(data_dir=tmp_path / "data")
        agent = Agent(llm=LLM(model="openai/stub", base_url=stub.base_url, api_key="sk"))
        with BackgroundServer(app) as server, Recording() as transport:
            conversation = Conversation(
                agent=agent,
                workspace=Workspace(host=server.url, working_dir=str(tmp_path)),
                transport=transport,
            )
            conversation.send_message("hi")
            conversation.fork(title="T").close()
            conversation.fork(tags={"a": "b"}).close()
            conversation.close()
        bodies = [json.loads(r.content) for r in transport.requests if r.url.path.endswith("/fork")]
        for body in bodies:  # the client names its forks (a UUID, as OpenHands' server needs)
            uuid.UUID(body.pop("id"))
        assert bodies == [
            {"reset_metrics": True, "title": "T"},
            {"reset_metrics": True, "tags": {"a": "b"}},
        ]


class TestInProcessTestClient:
    def test_api_routes_answer(self, tmp_path: Path):
        client = TestClient(create_app())  # Host: testserver, as FastAPI's docs test apps
        body = {
            "agent": {"kind": "Agent", "llm": {"model": "openai/gpt-4o", "api_key": "sk-1"}},
            "workspace": {"kind": "LocalWorkspace", "working_dir": str(tmp_path)},
        }
        created = client.post("/api/conversations", json=body)
        assert created.status_code == 201
        conversation_id = created.json()["id"]
        assert client.get(f"/api/conversations/{conversation_id}").status_code == 200
        sent = client.post(
            f"/api/conversations/{conversation_id}/events",
            json={"role": "user", "content": [{"type": "text", "text": "hi"}], "run": False},
        )
        assert sent.json()["success"] is True
        page = client.get(f"/api/conversations/{conversation_id}/events/search").json()
        assert [item["kind"] for item in page["items"]] == ["SystemPromptEvent", "MessageEvent"]
        with client.websocket_connect(f"/sockets/events/{conversation_id}") as socket:
            assert socket.receive_json()["key"] == "full_state"

    def test_test_host_over_the_network_is_refused(self, tmp_path: Path):
        with BackgroundServer(create_app(data_dir=tmp_path)) as server:
            answer = httpx.get(
                f"{server.url}/api/conversations", headers={"Host": "testserver"}, timeout=60
            )
        assert answer.status_code == 400


def test_environment_python_is_new_enough(openhands: Path):
    done = subprocess.run(
        [str(openhands), "-c", "import sys; print(sys.version_info >= (3, 12))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "True"
    assert sys.version_info >= (3, 11)
