"""The agent server against a web page and a careless operator: Host, Origin, exposure, body size.

Every test runs a real uvicorn server on 127.0.0.1 (``BackgroundServer``) and
speaks raw HTTP to it with httpx, as a browser or an attacker would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

from cowconv.agent_server import (
    DEFAULT_MAX_BODY_SIZE,
    BackgroundServer,
    UnsafeExposureError,
    create_app,
)
from cowconv.testing import StubLLMServer


def body(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "agent": {
            "llm": {"model": "openai/gpt-4o", "api_key": "sk-x"},
            "tools": [{"name": "terminal"}],
        },
        "workspace": {"working_dir": str(tmp_path)},
        **extra,
    }


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BackgroundServer]:
    """A keyless server with a SQLite store and a 64 KiB body limit, holding conversation c1."""
    app = create_app(data_dir=tmp_path / "data", max_body_size=64 * 1024)
    with BackgroundServer(app) as running:
        created = httpx.post(f"{running.url}/api/conversations", json=body(tmp_path, id="c1"))
        assert created.status_code == 201
        yield running


KEY = "k" * 32
"""The session key of ``keyed_server``."""


@pytest.fixture
def keyed_server(tmp_path: Path) -> Iterator[BackgroundServer]:
    """A server that wants the session key ``KEY``, holding conversation c1."""
    app = create_app(data_dir=tmp_path / "data", session_api_key=KEY)
    with BackgroundServer(app) as running:
        created = httpx.post(
            f"{running.url}/api/conversations",
            json=body(tmp_path, id="c1"),
            headers={"X-Session-API-Key": KEY},
        )
        assert created.status_code == 201
        yield running


def state_changing_routes(server: BackgroundServer) -> list[tuple[str, str]]:
    """(method, path) of every route that changes something, path parameters filled with c1."""
    schema = httpx.get(f"{server.url}/openapi.json").json()
    routes = []
    for path, operations in schema["paths"].items():
        for method in operations:
            if method.upper() not in ("GET", "HEAD", "OPTIONS"):
                routes.append((method.upper(), path.replace("{conversation_id}", "c1")))
    return routes


def stored_ids(server: BackgroundServer) -> list[str]:
    page = httpx.get(f"{server.url}/api/conversations").json()
    return [item["id"] for item in page["items"]]


class TestHost:
    def test_rebound_name_is_refused_and_changes_nothing(self, server: BackgroundServer, tmp_path):
        """A request naming a foreign host (DNS rebinding) is 400 and creates nothing."""
        evil = {"Host": "rebind.evil.example"}
        response = httpx.post(
            f"{server.url}/api/conversations", json=body(tmp_path, id="evil"), headers=evil
        )
        assert response.status_code == 400
        assert httpx.get(f"{server.url}/api/conversations", headers=evil).status_code == 400
        assert stored_ids(server) == ["c1"]

    def test_every_route_checks_the_host(self, server: BackgroundServer):
        """No route, reading or writing, answers a foreign Host."""
        schema = httpx.get(f"{server.url}/openapi.json").json()
        for path, operations in schema["paths"].items():
            for method in operations:
                response = httpx.request(
                    method.upper(),
                    server.url + path.replace("{conversation_id}", "c1"),
                    headers={"Host": f"evil.example:{server.port}"},
                )
                assert response.status_code == 400, (method, path)

    @pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST"])
    def test_loopback_names_are_served(self, server: BackgroundServer, host: str):
        """The bound address and loopback names are answered, with or without a port."""
        for header in (host, f"{host}:{server.port}"):
            response = httpx.get(f"{server.url}/api/conversations", headers={"Host": header})
            assert response.status_code == 200, header

    def test_operator_allowed_name_is_served(self, tmp_path: Path):
        """A name in allowed_hosts (with a session key) is answered; others are not."""
        app = create_app(session_api_key="k", allowed_hosts=["cowconv.internal"])
        with BackgroundServer(app) as server:
            key = {"X-Session-API-Key": "k"}
            allowed = httpx.get(
                f"{server.url}/api/conversations", headers={**key, "Host": "cowconv.internal"}
            )
            other = httpx.get(
                f"{server.url}/api/conversations", headers={**key, "Host": "other.internal"}
            )
        assert (allowed.status_code, other.status_code) == (200, 400)

    def test_ipv6_loopback(self):
        """A server bound to ::1 answers Host [::1]:port (a bracketed IPv6 literal)."""
        try:
            server = BackgroundServer(create_app(host="::1"), host="::1")
        except OSError:
            pytest.skip("this machine has no IPv6 loopback")
        with server:
            assert httpx.get(f"{server.url}/api/conversations").status_code == 200


class TestOrigin:
    def test_cross_site_post_without_body_is_refused(self, server: BackgroundServer):
        """A page on another site cannot run, fork, pause or delete, even with no body."""
        page = {"Origin": "http://evil.example"}
        for method, path in state_changing_routes(server):
            response = httpx.request(method, server.url + path, headers=page)
            assert response.status_code == 403, (method, path)
        assert stored_ids(server) == ["c1"]
        events = httpx.get(f"{server.url}/api/conversations/c1/events").json()
        assert events["total"] == 0

    def test_cross_site_create_is_refused(self, server: BackgroundServer, tmp_path: Path):
        """A form-style cross-site create with a JSON body is refused before it is read."""
        response = httpx.post(
            f"{server.url}/api/conversations",
            json=body(tmp_path, id="evil"),
            headers={"Origin": "null"},
        )
        assert response.status_code == 403
        assert stored_ids(server) == ["c1"]

    def test_same_origin_and_no_origin_pass(self, server: BackgroundServer):
        """The server's own pages (/docs) and non-browser clients are served."""
        own = {"Origin": server.url}
        url = f"{server.url}/api/conversations/c1/messages"
        assert httpx.post(url, json={"text": "a"}, headers=own).status_code == 201
        assert httpx.post(url, json={"text": "b"}).status_code == 201

    def test_allowed_origin_passes(self, tmp_path: Path):
        """An origin the operator allowed may change things; reading needs no Origin check."""
        app = create_app(allowed_origins=["https://ui.example"])
        with BackgroundServer(app) as server:
            ok = httpx.post(
                f"{server.url}/api/conversations",
                json=body(tmp_path, id="a"),
                headers={"Origin": "https://ui.example"},
            )
            refused = httpx.post(
                f"{server.url}/api/conversations",
                json=body(tmp_path, id="b"),
                headers={"Origin": "https://ui.example.evil"},
            )
            read = httpx.get(f"{server.url}/api/conversations", headers={"Origin": "http://x"})
        assert (ok.status_code, refused.status_code, read.status_code) == (201, 403, 200)


