"""JSON from the server's clients, decoded without recursing: request bodies and socket frames.

FastAPI decodes a request body, and Starlette a socket frame, with
``json.loads``, which recurses once per level of nesting: a body nested
100,000 deep ran the server's decoder down to the interpreter's recursion
limit before it was refused, and whatever the garbage collector finalised
down there failed for want of stack. Both doors here decode with
:func:`~cowconv.core.frozen.decode_json` instead, which refuses nesting
deeper than 512 levels after a flat scan and is ``json.loads`` otherwise.

:class:`DecodingRoute` is the routers' ``route_class``: a body nested too
deep gets FastAPI's own 422 for invalid JSON (``json_invalid``), saying why.

>>> from fastapi import APIRouter, FastAPI
>>> from fastapi.testclient import TestClient
>>> router = APIRouter(route_class=DecodingRoute)
>>> @router.post("/echo")
... def echo(body: list[object]) -> int:
...     return len(body)
>>> app = FastAPI()
>>> app.include_router(router)
>>> client = TestClient(app)
>>> client.post("/echo", json=[1, [2, [3]]]).json()
2
>>> deep = "[" * 100_000 + "]" * 100_000
>>> answer = client.post("/echo", content=deep, headers={"content-type": "application/json"})
>>> answer.status_code, answer.json()["detail"][0]["ctx"]["error"]
(422, 'JSON nested deeper than 512 levels')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from cowconv._exceptions import InvalidValueError
from cowconv.core.frozen import decode_json

__all__ = ["DecodingRoute", "receive_json"]


def _decode_body(body: bytes) -> Any:
    """``json.loads(body)`` as Starlette calls it, through :func:`decode_json`; nesting too
    deep is a ``json.JSONDecodeError``, as FastAPI expects of a body that is not JSON."""
    try:
        return decode_json(body)
    except InvalidValueError as error:
        raise json.JSONDecodeError(str(error), "", 0) from None


class _DecodingRequest(Request):
    """A ``Request`` whose ``json()`` is :func:`_decode_body`, decoded once (kept under a
    name of ours, not the ``_json`` Starlette's own ``Request.json()`` keeps)."""

    _decoded: Any

    async def json(self) -> Any:
        try:
            return self._decoded
        except AttributeError:
            self._decoded = _decode_body(await self.body())
            return self._decoded


class DecodingRoute(APIRoute):
    """An ``APIRoute`` whose request body is decoded by :func:`decode_json` (FastAPI's
    documented way to give routes their own ``Request`` class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def decoding_handler(request: Request) -> Response:
            return await handler(_DecodingRequest(request.scope, request.receive))

        return decoding_handler


async def receive_json(websocket: WebSocket) -> Any:
    """The next frame's JSON (a text frame, or a binary one in UTF-8), decoded by
    :func:`decode_json`: invalid or too deep JSON is a ``ValueError``, a closed socket
    ``WebSocketDisconnect``, as with Starlette's ``WebSocket.receive_json``."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    if text is None:
        text = (message.get("bytes") or b"").decode("utf-8")
    return decode_json(text)
