"""Tests for cowconv.agent_server: the REST API, its errors, security, stream and store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import Agent
from cowconv.agent_server import (
    SESSION_API_KEY_HEADER,
    BackgroundServer,
    create_app,
)
from cowconv.agent_server.models import ID_WHITESPACE
from cowconv.testing import StubLLMServer, StubReply

# Client timeouts: generous, for a loaded machine (a first run loads litellm, seconds under load).
WAIT = 60.0
SECRET = "sk-very-secret-llm-key"


def create_body(agent: Agent, working_dir: Path | str, **extra: Any) -> dict[str, Any]:
    """The JSON a client sends to create a conversation, credentials in clear."""
    return {
        "agent": agent.model_dump(mode="json", context={"expose_secrets": True}),
        "workspace": {"working_dir": str(working_dir)},
        **extra,
    }


def secret_body(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "agent": {"llm": {"model": "openai/gpt-4o", "api_key": SECRET}},
        "workspace": {"working_dir": str(tmp_path)},
        **extra,
    }


def read_stream(response: httpx.Response) -> list[tuple[str, Any, str | None]]:
    """Parse server-sent events into (kind, data, id) triples."""
    messages: list[tuple[str, Any, str | None]] = []
    kind, data, event_id = "message", [], None
    for line in response.iter_lines():
        if not line:
            if data:
                messages.append((kind, json.loads("\n".join(data)), event_id))
            kind, data, event_id = "message", [], None
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                event_id = value
    return messages


def wait_until_idle(client: httpx.Client | TestClient, conversation_id: str) -> list[Any]:
    """Follow the stream of a started run to its end; the events it delivered."""
    with client.stream(
        "GET",
        f"/api/conversations/{conversation_id}/events/stream",
        params={"offset": 0, "until_idle": "true"},
    ) as response:
        assert response.status_code == 200
        return read_stream(response)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """The app in-process, with a SQLite store under tmp_path."""
    with TestClient(
        create_app(data_dir=tmp_path / "data"), base_url="http://localhost"
    ) as test_client:
        yield test_client


@pytest.fixture
def conversation_id(client: TestClient, stub_agent: Agent, tmp_path: Path) -> str:
    """A conversation with two user messages, on the in-process app."""
    response = client.post("/api/conversations", json=create_body(stub_agent, tmp_path, id="c1"))
    assert response.status_code == 201
    for text in ("one", "two"):
        assert client.post("/api/conversations/c1/messages", json={"text": text}).status_code == 201
    return "c1"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BackgroundServer]:
    """The app on uvicorn on a free loopback port, with a SQLite store under tmp_path."""
    with BackgroundServer(create_app(data_dir=tmp_path / "data")) as background:
        yield background


class TestHealth:
    def test_open_even_with_a_session_key(self):
        """GET /health answers 200 without the session key."""
        with TestClient(create_app(session_api_key="k"), base_url="http://localhost") as client:
            assert client.get("/health").json() == {"status": "ok"}


class TestOpenAPI:
    def test_schema_lists_every_route(self, client: TestClient):
        """/openapi.json describes the fork endpoint and the rest of the API."""
        paths = client.get("/openapi.json").json()["paths"]
        assert "/api/conversations/{conversation_id}/fork" in paths
        assert {"get", "delete"} <= set(paths["/api/conversations/{conversation_id}"])
        assert "/api/conversations/{conversation_id}/events/stream" in paths

    # Each example builds a schema afresh (~0.5 s of CPU).
    @settings(max_examples=10, deadline=None)
    @given(
        key=st.none() | st.text("abc", min_size=1, max_size=3),
        named=st.booleans(),
        size=st.integers(1, 10**9),
        live=st.integers(1, 100),
        hosts=st.lists(st.sampled_from(["a.test", "b.test"]), unique=True),
        origins=st.lists(st.sampled_from(["https://a.test", "https://b.test"]), unique=True),
    )
    def test_an_app_publishes_what_fastapi_builds_for_it(
        self, key, named, size, live, hosts, origins
    ):
        """Apps share one built schema per shape: each app's equals the schema FastAPI
        builds for that app alone (its session key documented or not), in every setting."""
        app = create_app(
            session_api_key=key,
            named_conversations=named,
            max_body_size=size,
            max_live_conversations=live,
            allowed_hosts=hosts,
            allowed_origins=origins,
            allow_unauthenticated=True,  # other hosts without a key are otherwise refused
        )
        published = app.openapi()
        assert published == fresh_schema(app)
        assert ("securitySchemes" in published.get("components", {})) == (key is not None)

    def test_an_apps_schema_is_its_own(self):
        """Changing one app's schema changes no other's, nor the next app's."""
        first, second = create_app(), create_app()
        first.openapi()["info"]["title"] = "changed"
        assert first.openapi()["info"]["title"] == "changed"
        assert second.openapi()["info"]["title"] == create_app().openapi()["info"]["title"]
        assert second.openapi()["info"]["title"] != "changed"

    def test_routes_and_settings_added_later_are_published(self):
        """A route added to an app, or another title, is in its schema (and no other's)."""
        plain = create_app()
        plain.openapi()
        extended = create_app()
        extended.title = "mine"

        @extended.get("/extra")
        def extra() -> dict[str, str]:
            return {}

        schema = extended.openapi()
        assert "/extra" in schema["paths"] and schema["info"]["title"] == "mine"
        assert schema == fresh_schema(extended)
        assert "/extra" not in create_app().openapi()["paths"]