class TestExposure:
    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
    def test_non_loopback_without_key_refuses_to_start(self, host: str):
        """Serving other machines without a session key is refused with a clear message."""
        with pytest.raises(UnsafeExposureError, match="without a session API key"):
            create_app(host=host)

    def test_non_loopback_allowed_host_without_key_is_refused(self):
        """A public name behind a proxy is exposure too."""
        with pytest.raises(UnsafeExposureError):
            create_app(allowed_hosts=["cowconv.example.com"])

    def test_key_or_explicit_consent_starts(self):
        """With a key, or allow_unauthenticated=True, the app is made."""
        create_app(host="0.0.0.0", session_api_key="k")
        create_app(host="0.0.0.0", allow_unauthenticated=True)

    def test_error_is_a_value_error(self):
        """UnsafeExposureError is a CowconvError and a ValueError."""
        from cowconv import CowconvError

        assert issubclass(UnsafeExposureError, CowconvError)
        assert issubclass(UnsafeExposureError, ValueError)


class TestBodySize:
    def test_declared_large_body_is_413_and_records_nothing(self, server: BackgroundServer):
        """A body over the limit is refused with 413 and nothing is recorded."""
        url = f"{server.url}/api/conversations/c1/messages"
        response = httpx.post(url, json={"text": "x" * (65 * 1024)})
        assert response.status_code == 413
        assert "limit" in response.json()["detail"]
        assert httpx.get(f"{server.url}/api/conversations/c1/events").json()["total"] == 0

    def test_streamed_body_without_length_is_413(self, server: BackgroundServer):
        """A chunked body (no Content-Length) is cut off at the limit too."""

        def chunks() -> Iterator[bytes]:
            yield b'{"text": "'
            for _ in range(100):
                yield b"y" * 1024
            yield b'"}'

        response = httpx.post(
            f"{server.url}/api/conversations/c1/messages",
            content=chunks(),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 413
        assert httpx.get(f"{server.url}/api/conversations/c1/events").json()["total"] == 0

    def test_body_under_the_limit_is_served(self, server: BackgroundServer):
        """Just under the limit is fine, streamed or not."""
        text = "z" * (60 * 1024)
        response = httpx.post(f"{server.url}/api/conversations/c1/messages", json={"text": text})
        assert response.status_code == 201
        assert (
            httpx.get(f"{server.url}/api/conversations/c1/events").json()["items"][-1][
                "llm_message"
            ]["content"][0]["text"]
            == text
        )

    def test_default_limit(self, tmp_path: Path):
        """Without a setting, a body over DEFAULT_MAX_BODY_SIZE (8 MiB) is 413."""
        with BackgroundServer(create_app()) as server:
            created = httpx.post(f"{server.url}/api/conversations", json=body(tmp_path, id="c"))
            assert created.status_code == 201
            response = httpx.post(
                f"{server.url}/api/conversations/c/messages",
                json={"text": "x" * DEFAULT_MAX_BODY_SIZE},
                timeout=60,
            )
        assert response.status_code == 413

    def test_limit_must_be_positive(self):
        """A nonsense limit is a ValueError at create_app."""
        with pytest.raises(ValueError, match="max_body_size"):
            create_app(max_body_size=0)


class TestEventsWebSocket:
    """OpenHands' events socket: the same Origin check as state-changing requests, and the key."""

    @staticmethod
    def socket_url(server: BackgroundServer, conversation_id: str = "c1") -> str:
        return server.url.replace("http://", "ws://") + f"/sockets/events/{conversation_id}"

    def test_foreign_origin_refused(self, server: BackgroundServer):
        with pytest.raises(InvalidStatus) as refused:
            ws_connect(self.socket_url(server), origin="https://evil.example", open_timeout=30)
        assert refused.value.response.status_code == 403

    def test_no_origin_connects(self, server: BackgroundServer):
        with ws_connect(self.socket_url(server), open_timeout=30) as socket:
            assert json.loads(socket.recv(timeout=30))["key"] == "full_state"

    def test_session_key_first_message(self, keyed_server: BackgroundServer):
        with ws_connect(self.socket_url(keyed_server), open_timeout=30) as socket:
            socket.send(json.dumps({"type": "auth", "session_api_key": KEY}))
            assert json.loads(socket.recv(timeout=30))["key"] == "full_state"
        with ws_connect(self.socket_url(keyed_server), open_timeout=30) as socket:
            socket.send(json.dumps({"type": "auth", "session_api_key": "wrong"}))
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001

    def test_unknown_conversation(self, server: BackgroundServer):
        with ws_connect(self.socket_url(server, "nope"), open_timeout=30) as socket:
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4004


def nested_text(depth: int, shape: str = "array") -> str:
    """JSON text nested ``depth`` levels deep (arrays, or objects with one key)."""
    if shape == "array":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


DEEP = 10_000
"""Nesting far past the interpreter's recursion limit, under the 64 KiB body limit."""


def _is_message(event: dict[str, Any], source: str) -> bool:
    return event.get("kind") == "MessageEvent" and event.get("source") == source


class TestDeepJson:
    """JSON nested too deep for ``json.loads`` (it recurses once per level): every door of the
    server decodes with ``decode_json``, which refuses nesting past 512 levels after a flat
    scan; the reason its message names is one only it gives."""

    def test_every_route_with_a_body_refuses_it_with_the_reason(self, server: BackgroundServer):
        schema = httpx.get(f"{server.url}/openapi.json").json()
        routes = [
            (method.upper(), path.replace("{conversation_id}", "c1"))
            for path, operations in schema["paths"].items()
            for method, operation in operations.items()
            # JSON bodies: an upload (multipart/form-data) is not a JSON door.
            if "application/json" in operation.get("requestBody", {}).get("content", {})
        ]
        assert len(routes) >= 10
        for shape in ("array", "object"):
            for method, path in routes:
                answer = httpx.request(
                    method,
                    server.url + path,
                    content=nested_text(DEEP, shape),
                    headers={"Content-Type": "application/json"},
                    timeout=60,
                )
                assert answer.status_code == 422, (method, path, answer.text)
                (item,) = answer.json()["detail"]
                assert item["type"] == "json_invalid", (method, path, item)
                assert item["msg"].endswith("JSON nested deeper than 512 levels"), item
        assert stored_ids(server) == ["c1"]

    @given(depth=st.integers(1, 3_000), shape=st.sampled_from(["array", "object"]))
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    def test_any_depth_is_served_or_refused_never_an_error(
        self, server: BackgroundServer, depth: int, shape: str
    ):
        """A value of any depth in agent state: stored, refused by the state's own depth rule,
        or (past 512 levels with its wrapper) refused as JSON; the server never fails."""
        answer = httpx.patch(
            f"{server.url}/api/conversations/c1/agent_state",
            content='{"key": ' + nested_text(depth, shape) + "}",
            headers={"Content-Type": "application/json"},
            timeout=60,
        )
        if depth + 1 > 512:
            assert answer.status_code == 422
            assert answer.json()["detail"][0]["type"] == "json_invalid"
        else:
            assert answer.status_code in (200, 422), answer.text
            if answer.status_code == 422:
                assert "nested deeper than" in answer.json()["detail"]
        assert httpx.get(f"{server.url}/api/conversations/c1", timeout=60).status_code == 200

    def test_the_events_socket_skips_a_deep_or_undecodable_frame(self, tmp_path: Path):
        """A frame nested too deep, and a binary frame that is not UTF-8, are skipped like any
        frame that is not JSON; the message sent next still runs, through a stub LLM."""
        with StubLLMServer() as stub:
            llm = {"model": "openai/stub-model", "base_url": stub.base_url, "api_key": "stub-key"}
            app = create_app(data_dir=tmp_path / "data")
            with BackgroundServer(app) as running:
                created = httpx.post(
                    f"{running.url}/api/conversations",
                    json={"agent": {"llm": llm}, "workspace": {"working_dir": str(tmp_path)}},
                    timeout=60,
                )
                assert created.status_code == 201
                url = TestEventsWebSocket.socket_url(running, created.json()["id"])
                with ws_connect(url, open_timeout=30, max_size=None) as socket:
                    assert json.loads(socket.recv(timeout=30))["key"] == "full_state"
                    socket.send(nested_text(DEEP))
                    socket.send(b"\xff\xfe not utf-8")
                    text = {"type": "text", "text": "after the deep frames"}
                    socket.send(json.dumps({"role": "user", "content": [text]}))
                    seen = []
                    while not [e for e in seen if _is_message(e, "agent")]:
                        seen.append(json.loads(socket.recv(timeout=60)))
        assert not [e for e in seen if e.get("kind") == "ServerErrorEvent"], seen
        users = [e for e in seen if _is_message(e, "user")]
        assert users[0]["llm_message"]["content"][0]["text"] == "after the deep frames"
        assert stub.requests, "the message never reached the model"

    def test_a_deep_first_frame_is_a_failed_authentication(self, keyed_server: BackgroundServer):
        """On a server with a key, a first frame nested too deep fails authentication (4001)."""
        with ws_connect(TestEventsWebSocket.socket_url(keyed_server), open_timeout=30) as socket:
            socket.send(nested_text(DEEP, "object"))
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
