"""The event routes (OpenHands' ``event_router``, plus cowconv's additions).

``event_router`` is an :class:`fastapi.APIRouter` with the prefix
``/conversations/{conversation_id}``; :func:`~cowconv.agent_server.create_app`
mounts it under ``/api``. Every route reaches its conversation through the
:class:`~cowconv.agent_server.event_service.EventService` that
:func:`~cowconv.agent_server.dependencies.get_event_service` gives (a 404
for an unknown conversation). OpenHands' routes: send a message
(``POST /events``), search and count events, get one. cowconv's additions:
``POST /messages``, ``POST /events/append``, offset pages
(``GET /events``), the SSE stream and the branches.

>>> from datetime import datetime, timezone
>>> normalize_datetime_to_server_timezone(datetime(2025, 1, 1, 12, 0)).tzinfo is None
True
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent

from cowconv.agent_server.conversation_router import MAX_OFFSET, MAX_PAGE, errors
from cowconv.agent_server.decoding import DecodingRoute
from cowconv.agent_server.dependencies import check_conversation_ids, get_event_service
from cowconv.agent_server.event_service import EventService, RecordedMessage
from cowconv.agent_server.models import (
    AppendEventRequest,
    BranchList,
    ConfirmationResponseRequest,
    EventPage,
    EventSortOrder,
    OpenHandsEventPage,
    SendMessageRequest,
    SentMessage,
    StreamStatus,
    Success,
)
from cowconv.backends.wire import CHANGE_ROUTES, SYSTEM_PROMPT_AT_HEADER
from cowconv.core.changes import AppendEvent
from cowconv.core.events import AnyEvent, Event

__all__ = ["event_router", "normalize_datetime_to_server_timezone"]

event_router = APIRouter(
    prefix="/conversations/{conversation_id}",
    route_class=DecodingRoute,  # bodies decoded without recursing
    tags=["events"],
    responses=errors(404, 422),
    dependencies=[Depends(check_conversation_ids)],  # a UUID, unless the app takes names
)

Events = Annotated[EventService, Depends(get_event_service)]


def normalize_datetime_to_server_timezone(moment: datetime) -> datetime:
    """A time filter as the server compares it: an aware time becomes the server's local time,
    naive; a naive one is taken as the server's local time already (OpenHands' rule).

    >>> from datetime import UTC
    >>> aware = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    >>> normalize_datetime_to_server_timezone(aware) == aware.astimezone(None).replace(tzinfo=None)
    True
    """
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(None).replace(tzinfo=None)


def _normalized(moment: datetime | None) -> datetime | None:
    return None if moment is None else normalize_datetime_to_server_timezone(moment)


# -- sending -----------------------------------------------------------------------


def _sent(recorded: object, response: Response) -> Success:
    """OpenHands' ``{"success": true}``; with cowconv's service also the recorded ``event``
    (and the system prompt's position in the ``X-Cowconv-System-Prompt-At`` header)."""
    if not isinstance(recorded, RecordedMessage):
        return Success()  # a service that reports nothing (OpenHands' contract)
    if recorded.system_prompt_at is not None:
        response.headers[SYSTEM_PROMPT_AT_HEADER] = str(recorded.system_prompt_at)
    return SentMessage(event=recorded.event)


@event_router.post("/events", response_model=SentMessage | Success)
async def send_message(request: SendMessageRequest, response: Response, events: Events) -> Success:
    """Send a user message (OpenHands' route and body: ``role``, ``content``, ``run``).

    Answers OpenHands' ``{"success": true}`` plus ``event``, the recorded
    message. The agent's system prompt is recorded just before it when it
    is not current (the first message, or after the agent changed); the
    header ``X-Cowconv-System-Prompt-At`` then gives that event's position.
    With ``run`` a run starts (unless one is going). Only ``user`` messages
    are recorded (another role: 422).
    """
    recorded = await events.send_message(
        request.create_message(), request.run, sender=request.sender
    )
    return _sent(recorded, response)


@event_router.post("/events/respond_to_confirmation", response_model=Success)
async def respond_to_confirmation(request: ConfirmationResponseRequest, events: Events) -> Success:
    """Answer a conversation waiting for confirmation (OpenHands' route and body).

    ``accept``: a run starts and runs the waiting tool calls (nothing to do
    if one is going); else each waiting call is answered by a rejection
    with ``reason`` and the conversation becomes ``idle``.
    """
    await events.respond_to_confirmation(request.accept, request.reason)
    return Success()


@event_router.post("/messages", status_code=201, response_model=AnyEvent)
async def send_message_event(
    request: SendMessageRequest, response: Response, events: Events
) -> Event:
    """Send a user message (``{"text": ...}`` or OpenHands' body); answers with its event.

    cowconv's route, kept beside OpenHands' ``POST /events``.
    """
    recorded = await events.send_message(
        request.create_message(), request.run, sender=request.sender
    )
    _sent(recorded, response)
    return recorded.event


_APPEND = CHANGE_ROUTES[AppendEvent]


@event_router.api_route(
    _APPEND.path,
    methods=[_APPEND.method],
    status_code=201,
    response_model=AnyEvent,
    responses=errors(409),
)
async def append_event(request: AppendEventRequest, events: Events) -> Event:
    """Append an event as given (409 if its id is already in the history).

    A cowconv addition (``RemoteConversation.append_event``); ``POST /events``
    is OpenHands' send message.
    """
    return await events.append_event(request.root)


# -- reading -----------------------------------------------------------------------


@event_router.get("/events", response_model=EventPage)
async def list_events(
    events: Events,
    offset: Annotated[
        int | None,
        Query(ge=0, le=MAX_OFFSET, description="events to skip (after `after` if given)"),
    ] = None,
    after: Annotated[str | None, Query(description="start after this event id")] = None,
    limit: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 100,
) -> EventPage:
    """A page of events, oldest first, from ``offset`` or after the event ``after``."""
    return await events.list_events(offset, after, limit)


@event_router.get("/events/search", response_model=OpenHandsEventPage)
async def search_events(
    events: Events,
    page_id: Annotated[str | None, Query(description="next_page_id of the last page")] = None,
    limit: Annotated[int, Query(gt=0, le=100)] = 100,
    kind: Annotated[str | None, Query()] = None,
    source: Annotated[str | None, Query()] = None,
    body: Annotated[str | None, Query()] = None,
    sort_order: Annotated[EventSortOrder, Query()] = EventSortOrder.TIMESTAMP,
    timestamp__gte: Annotated[datetime | None, Query()] = None,
    timestamp__lt: Annotated[datetime | None, Query()] = None,
) -> Any:
    """A page of events in OpenHands' JSON shapes, oldest first (``page_id`` from the last).

    Events are in history order (which is timestamp order); the filters
    are OpenHands' (a time without a zone is the server's local time).
    """
    return await events.search_events(
        page_id,
        limit,
        kind,
        source,
        body,
        sort_order,
        _normalized(timestamp__gte),
        _normalized(timestamp__lt),
    )


@event_router.get("/events/count", response_model=int)
async def count_events(
    events: Events,
    kind: Annotated[str | None, Query()] = None,
    source: Annotated[str | None, Query()] = None,
    body: Annotated[str | None, Query()] = None,
    timestamp__gte: Annotated[datetime | None, Query()] = None,
    timestamp__lt: Annotated[datetime | None, Query()] = None,
) -> int:
    """How many events match OpenHands' filters."""
    return await events.count_events(
        kind, source, body, _normalized(timestamp__gte), _normalized(timestamp__lt)
    )


def _header_text(value: str | None) -> str | None:
    """A header value as the UTF-8 text a browser sent (Starlette decodes it as Latin-1)."""
    if value is None or value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


async def _stream_start(
    events: Events,
    offset: Annotated[int | None, Query(ge=0, le=MAX_OFFSET)] = None,
    after: Annotated[str | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> int:
    # A dependency, so an unknown conversation or event is a 404 before the stream opens.
    return await events.stream_start(offset, _header_text(last_event_id) or after)


@event_router.get(
    "/events/stream",
    response_class=EventSourceResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": "Server-sent events: `event` messages (id = event id, data = "
            "the event) and `status` messages (data = StreamStatus).",
        },
    },
)
async def stream_events(
    events: Events,
    start: Annotated[int, Depends(_stream_start)],
    until_idle: Annotated[bool, Query()] = False,
) -> AsyncIterator[ServerSentEvent]:
    """Server-sent events of the conversation from a position, then live.

    Starts after ``after`` (or the ``Last-Event-ID`` header a reconnecting
    client sends), at ``offset``, or, given neither, at the end (new events
    only). With ``until_idle`` the stream ends once no run is going.
    """
    # FastAPI sends the keepalive comments while the service waits.
    async for item in events.follow(start, until_idle):
        if isinstance(item, StreamStatus):
            yield ServerSentEvent(raw_data=item.model_dump_json(), event="status")
        else:
            yield ServerSentEvent(raw_data=item.model_dump_json(), event="event", id=item.id)


@event_router.get("/events/{event_id}", response_model=dict[str, Any])
async def get_event(event_id: str, events: Events) -> dict[str, Any]:
    """One event in OpenHands' JSON shape (404 if the history has none with that id)."""
    return await events.get_event(event_id)


@event_router.get("/branches", response_model=BranchList)
async def list_branches(events: Events) -> BranchList:
    """Every branch of the conversation tree, each by its leaf event; the active one last."""
    return await events.branches()


@event_router.get("/branches/{leaf_event_id}/events", response_model=EventPage)
async def list_branch_events(
    leaf_event_id: str,
    events: Events,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 100,
) -> EventPage:
    """A page of the events of the branch ending at ``leaf_event_id``."""
    return await events.branch_events(leaf_event_id, offset, limit)