def fresh_schema(app: FastAPI) -> dict[str, Any]:
    """The schema FastAPI builds for ``app`` (nothing shared), with the id pattern the
    server adds to every ``conversation_id`` in a path."""
    app.openapi_schema = None  # FastAPI's cache of its last build
    with warnings.catch_warnings():
        # Empty-tag defaults are pmap(), which pydantic leaves out of a schema with a warning.
        warnings.filterwarnings("ignore", message=r"Default value pmap")
        schema = FastAPI.openapi(app)
    copied = json.loads(json.dumps(schema))
    for operations in copied["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                if parameter["in"] == "path" and parameter["name"] == "conversation_id":
                    parameter["schema"]["pattern"] = f"[^{ID_WHITESPACE}]"
    return copied


class TestCreate:
    def test_created(self, client: TestClient, stub_agent: Agent, tmp_path: Path):
        """201 with the new conversation's info, id and tags as given."""
        body = create_body(stub_agent, tmp_path, id="mine", tags={"team": "a"})
        info = client.post("/api/conversations", json=body).json()
        assert info["id"] == "mine" and info["tags"] == {"team": "a"}
        assert info["event_count"] == 0 and info["execution_status"] == "idle"

    def test_generated_id(self, client: TestClient, stub_agent: Agent, tmp_path: Path):
        """Without an id the server picks a fresh one each time."""
        first = client.post("/api/conversations", json=create_body(stub_agent, tmp_path)).json()
        second = client.post("/api/conversations", json=create_body(stub_agent, tmp_path)).json()
        assert first["id"] != second["id"]

    def test_id_taken(self, client: TestClient, conversation_id: str, stub_agent, tmp_path):
        """200 with the existing conversation, untouched (OpenHands' idempotent start)."""
        body = create_body(stub_agent, tmp_path, id=conversation_id, tags={"other": "x"})
        response = client.post("/api/conversations", json=body)
        assert response.status_code == 200 and response.json()["id"] == conversation_id
        info = client.get(f"/api/conversations/{conversation_id}").json()
        assert info["event_count"] == 3 and "other" not in info["tags"]

    def test_openhands_fields_kept(self, client: TestClient, tmp_path: Path):
        """Fields cowconv does not implement are kept and shown again; secrets never."""
        body = secret_body(tmp_path, stuck_detection=False, user_id="u1")
        body["agent"] = {**body["agent"], "kind": "Agent", "critic": {"x": 1}}
        body["agent"]["llm"] = {**body["agent"]["llm"], "aws_secret_access_key": SECRET}
        created = client.post("/api/conversations", json=body)
        assert created.status_code == 201, created.text
        info = client.get(f"/api/conversations/{created.json()['id']}").json()
        assert info["stuck_detection"] is False and info["user_id"] == "u1"
        assert info["agent"]["critic"] == {"x": 1}
        assert info["agent"]["llm"]["aws_secret_access_key"] == "**********"
        assert SECRET not in created.text + json.dumps(info)

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("confirmation_policy", {"kind": "SometimesConfirm"}),
            ("security_analyzer", {"kind": "NoSuchAnalyzer"}),
            ("hook_config", {"BeforeEverything": []}),
            ("plugins", [{"source": "github:x/y"}]),
            ("secrets", {"TOKEN": "v"}),
            ("conversation_runtime", "docker"),
        ],
    )
    def test_unsafe_openhands_fields_refused(
        self, client: TestClient, tmp_path: Path, field: str, value: Any
    ):
        """422 naming the field where ignoring it would be unsafe (or it is not one cowconv
        knows); nothing is created."""
        response = client.post("/api/conversations", json={**secret_body(tmp_path), field: value})
        assert response.status_code == 422 and field in response.text
        assert client.get("/api/conversations").json()["items"] == []

    @pytest.mark.parametrize(
        "change",
        [
            {"agent": None},
            {"agent": {"kind": "ACPAgent", "llm": {"model": "m", "api_key": SECRET}}},
            {
                "agent": {
                    "llm": {"model": "m", "api_key": SECRET},
                    "tools": [{"name": "t", "params": 5}],
                }
            },
            {"workspace": {"working_dir": "/tmp", "host": "http://elsewhere"}},
            {"tags": {"n": 1}},
            {"id": "has/slash"},
            {"max_iteration_per_run": 0},
        ],
    )
    def test_malformed(self, client: TestClient, tmp_path: Path, change: dict[str, Any]):
        """422 for a malformed body, and the answer never echoes the api key."""
        response = client.post("/api/conversations", json={**secret_body(tmp_path), **change})
        assert response.status_code == 422
        assert SECRET not in response.text

    @pytest.mark.parametrize("content", [b"{nope", b"\xff\xfe\x00"])
    def test_not_json(self, client: TestClient, content: bytes):
        """422 for a body that is not JSON, or not even UTF-8."""
        response = client.post(
            "/api/conversations", content=content, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422


class TestSecrets:
    def test_key_redacted_everywhere(self, client: TestClient, tmp_path: Path):
        """No answer shows the LLM api key; the agent route shows it redacted."""
        info = client.post("/api/conversations", json=secret_body(tmp_path, id="s")).text
        agent = client.get("/api/conversations/s/agent").json()
        listing = client.get("/api/conversations").text
        fork = client.post("/api/conversations/s/fork").text
        assert agent["llm"]["api_key"] == "**********"
        assert all(SECRET not in text for text in (info, json.dumps(agent), listing, fork))


class TestList:
    def test_paged_oldest_first(self, client: TestClient, stub_agent: Agent, tmp_path: Path):
        """limit/offset page through every conversation once; next_offset ends with None."""
        for index in range(5):
            body = create_body(stub_agent, tmp_path, id=f"c{index}")
            assert client.post("/api/conversations", json=body).status_code == 201
        seen, offset = [], 0
        while offset is not None:
            page = client.get("/api/conversations", params={"limit": 2, "offset": offset}).json()
            seen += [item["id"] for item in page["items"]]
            offset = page["next_offset"]
        assert seen == [f"c{index}" for index in range(5)]

    def test_tag_filter(self, client: TestClient, stub_agent: Agent, tmp_path: Path):
        """tag=key=value keeps the conversations carrying every given tag."""
        for cid, tags in [("a", {"x": "1", "y": "2"}), ("b", {"x": "1"}), ("c", {})]:
            client.post(
                "/api/conversations", json=create_body(stub_agent, tmp_path, id=cid, tags=tags)
            )

        def ids(params: dict[str, Any]) -> list[str]:
            page = client.get("/api/conversations", params=params).json()
            return [item["id"] for item in page["items"]]

        assert ids({"tag": "x=1"}) == ["a", "b"]
        assert ids({"tag": ["x=1", "y=2"]}) == ["a"]
        assert ids({"tag": "x=2"}) == []

    @pytest.mark.parametrize(
        "params", [{"tag": "novalue"}, {"limit": 0}, {"offset": -1}, {"offset": 2**63}]
    )
    def test_bad_query(self, client: TestClient, params: dict[str, Any]):
        """422 for a tag filter without '=' or an out-of-range page (never a store overflow)."""
        assert client.get("/api/conversations", params=params).status_code == 422


class TestGetAndDelete:
    def test_get(self, client: TestClient, conversation_id: str):
        """The info of a conversation: its event count and status."""
        info = client.get(f"/api/conversations/{conversation_id}").json()
        # The system prompt, "one", "two".
        assert info["event_count"] == 3 and info["execution_status"] == "idle"

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", ""),
            ("DELETE", ""),
            ("GET", "/agent"),
            ("GET", "/events"),
            ("GET", "/events/stream"),
            ("POST", "/run"),
            ("POST", "/pause"),
            ("POST", "/fork"),
        ],
    )
    def test_unknown_conversation(self, client: TestClient, method: str, path: str):
        """404 for every route on an unknown conversation."""
        response = client.request(method, f"/api/conversations/nope{path}")
        assert response.status_code == 404 and "nope" in response.json()["detail"]

    @pytest.mark.parametrize(
        ("method", "path"),
        [("GET", ""), ("DELETE", ""), ("GET", "/events"), ("POST", "/run"), ("POST", "/fork")],
    )
    def test_blank_conversation_id(self, client: TestClient, method: str, path: str):
        """422 (not a 500) for an id that can never exist: blank, or whitespace only."""
        response = client.request(method, f"/api/conversations/%20{path}")
        assert response.status_code == 422, response.text
        assert "non-empty" in response.json()["detail"]

    def test_unknown_conversation_message(self, client: TestClient):
        """404 when sending a message to an unknown conversation."""
        response = client.post("/api/conversations/nope/messages", json={"text": "hi"})
        assert response.status_code == 404

    def test_delete_keeps_forks(self, client: TestClient, conversation_id: str):
        """200 ``{"success": true}``, then 404; its fork keeps its events."""
        fork = client.post(f"/api/conversations/{conversation_id}/fork").json()
        deleted = client.delete(f"/api/conversations/{conversation_id}")
        assert deleted.status_code == 200 and deleted.json() == {"success": True}
        assert client.get(f"/api/conversations/{conversation_id}").status_code == 404
        events = client.get(f"/api/conversations/{fork['id']}/events").json()
        assert [e["kind"] for e in events["items"]] == [
            "SystemPromptEvent",
            "MessageEvent",
            "MessageEvent",
        ]
        assert [e["llm_message"]["content"][0]["text"] for e in events["items"][1:]] == [
            "one",
            "two",
        ]


