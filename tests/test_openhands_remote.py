"""What OpenHands' own client tests asked of cowconv, checked on real servers.

A run that ends in ``error`` or ``stuck`` raises :class:`~cowconv.ConversationRunError` on
every backend; a message of another role than ``user`` is a
:class:`~cowconv.MessageRoleError` (OpenHands' ``AssertionError`` too); a fork on an
OpenHands agent server is made from the server's answer; the conversation info a REST read
brings does not drop what only the events socket brought; the routers take UUIDs only
unless the app takes names. The OpenHands-protocol tests use a real cowconv server on
127.0.0.1 seen through :class:`~tests.test_remote_openhands_client.Anonymous`, so the client
speaks to it as to any OpenHands agent server.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cowconv.backends.remote as remote_module
from cowconv import (
    Agent,
    Conversation,
    ConversationRunError,
    ConversationStateUpdateEvent,
    ExecutionStatus,
    Message,
    MessageRoleError,
    RemoteConversation,
    TextContent,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, InProcessTransport, create_app
from cowconv.testing import StubLLMServer, StubReply
from tests.test_remote_openhands_client import KEY, Anonymous, _anonymous, _workspace


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BackgroundServer]:
    """A cowconv agent server on 127.0.0.1 (with a session key)."""
    with BackgroundServer(create_app(data_dir=tmp_path / "data", session_api_key=KEY)) as running:
        yield running


class TestRunEndingInErrorOrStuckRaises:
    """One rule on every backend: the run is recorded, then raised."""

    @pytest.mark.slow
    def test_on_an_openhands_server(
        self, served: BackgroundServer, stub_agent: Agent, stub: StubLLMServer, tmp_path: Path
    ):
        """The wait raises it, with the status the server reported and the error it recorded."""
        stub.script(StubReply.error(400, "bad request"))
        conversation, _ = _anonymous(stub_agent, served, tmp_path)
        try:
            conversation.send_message("hello")
            with pytest.raises(ConversationRunError, match="ended in error: .*bad request") as err:
                conversation.run(poll_interval=0.05)
            assert err.value.conversation_id == conversation.id
            assert conversation.state.execution_status == ExecutionStatus.ERROR
            stub.script(StubReply.text("recovered"))
            conversation.run(poll_interval=0.05)  # run() again continues from the history
            assert conversation.state.events[-1].text == "recovered"
        finally:
            conversation.close()

    def test_stuck_on_every_backend(self, stub: StubLLMServer, stub_agent: Agent, tmp_path: Path):
        """The iteration limit ends a run stuck: raised locally, and through cowconv's server."""
        stub.brain = lambda request: StubReply.tool_call("terminal", command="true")
        app = create_app()
        with InProcessTransport(app) as transport:
            remote = Conversation(
                agent=stub_agent,
                workspace=Workspace(host="http://127.0.0.1", working_dir=str(tmp_path)),
                max_iteration_per_run=2,
                transport=transport,
                visualizer=None,
            )
            local = Conversation(agent=stub_agent, workspace=tmp_path, max_iteration_per_run=2)
            for conversation in (local, remote):
                conversation.send_message("loop")
                with pytest.raises(ConversationRunError, match="ended stuck"):
                    conversation.run()
                assert conversation.state.execution_status == ExecutionStatus.STUCK
            remote.close()


class TestMessageRoleError:
    def test_the_same_refusal_on_every_backend(
        self, served: BackgroundServer, stub_agent: Agent, tmp_path: Path
    ):
        """A non-user Message is refused before anything is sent, as OpenHands' assert does."""
        remote, transport = _anonymous(stub_agent, served, tmp_path)
        local = Conversation(agent=stub_agent, workspace=tmp_path)
        message = Message(role="assistant", content=[TextContent(text="not mine to send")])
        try:
            for conversation in (local, remote):
                with pytest.raises(AssertionError, match="Only user messages are allowed") as err:
                    conversation.send_message(message)
                assert isinstance(err.value, MessageRoleError) and isinstance(err.value, ValueError)
                assert err.value.role == "assistant"
            assert not transport.sent("POST", "/events")
            assert len(local.state.events) == 0
        finally:
            remote.close()


