"""``BackgroundServer``: the agent server on a free loopback port, in a thread."""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn

from cowconv._exceptions import ServiceError

__all__ = ["BackgroundServer", "listening_socket"]


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) for uvicorn to serve on.

    It is made with ``IPPROTO_TCP``, not the default 0: asyncio sets
    ``TCP_NODELAY`` only on sockets whose protocol says TCP, and without it
    Nagle's algorithm holds each response's second write until the client's
    delayed ACK, a fixed ~40 ms stall per request.

    >>> with listening_socket("127.0.0.1", 0) as listener:
    ...     listener.proto == socket.IPPROTO_TCP
    True
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except BaseException:
        listener.close()
        raise
    return listener


class BackgroundServer:
    """Serve an ASGI app with uvicorn in a daemon thread, for tests and notebooks.

    It binds ``host`` (127.0.0.1 by default) on a free port before it starts,
    so ``url`` is known and answering once the ``with`` block is entered.

    >>> import httpx
    >>> from cowconv.agent_server import create_app
    >>> with BackgroundServer(create_app()) as server:
    ...     httpx.get(server.url + "/health").json()
    {'status': 'ok'}
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = listening_socket(host, port)
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            # Open event streams must not hold a shutdown forever.
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name=f"cowconv-agent-server-{self.port}",
            daemon=True,
        )

    @property
    def url(self) -> str:
        """The server's base URL, e.g. ``http://127.0.0.1:50123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> BackgroundServer:
        """Start serving; returns once the server accepts requests."""
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise ServiceError(f"the agent server on {self.url} failed to start")
            self._thread.join(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the server (and its app's shutdown) to end."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join()
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