class TestEvents:
    def test_pages(self, client: TestClient, conversation_id: str):
        """offset/limit pages; total and next_offset describe the rest."""
        page = client.get(f"/api/conversations/{conversation_id}/events?limit=1").json()
        assert (len(page["items"]), page["total"], page["next_offset"]) == (1, 3, 1)
        assert page["items"][0]["kind"] == "SystemPromptEvent"
        rest = client.get(f"/api/conversations/{conversation_id}/events?offset=1").json()
        assert [e["llm_message"]["content"][0]["text"] for e in rest["items"]] == ["one", "two"]
        assert rest["next_offset"] is None

    def test_after(self, client: TestClient, conversation_id: str):
        """after=<event id> starts right after that event."""
        first = client.get(f"/api/conversations/{conversation_id}/events").json()["items"][1]
        page = client.get(f"/api/conversations/{conversation_id}/events?after={first['id']}")
        assert [e["llm_message"]["content"][0]["text"] for e in page.json()["items"]] == ["two"]

    def test_unknown_after(self, client: TestClient, conversation_id: str):
        """404 for an after id that is not an event of the conversation."""
        response = client.get(f"/api/conversations/{conversation_id}/events?after=nope")
        assert response.status_code == 404

    def test_offset_and_after(self, client: TestClient, conversation_id: str):
        """Both given (the schema allows it): ``offset`` counts on from just after ``after``."""
        events = client.get(f"/api/conversations/{conversation_id}/events").json()["items"]
        first = events[0]["id"]
        page = client.get(
            f"/api/conversations/{conversation_id}/events", params={"offset": 1, "after": first}
        ).json()
        assert [item["id"] for item in page["items"]] == [event["id"] for event in events[2:]]
        missing = client.get(f"/api/conversations/{conversation_id}/events?offset=0&after=x")
        assert missing.status_code == 404


