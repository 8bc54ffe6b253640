"""``InProcessTransport``: the agent server's app reached in this process, without a socket.

A synchronous ``httpx`` transport over the ASGI app: each request runs the
app on an event loop in a helper thread (``httpx.ASGITransport`` under an
``anyio`` blocking portal) and its whole answer is returned. A remote
conversation given one (``Conversation(agent, workspace, transport=...)``)
speaks to the app as it would over HTTP, minus the network: what its tests
and notebooks need. Streamed answers (the event stream) arrive whole, once
the app ends them.

>>> from cowconv import LLM, Agent, Conversation, Workspace
>>> from cowconv.agent_server import create_app
>>> with InProcessTransport(create_app()) as transport:
...     workspace = Workspace(host="http://localhost", working_dir=".")
...     agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-1"))
...     with Conversation(agent, workspace, transport=transport) as conversation:
...         _ = conversation.send_message("hi")
...         print(type(conversation).__name__, len(conversation.fork().state.events))
RemoteConversation 2
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import anyio.from_thread
import httpx

__all__ = ["InProcessTransport"]


class InProcessTransport(httpx.BaseTransport):
    """Send requests to the ASGI ``app`` in this process (see the module docstring).

    The app's lifespan runs too: it starts with the transport and ends when
    the transport is closed (``close()`` or the end of a ``with`` block).

    >>> import httpx
    >>> from cowconv.agent_server import create_app
    >>> with InProcessTransport(create_app()) as transport:
    ...     client = httpx.Client(transport=transport, base_url="http://localhost")
    ...     client.get("/health").json()["status"]
    'ok'
    """

    def __init__(self, app: Any) -> None:
        self._app = app
        self._asgi = httpx.ASGITransport(app=app)
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        # The app's startup and shutdown (it closes its conversations on shutdown).
        self._stack.enter_context(self._portal.wrap_async_context_manager(_lifespan(app)))
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise httpx.TransportError("the in-process transport is closed")
        body = request.read()
        status, headers, content = self._portal.call(self._send, request, body)
        return httpx.Response(status, headers=headers, content=content, request=request)

    async def _send(
        self, request: httpx.Request, body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        inner = httpx.Request(request.method, request.url, headers=request.headers, content=body)
        response = await self._asgi.handle_async_request(inner)
        chunks = [chunk async for chunk in response.aiter_raw()]
        await response.aclose()
        return response.status_code, response.headers.raw, b"".join(chunks)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stack.close()

    def __enter__(self) -> InProcessTransport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextlib.asynccontextmanager
async def _lifespan(app: Any) -> Any:
    context = getattr(getattr(app, "router", None), "lifespan_context", None)
    if context is None:
        yield
        return
    async with context(app):
        yield
