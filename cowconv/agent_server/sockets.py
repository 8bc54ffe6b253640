"""OpenHands' events WebSocket, ``/sockets/events/{conversation_id}`` (``sockets_router``).

Live events of a conversation in OpenHands' JSON shapes, and
``ConversationStateUpdateEvent``s, as they happen; messages a client sends on
the socket are recorded and run. The session key is checked as OpenHands'
server does: in the query, in the header, or as the first frame. The socket
reaches its conversation through the app's
:class:`~cowconv.agent_server.conversation_service.ConversationService`.

>>> [route.path for route in sockets_router.routes]
['/sockets/events/{conversation_id}']
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect

from cowconv._exceptions import InvalidValueError
from cowconv.agent_server.config import Config
from cowconv.agent_server.conversation_service import ConversationService
from cowconv.agent_server.decoding import receive_json
from cowconv.agent_server.dependencies import conversation_id_of
from cowconv.agent_server.event_service import EventService, active_branch
from cowconv.agent_server.models import SendMessageRequest, StreamStatus
from cowconv.backends.wire import SESSION_API_KEY_HEADER, event_to_openhands

__all__ = ["sockets_router"]

sockets_router = APIRouter(tags=["sockets"])

_AUTH_TIMEOUT = 10.0  # seconds a client has to send its first-message auth (OpenHands' figure)


def _state_update(key: str, value: Any) -> dict[str, Any]:
    """OpenHands' ``ConversationStateUpdateEvent`` JSON."""
    return {
        "kind": "ConversationStateUpdateEvent",
        "id": str(uuid.uuid4()),
        "timestamp": datetime.now(UTC).isoformat(),
        "source": "environment",
        "key": key,
        "value": value,
    }


async def _authenticate_socket(
    websocket: WebSocket, expected: str | None, given: str | None
) -> bool:
    """OpenHands' socket auth: the key in the query or header, or as the first frame."""
    if expected is None:
        await websocket.accept()
        return True
    given = given if given is not None else websocket.headers.get(SESSION_API_KEY_HEADER)
    if given is not None:
        if hmac.compare_digest(given.encode(), expected.encode()):
            await websocket.accept()
            return True
        await websocket.close(code=4001, reason="Authentication failed")
        return False
    await websocket.accept()
    try:
        frame = await asyncio.wait_for(receive_json(websocket), timeout=_AUTH_TIMEOUT)
    except (TimeoutError, ValueError, WebSocketDisconnect):
        frame = None
    key = frame.get("session_api_key") if isinstance(frame, dict) else None
    if (
        isinstance(frame, dict)
        and frame.get("type") == "auth"
        and isinstance(key, str)
        and hmac.compare_digest(key.encode(), expected.encode())
    ):
        return True
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await websocket.close(code=4001, reason="Authentication failed")
    return False


async def _socket_messages(websocket: WebSocket, events: EventService) -> None:
    """Messages a client sends on the socket: OpenHands' ``Message`` JSON, sent and run."""
    while True:
        try:
            data = await receive_json(websocket)
        except WebSocketDisconnect:
            return
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "auth":
            continue  # a redundant auth frame
        try:
            request = SendMessageRequest.model_validate(
                {"role": data.get("role", "user"), "content": data.get("content"), "run": True}
                if isinstance(data, dict)
                else data
            )
            await events.send_message(request.create_message(), run=True)
        except Exception as error:  # told to the client, as OpenHands' server does
            await websocket.send_json(
                {
                    "kind": "ServerErrorEvent",
                    "id": str(uuid.uuid4()),
                    "timestamp": datetime.now(UTC).isoformat(),
                    "source": "environment",
                    "code": type(error).__name__,
                    "detail": str(error),
                }
            )


async def _socket_events(websocket: WebSocket, events: EventService, start: int) -> None:
    """Events in OpenHands' shapes, and ``ConversationStateUpdateEvent``s, as they happen.

    First a full-state update (the client waits for it before it trusts the
    socket); then each event; a per-field ``execution_status`` update while a
    run goes on, and a full-state update when no run is going (OpenHands'
    client takes that as the end of its run).
    """
    first = True
    async for item in events.follow(start, until_idle=False):
        if isinstance(item, StreamStatus):
            info = events.current_info()
            if info is None:
                return
            if first or not item.running:
                value = info.model_dump(mode="json")
                await websocket.send_json(_state_update("full_state", value))
            else:
                await websocket.send_json(_state_update("execution_status", item.execution_status))
            first = False
        else:
            await websocket.send_json(event_to_openhands(item.model_dump(mode="json")))


@sockets_router.websocket("/sockets/events/{conversation_id}")
async def events_socket(
    websocket: WebSocket,
    conversation_id: str,
    session_api_key_query: Annotated[str | None, Query(alias="session_api_key")] = None,
    resend_mode: Annotated[Literal["all", "since"] | None, Query()] = None,
    after_timestamp: Annotated[datetime | None, Query()] = None,
    resend_all: Annotated[bool, Query()] = False,
) -> None:
    """OpenHands' events socket: live events of a conversation, and messages to send."""
    config = getattr(websocket.app.state, "config", None)
    session_api_key = config.session_api_key if isinstance(config, Config) else None
    if not await _authenticate_socket(websocket, session_api_key, session_api_key_query):
        return
    service = getattr(websocket.app.state, "conversation_service", None)
    if not isinstance(service, ConversationService):
        await websocket.close(code=1011, reason="no conversation service")
        return
    try:
        events = await service.get_event_service(conversation_id_of(conversation_id))
    except InvalidValueError:
        events = None
    if events is None:
        await websocket.close(code=4004, reason="Conversation not found")
        return
    history = active_branch(await events.get_state())
    start = len(history)
    if resend_mode == "all" or (resend_mode is None and resend_all):
        start = 0
    elif resend_mode == "since" and after_timestamp is not None:
        since = _aware(after_timestamp)
        start = next(
            (i for i, event in enumerate(history) if _aware(event.timestamp) >= since),
            len(history),
        )
    tasks = {
        asyncio.create_task(_socket_messages(websocket, events)),
        asyncio.create_task(_socket_events(websocket, events, start)),
    }
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                task.result()
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close()


def _aware(moment: datetime | str) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