class TestSendMessage:
    def test_recorded(self, client: TestClient, conversation_id: str):
        """201 with the message event, which is now the last event."""
        event = client.post(
            f"/api/conversations/{conversation_id}/messages", json={"text": "three"}
        ).json()
        assert event["kind"] == "MessageEvent" and event["llm_message"]["role"] == "user"
        events = client.get(f"/api/conversations/{conversation_id}/events").json()["items"]
        assert events[-1]["id"] == event["id"]

    def test_malformed(self, client: TestClient, conversation_id: str):
        """422 for a message without text."""
        response = client.post(f"/api/conversations/{conversation_id}/messages", json={"txt": 1})
        assert response.status_code == 422


class TestFork:
    def test_default(self, client: TestClient, conversation_id: str):
        """201 with the fork's info: same events, new id, idle, linked to its source."""
        response = client.post(f"/api/conversations/{conversation_id}/fork")
        assert response.status_code == 201
        fork = response.json()
        assert fork["id"] != conversation_id and fork["event_count"] == 3
        assert fork["forked_from_conversation_id"] == conversation_id
        assert fork["execution_status"] == "idle"

    def test_options(self, client: TestClient, conversation_id: str):
        """id, title, tags and from_event_id shape the fork."""
        first = client.get(f"/api/conversations/{conversation_id}/events").json()["items"][0]
        body = {"id": "f1", "title": "T", "tags": {"k": "v"}, "from_event_id": first["id"]}
        fork = client.post(f"/api/conversations/{conversation_id}/fork", json=body).json()
        assert fork["id"] == "f1" and fork["title"] == "T"
        assert fork["tags"] == {"k": "v", "title": "T"}
        assert fork["event_count"] == 1 and fork["forked_from_event_id"] == first["id"]

    def test_id_taken(self, client: TestClient, conversation_id: str):
        """409 for a fork id that exists, including the source's own."""
        client.post(f"/api/conversations/{conversation_id}/fork", json={"id": "f1"})
        for taken in ("f1", conversation_id):
            response = client.post(f"/api/conversations/{conversation_id}/fork", json={"id": taken})
            assert response.status_code == 409

    def test_unknown_from_event(self, client: TestClient, conversation_id: str):
        """404 for a from_event_id that is not in the source."""
        response = client.post(
            f"/api/conversations/{conversation_id}/fork", json={"from_event_id": "nope"}
        )
        assert response.status_code == 404 and "nope" in response.json()["detail"]

    @pytest.mark.parametrize(
        "body", [{"reset_metrics": "maybe"}, {"tags": ["x"]}, {"bogus": 1}, {"id": ""}, [1]]
    )
    def test_malformed(self, client: TestClient, conversation_id: str, body: Any):
        """422 for a malformed fork body."""
        response = client.post(f"/api/conversations/{conversation_id}/fork", json=body)
        assert response.status_code == 422

    def test_fork_runs_with_credentials(
        self, client: TestClient, stub: StubLLMServer, stub_agent: Agent, tmp_path: Path
    ):
        """A fork made over REST runs against the LLM with the source's api key."""
        client.post("/api/conversations", json=create_body(stub_agent, tmp_path, id="src"))
        client.post("/api/conversations/src/messages", json={"text": "Run `echo from-fork`."})
        fork_id = client.post("/api/conversations/src/fork").json()["id"]
        assert client.post(f"/api/conversations/{fork_id}/run").status_code == 200
        messages = wait_until_idle(client, fork_id)
        events = [data for kind, data, _ in messages if kind == "event"]
        assert not [e for e in events if e["kind"] == "AgentErrorEvent"]
        assert any("from-fork" in e.get("output", "") for e in events)
        assert messages[-1][1]["execution_status"] == "finished"
        keys = {request.headers.get("authorization") for request in stub.requests}
        assert keys == {f"Bearer {stub_agent.llm.api_key.get_secret_value()}"}