class TestForkOnAnOpenHandsServer:
    def test_the_fork_takes_the_servers_tags(
        self, served: BackgroundServer, stub_agent: Agent, tmp_path: Path, monkeypatch
    ):
        """The fork is made from the server's answer, by the class the module names."""
        made: list[dict[str, Any]] = []

        class Recording(RemoteConversation):
            def __init__(self, **options: Any) -> None:
                made.append(options)
                super().__init__(**options)

        monkeypatch.setattr(remote_module, "RemoteConversation", Recording, raising=False)
        conversation, _ = _anonymous(stub_agent, served, tmp_path, tags={"owner": "ci"})
        fork = conversation.fork(title="B", tags={"variant": "b"})
        try:
            assert type(fork) is Recording
            (options,) = made
            assert options["tags"] == {"variant": "b", "title": "B"}  # as the server answered
            assert options["conversation_id"] == str(fork.id) != str(conversation.id)
            assert fork.state.tags == {"variant": "b", "title": "B"}
            assert fork.agent.llm.api_key == stub_agent.llm.api_key  # the fork can run
        finally:
            fork.close()
            conversation.close()

    def test_without_a_class_named_there_the_fork_is_the_sources(
        self, served: BackgroundServer, stub_agent: Agent, tmp_path: Path, monkeypatch
    ):
        """Nothing set on the module: the fork is a RemoteConversation like its source."""
        monkeypatch.delattr(remote_module, "RemoteConversation", raising=False)
        conversation, transport = _anonymous(stub_agent, served, tmp_path)
        fork = conversation.fork(title="C")
        try:
            assert type(fork) is RemoteConversation and fork.state.title == "C"
            (sent,) = transport.sent("POST", "/fork")
            body = json.loads(sent.read())
            assert body["title"] == "C" and body["reset_metrics"] is True and "tags" not in body
        finally:
            fork.close()
            conversation.close()


class _NoStats(Anonymous):
    """An OpenHands-like server whose conversation info carries no ``stats``."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "GET" and request.url.path.count("/") == 3:  # /api/conversations/x
            response.read()
            body = response.json()
            if isinstance(body, dict):
                body.pop("stats", None)
                return httpx.Response(response.status_code, json=body, request=request)
        return response


class TestStreamedFieldsOutliveARestRead:
    def test_the_streamed_cost_is_reported_on_close(
        self, served: BackgroundServer, stub_agent: Agent, tmp_path: Path
    ):
        """A REST read without stats keeps the stats the socket streamed; close() reports them."""
        workspace = _workspace(served, tmp_path)
        conversation = Conversation(
            agent=stub_agent, workspace=workspace, transport=_NoStats(), visualizer=None
        )
        stats = {"usage_to_metrics": {"agent": {"accumulated_cost": 0.75}}}
        conversation.update_state_from_event(ConversationStateUpdateEvent(key="stats", value=stats))
        assert conversation.state.execution_status == ExecutionStatus.IDLE  # a REST read
        conversation.close()
        assert workspace.accumulated_cost == 0.75


_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,24}", fullmatch=True)


@pytest.fixture(scope="module")
def strict() -> Iterator[TestClient]:
    with TestClient(create_app(named_conversations=False)) as client:
        yield client


@pytest.fixture(scope="module")
def named() -> Iterator[TestClient]:
    with TestClient(create_app()) as client:
        yield client


class TestConversationIds:
    @settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(name=_NAMES)
    def test_a_name_is_a_422_where_uuids_only(self, strict: TestClient, named: TestClient, name):
        """UUIDs only: a name in a path or in ids is OpenHands' 422; with names, a 404 / null."""
        for path in (f"/api/conversations/{name}", f"/api/conversations/{name}/events/search"):
            refused = strict.get(path)
            assert refused.status_code == 422, path
            assert refused.json()["detail"][0]["type"] == "uuid_parsing"
            assert named.get(path).status_code == 404
        assert strict.get("/api/conversations", params={"ids": [name]}).status_code == 422
        assert named.get("/api/conversations", params={"ids": [name]}).json() == [None]

    @settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(conversation_id=st.uuids())
    def test_a_uuid_is_taken_either_way(self, strict: TestClient, conversation_id: uuid.UUID):
        """Any UUID passes the check: the service answers (404 for an unknown one)."""
        assert strict.get(f"/api/conversations/{conversation_id}").status_code == 404
        page = strict.get("/api/conversations", params={"ids": [str(conversation_id)]})
        assert page.json() == [None]

    def test_bodies_follow_the_same_rule(self, strict: TestClient, tmp_path: Path):
        """A create or fork body naming a non-UUID id is a 422 naming the field."""
        agent = {"llm": {"model": "openai/gpt-4o", "api_key": "sk-ids"}}
        start = {"agent": agent, "workspace": {"working_dir": str(tmp_path)}}
        refused = strict.post("/api/conversations", json={**start, "conversation_id": "mine"})
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["loc"] == ["body", "conversation_id"]
        created = strict.post("/api/conversations", json=start)
        assert created.status_code == 201
        source = created.json()["id"]
        fork = strict.post(f"/api/conversations/{source}/fork", json={"id": "my-fork"})
        assert fork.status_code == 422 and fork.json()["detail"][0]["loc"] == ["body", "id"]
        assert strict.post(f"/api/conversations/{source}/fork", json={}).status_code == 201

    def test_create_app_takes_names(self, named: TestClient, tmp_path: Path):
        """cowconv's default: a named conversation is created and found by its name."""
        agent = {"llm": {"model": "openai/gpt-4o", "api_key": "sk-ids"}}
        body = {
            "agent": agent,
            "workspace": {"working_dir": str(tmp_path)},
            "conversation_id": "sales-report",
        }
        assert named.post("/api/conversations", json=body).status_code in (200, 201)
        assert named.get("/api/conversations/sales-report").json()["id"] == "sales-report"
