"""The HTTP client under every request to an agent server (``cowconv.core.http``).

A raw socket server on 127.0.0.1 plays a server that closes a kept-alive connection just as
the client's next request arrives, the race uvicorn's idle limit makes with httpx's pool.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from cowconv import RemoteError, RemoteWorkspace, Workspace
from cowconv.core.http import KEEPALIVE_EXPIRY


def server_client(url: str, timeout: float) -> Any:
    return Workspace(host=url, working_dir="/w").new_client(timeout=timeout)


@dataclass
class _Server:
    """Answers every request ``200`` with keep-alive, except that the connection numbered
    ``drop_on`` (from 1) is closed, unanswered, when its second request has been read."""

    drop_on: int | None = None
    connections: int = 0
    requests: list[tuple[int, str]] = field(default_factory=list)  # (connection, request line)
    listener: socket.socket = field(default_factory=socket.socket)

    @property
    def url(self) -> str:
        host, port = self.listener.getsockname()
        return f"http://{host}:{port}"

    def start(self) -> None:
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        buffer = b""
        served = 0
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                sizes = [line for line in lines if line.lower().startswith("content-length")]
                length = int(sizes[0].split(":")[1]) if sizes else 0
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                buffer = buffer[length:]
                self.requests.append((number, lines[0]))
                served += 1
                if number == self.drop_on and served == 2:
                    return  # closed with the request read and no answer
                body = b'{"ok": true}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def server() -> Iterator[_Server]:
    made = _Server(drop_on=1)
    made.start()
    yield made
    made.close()


def test_a_read_on_a_connection_closed_under_it_is_sent_again_on_a_new_one(
    server: _Server,
) -> None:
    with server_client(server.url, timeout=30.0) as client:
        assert client.get("/first").json() == {"ok": True}
        assert client.get("/second").json() == {"ok": True}
    assert server.requests == [
        (1, "GET /first HTTP/1.1"),
        (1, "GET /second HTTP/1.1"),  # read, then the connection closed unanswered
        (2, "GET /second HTTP/1.1"),
    ]


def test_a_change_is_never_sent_twice_its_lost_answer_is_a_remote_error(
    server: _Server,
) -> None:
    with server_client(server.url, timeout=30.0) as client:
        client.post("/api/conversations", json={})
        with pytest.raises(RemoteError, match="cannot reach the agent server at http://127"):
            client.post("/api/conversations/c1/events", json={"text": "hi"})
    assert server.requests == [
        (1, "POST /api/conversations HTTP/1.1"),
        (1, "POST /api/conversations/c1/events HTTP/1.1"),
    ]


def test_an_idle_connection_is_dropped_before_the_server_drops_it() -> None:
    # uvicorn closes a connection idle for 5 s; the pool must let go of it first.
    assert KEEPALIVE_EXPIRY < 5.0
    quiet = _Server()
    quiet.start()
    try:
        with server_client(quiet.url, timeout=30.0) as client:
            client.get("/a")
            client.get("/b")  # at once: the same connection
            time.sleep(KEEPALIVE_EXPIRY + 0.5)
            client.get("/c")  # idle past the expiry: a new connection
        assert quiet.requests == [
            (1, "GET /a HTTP/1.1"),
            (1, "GET /b HTTP/1.1"),
            (2, "GET /c HTTP/1.1"),
        ]
    finally:
        quiet.close()


def test_a_remote_workspaces_client_sends_a_read_again_too(server: _Server) -> None:
    workspace = RemoteWorkspace(host=server.url, working_dir="/w", api_key="k")
    client = workspace.client
    assert client.headers["X-Session-API-Key"] == "k"
    assert client.get("/first").json() == {"ok": True}
    assert client.get("/second").json() == {"ok": True}
    assert [number for number, _ in server.requests] == [1, 1, 2]
    client.close()