class TestRunAndPause:
    def test_run_in_background(self, client: TestClient, conversation_id: str, stub):
        """200 ``{"success": true}`` at once; the stream then delivers the run's events."""
        stub.script(StubReply.text("Done.", delay=0.3))
        response = client.post(f"/api/conversations/{conversation_id}/run")
        assert response.status_code == 200 and response.json() == {
            "success": True,
            "event_count": 3,
        }
        messages = wait_until_idle(client, conversation_id)
        texts = [
            d["llm_message"]["content"][0]["text"]
            for k, d, _ in messages
            if d.get("kind") == "MessageEvent"
        ]
        assert texts[-1] == "Done."
        info = client.get(f"/api/conversations/{conversation_id}").json()
        assert info["execution_status"] == "finished"

    def test_already_running(self, client: TestClient, conversation_id: str, stub):
        """409 for a second run while one is going."""
        stub.script(StubReply.text("Slow.", delay=1.0))
        client.post(f"/api/conversations/{conversation_id}/run")
        assert client.post(f"/api/conversations/{conversation_id}/run").status_code == 409
        assert client.delete(f"/api/conversations/{conversation_id}").status_code == 409
        wait_until_idle(client, conversation_id)

    def test_pause(self, client: TestClient, conversation_id: str, stub):
        """Pause stops the run after its step: status paused, a pause event recorded."""
        stub.script(
            StubReply.tool_call("terminal", command="echo 1", delay=0.5),
            StubReply.text("never"),
        )
        client.post(f"/api/conversations/{conversation_id}/run")
        paused = client.post(f"/api/conversations/{conversation_id}/pause")
        assert paused.status_code == 200 and paused.json() == {"success": True}
        messages = wait_until_idle(client, conversation_id)
        kinds = [d["kind"] for k, d, _ in messages if k == "event"]
        assert "PauseEvent" in kinds
        assert messages[-1][1]["execution_status"] == "paused"

    def test_fork_during_run(self, server: BackgroundServer, stub, stub_agent, tmp_path):
        """A fork taken mid-run holds a prefix of the final history and is idle."""
        stub.script(
            *[StubReply.tool_call("terminal", command=f"echo {n}", delay=0.2) for n in range(6)]
        )
        stub.script(StubReply.text("Done."))
        with httpx.Client(base_url=server.url, timeout=WAIT) as http:
            http.post("/api/conversations", json=create_body(stub_agent, tmp_path, id="r"))
            http.post("/api/conversations/r/messages", json={"text": "go"})
            http.post("/api/conversations/r/run")
            forks = [http.post("/api/conversations/r/fork").json()]
            # The next fork waits until the run has moved on (counted in events, not seconds:
            # on a loaded machine the run's first LLM call can take seconds).
            deadline = time.monotonic() + WAIT
            while len(forks) < 5 and time.monotonic() < deadline:
                info = http.get("/api/conversations/r").json()
                if info["event_count"] > forks[-1]["event_count"]:
                    forks.append(http.post("/api/conversations/r/fork").json())
                elif info["execution_status"] != "running":
                    break
                time.sleep(0.02)
            wait_until_idle(http, "r")
            final = [
                e["id"] for e in http.get("/api/conversations/r/events?limit=1000").json()["items"]
            ]
            for fork in forks:
                assert fork["execution_status"] == "idle"
                ids = [
                    e["id"]
                    for e in http.get(f"/api/conversations/{fork['id']}/events").json()["items"]
                ]
                assert ids == final[: len(ids)] and fork["forked_from_event_count"] == len(ids)
                assert fork["forked_from_event_id"] is None
            assert len({fork["event_count"] for fork in forks}) > 1


class TestConcurrentForks:
    def test_hundred_forks(self, server: BackgroundServer, stub_agent: Agent, tmp_path: Path):
        """100 concurrent fork requests give 100 distinct forks; the source is unchanged."""
        with httpx.Client(
            base_url=server.url, timeout=WAIT, limits=httpx.Limits(max_connections=100)
        ) as http:
            http.post("/api/conversations", json=create_body(stub_agent, tmp_path, id="src"))
            for n in range(20):
                http.post("/api/conversations/src/messages", json={"text": str(n)})
            before = http.get("/api/conversations/src/events?limit=1000").json()

            def fork(n: int) -> httpx.Response:
                return http.post("/api/conversations/src/fork", json={"tags": {"n": str(n)}})

            with ThreadPoolExecutor(100) as pool:
                responses = list(pool.map(fork, range(100)))
            assert {response.status_code for response in responses} == {201}
            ids = {response.json()["id"] for response in responses}
            assert len(ids) == 100
            assert http.get("/api/conversations/src/events?limit=1000").json() == before
            listed = http.get("/api/conversations", params={"limit": 1000}).json()["items"]
            assert ids <= {item["id"] for item in listed}


class TestSessionKey:
    @pytest.fixture
    def keyed(self) -> Iterator[TestClient]:
        with TestClient(
            create_app(session_api_key="s3cret"), base_url="http://localhost"
        ) as test_client:
            yield test_client

    @pytest.mark.parametrize(
        "headers", [{}, {SESSION_API_KEY_HEADER: "wrong"}, {SESSION_API_KEY_HEADER: "ünï"}]
    )
    def test_rejected(self, keyed: TestClient, headers: dict[str, str]):
        """401 on /api without the right X-Session-API-Key."""
        response = keyed.get(
            "/api/conversations",
            headers={k: v.encode() for k, v in headers.items()},  # type: ignore[misc]
        )
        assert response.status_code == 401

    def test_accepted(self, keyed: TestClient, tmp_path: Path):
        """The right key opens every /api route."""
        headers = {SESSION_API_KEY_HEADER: "s3cret"}
        assert keyed.get("/api/conversations", headers=headers).status_code == 200
        response = keyed.post("/api/conversations", json=secret_body(tmp_path), headers=headers)
        assert response.status_code == 201

    def test_documented(self, keyed: TestClient):
        """The OpenAPI schema declares the header as a security scheme."""
        schemes = keyed.get("/openapi.json").json()["components"]["securitySchemes"]
        assert [s["name"] for s in schemes.values()] == [SESSION_API_KEY_HEADER]


class TestEventStream:
    def test_resume_after_event(self, client: TestClient, conversation_id: str):
        """after=<id> (or Last-Event-ID) replays the events after it, then the status."""
        first = client.get(f"/api/conversations/{conversation_id}/events").json()["items"][1]
        url = f"/api/conversations/{conversation_id}/events/stream"
        for kwargs in (
            {"params": {"after": first["id"], "until_idle": "true"}},
            {"params": {"until_idle": "true"}, "headers": {"Last-Event-ID": first["id"]}},
        ):
            with client.stream("GET", url, **kwargs) as response:
                messages = read_stream(response)
            texts = [
                (k, d.get("llm_message", {}).get("content", [{}])[0].get("text"))
                for k, d, _ in messages
            ]
            assert texts == [
                ("event", "two"),
                ("status", None),
            ]
            assert messages[0][2] == messages[0][1]["id"]  # the SSE id is the event id
            assert messages[1][1] == {
                "execution_status": "idle",
                "running": False,
                "event_count": 3,
            }

    def test_unknown_after(self, client: TestClient, conversation_id: str):
        """404 for a stream after an unknown event id."""
        url = f"/api/conversations/{conversation_id}/events/stream?after=nope"
        assert client.get(url).status_code == 404

    def test_live_events(self, server: BackgroundServer, stub_agent: Agent, tmp_path: Path):
        """A subscriber sees events recorded after it connected, in order, without gaps."""
        with httpx.Client(base_url=server.url, timeout=WAIT) as http:
            http.post("/api/conversations", json=create_body(stub_agent, tmp_path, id="live"))
            received: list[str] = []
            connected = threading.Event()

            def listen() -> None:
                with http.stream("GET", "/api/conversations/live/events/stream") as response:
                    kind = None
                    for line in response.iter_lines():
                        if line.startswith("event: "):
                            kind = line.removeprefix("event: ")
                        elif line.startswith("data: ") and kind == "status":
                            connected.set()
                        elif line.startswith("data: ") and kind == "event":
                            data = json.loads(line[6:])
                            if data["kind"] == "SystemPromptEvent":  # before the first message
                                assert not received
                                continue
                            received.append(data["llm_message"]["content"][0]["text"])
                            if len(received) == 30:
                                return

            listener = threading.Thread(target=listen)
            listener.start()
            assert connected.wait(10)
            for n in range(30):
                http.post("/api/conversations/live/messages", json={"text": str(n)})
            listener.join(10)
            assert received == [str(n) for n in range(30)]

    def test_stream_ends_on_delete(self, server: BackgroundServer, stub_agent, tmp_path):
        """Deleting a conversation ends its open streams."""
        with httpx.Client(base_url=server.url, timeout=WAIT) as http:
            http.post("/api/conversations", json=create_body(stub_agent, tmp_path, id="gone"))
            with http.stream("GET", "/api/conversations/gone/events/stream") as response:
                lines = response.iter_lines()
                assert next(lines) == "event: status"
                httpx.delete(f"{server.url}/api/conversations/gone")
                assert [line for line in lines if line.startswith("event:")] == []


class TestRestart:
    def test_conversations_come_back(self, stub: StubLLMServer, stub_agent: Agent, tmp_path):
        """After a restart on the same data dir, conversations and forks are back and run."""
        data = tmp_path / "data"
        with (
            BackgroundServer(create_app(data_dir=data)) as server,
            httpx.Client(base_url=server.url, timeout=WAIT) as http,
        ):
            http.post("/api/conversations", json=create_body(stub_agent, tmp_path, id="p"))
            http.post("/api/conversations/p/messages", json={"text": "Run `echo again`."})
            http.post("/api/conversations/p/fork", json={"id": "pf", "title": "kept"})
        with (
            BackgroundServer(create_app(data_dir=data)) as server,
            httpx.Client(base_url=server.url, timeout=WAIT) as http,
        ):
            listed = {i["id"]: i for i in http.get("/api/conversations").json()["items"]}
            assert set(listed) == {"p", "pf"} and listed["pf"]["title"] == "kept"
            http.post("/api/conversations/pf/run")
            events = [d for k, d, _ in wait_until_idle(http, "pf") if k == "event"]
            assert any("again" in e.get("output", "") for e in events)
            assert http.get("/api/conversations/p").json()["event_count"] == 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestCommandLine:
    def test_serves_with_session_key(self, tmp_path: Path):
        """python -m cowconv.agent_server serves, requires the env session key, logs no secret."""
        port = free_port()
        env = {**os.environ, "COWCONV_SESSION_API_KEY": "cli-key"}
        process = subprocess.Popen(
            [sys.executable, "-m", "cowconv.agent_server", "--port", str(port),
             "--data-dir", str(tmp_path / "data"), "--log-level", "debug"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            # A loaded machine may take many seconds to start it, and to answer: explicit
            # limits, far above httpx's 5 s default (a ReadTimeout failed it at load 35).
            http = httpx.Client(timeout=60)
            deadline = time.monotonic() + 120
            while True:
                try:
                    if http.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server did not start in 120 s"
                    assert process.poll() is None, "the server exited"
                    time.sleep(0.05)
            assert http.get(f"{url}/api/conversations").status_code == 401
            headers = {SESSION_API_KEY_HEADER: "cli-key"}
            created = http.post(
                f"{url}/api/conversations", json=secret_body(tmp_path), headers=headers
            )
            assert created.status_code == 201
            cid = created.json()["id"]
            assert (
                http.post(f"{url}/api/conversations/{cid}/fork", headers=headers).status_code == 201
            )
            http.close()
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=20)
        # uvicorn shuts down cleanly on SIGTERM, then re-raises the signal it caught.
        assert process.returncode in (0, -15)
        assert "Application shutdown complete" in output
        assert "POST /api/conversations" in output  # the access log is on
        assert SECRET not in output and "cli-key" not in output
