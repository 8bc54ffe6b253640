"""The FastAPI application of the agent server: routes, errors, security, event stream."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import (
    APIRouter,
    Body,
    Depends,
    FastAPI,
    Header,
    HTTPException,
    Query,
    Request,
    Security,
)
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic.json_schema import PydanticJsonSchemaWarning
from starlette.exceptions import HTTPException as StarletteHTTPException

from cowconv import __version__
from cowconv._exceptions import (
    ConversationConflictError,
    ConversationNotFoundError,
    CorruptStoreError,
    EventNotFoundError,
    InvalidValueError,
    StoreError,
    StoreLockedError,
)
from cowconv.agent_server.models import (
    ActivateSkillRequest,
    AppendEventRequest,
    BranchInfo,
    BranchList,
    ConversationPage,
    CreateConversationRequest,
    ErrorResponse,
    EventPage,
    ForkRequest,
    HealthResponse,
    NavigateRequest,
    SendMessageRequest,
    StateResponse,
    StreamStatus,
)
from cowconv.agent_server.registry import ConversationRegistry
from cowconv.agent_server.security import DEFAULT_MAX_BODY_SIZE, add_security, check_exposure
from cowconv.backends.wire import CHANGE_ROUTES, SESSION_API_KEY_HEADER, SYSTEM_PROMPT_AT_HEADER
from cowconv.core.agent import Agent
from cowconv.core.changes import ActivateSkill, AppendEvent, NavigateTo, SetTag, UpdateAgentState
from cowconv.core.events import AnyEvent, Event, SystemPromptEvent
from cowconv.core.history import EventLog
from cowconv.core.state import ConversationInfo, dump_state
from cowconv.stores import STORE_FILE_NAME, SQLiteStore, Store

__all__ = ["SESSION_API_KEY_HEADER", "STORE_FILE_NAME", "create_app"]

logger = logging.getLogger("cowconv.agent_server")

_MAX_PAGE = 1000
# Past any real history, and inside SQLite's 64-bit integers even with a page added.
_MAX_OFFSET = 2**53


def _error(status_code: int, detail: str, error: type[Exception] | None = None) -> JSONResponse:
    content: dict[str, Any] = {"detail": detail}
    if error is not None:  # the client raises the same class again
        content["error"] = error.__name__
    return JSONResponse(status_code=status_code, content=content)


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse} for code in codes}


def _open_store(data_dir: str | os.PathLike[str]) -> Store:
    directory = Path(data_dir).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    store: Store = SQLiteStore(directory)
    return store


def _tag_filter(tag: list[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in tag:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise RequestValidationError(
                [
                    {
                        "type": "value_error",
                        "loc": ("query", "tag"),
                        "msg": f"a tag filter is key=value, got {item!r}",
                    }
                ]
            )
        tags[key] = value
    return tags


def _start(events: EventLog, conversation_id: str, offset: int | None, after: str | None) -> int:
    if after is None:
        return min(offset or 0, len(events))
    try:
        return events.index_of(after) + 1
    except KeyError:
        raise EventNotFoundError(
            f"conversation {conversation_id!r} has no event with id {after!r}"
        ) from None


def create_app(
    *,
    data_dir: str | os.PathLike[str] | None = None,
    store: Store | None = None,
    session_api_key: str | None = None,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    allow_unauthenticated: bool = False,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> FastAPI:
    """The agent server as an ASGI app.

    Conversations are kept in ``store`` (which stays open at shutdown), or in
    a SQLite store under ``data_dir`` (closed at shutdown), or (neither given)
    in memory only. With
    ``session_api_key`` every ``/api`` route requires the header
    ``X-Session-API-Key``; ``/health`` stays open.

    ``host`` is the address the server is bound to: requests must name it,
    a loopback name or one of ``allowed_hosts`` in their ``Host`` header
    (else 400), and a browser page from another origin than the server's
    own or ``allowed_origins`` cannot change anything (403). Serving a
    non-loopback address or host name without ``session_api_key`` raises
    :class:`~cowconv.agent_server.UnsafeExposureError` unless ``allow_unauthenticated``. Bodies
    over ``max_body_size`` bytes are answered 413. See ``docs/server.md``.

    >>> from fastapi.testclient import TestClient
    >>> client = TestClient(create_app(session_api_key="s3cret"), base_url="http://localhost")
    >>> client.get("/health").json(), client.get("/api/conversations").status_code
    ({'status': 'ok'}, 401)
    """
    if store is not None and data_dir is not None:
        raise InvalidValueError("give data_dir or store, not both")
    if session_api_key is not None and not session_api_key:
        raise InvalidValueError("session_api_key must not be empty")
    check_exposure(
        host,
        session_api_key=session_api_key,
        allowed_hosts=allowed_hosts,
        allow_unauthenticated=allow_unauthenticated,
    )
    opened = None if data_dir is None else _open_store(data_dir)
    registry = ConversationRegistry(opened or store)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(registry.close)
        if opened is not None:  # a store the caller passed in is the caller's to close
            opened.close()

    app = FastAPI(
        title="cowconv agent server",
        version=_version(),
        summary="Conversations with agents, forkable in O(1), over HTTP.",
        lifespan=lifespan,
    )
    app.state.registry = registry
    add_security(
        app,
        bound_host=host,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        max_body_size=max_body_size,
    )
    _quiet_openapi(app)
    _add_error_handlers(app)

    @app.get("/health", response_model=HealthResponse, tags=["server"])
    def health() -> HealthResponse:
        """200 once the server is ready (no session key needed)."""
        return HealthResponse()

    app.include_router(_api_router(registry, session_api_key))
    return app


def _quiet_openapi(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        # Empty-tag defaults are pmap(), which pydantic cannot show in a schema; leaving
        # those defaults out of the schema is right, the warning about it is noise.
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r"Default value pmap", category=PydanticJsonSchemaWarning
            )
            return build()

    app.openapi = openapi  # type: ignore[method-assign]


def _version() -> str:
    return __version__


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def malformed(_request: Request, error: RequestValidationError) -> JSONResponse:
        # The default answer echoes the offending input, which may hold an LLM api key.
        detail = [
            {"type": item.get("type"), "loc": list(item.get("loc", ())), "msg": item.get("msg")}
            for item in error.errors()
        ]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        if error.status_code == 400:
            # FastAPI answers a body it cannot decode (not UTF-8) with 400; to a client that
            # is one more malformed body, which this API answers with 422 everywhere.
            return _error(422, f"malformed request body: {error.detail}")
        return await http_exception_handler(request, error)

    statuses: dict[type[Exception], int] = {
        ConversationNotFoundError: 404,
        EventNotFoundError: 404,
        ConversationConflictError: 409,
        InvalidValueError: 422,
        # The store: a damaged row (which DELETE still removes), a file held by another
        # process, a stale write (another server on the same data changed it).
        CorruptStoreError: 500,
        StoreLockedError: 503,
        StoreError: 409,
    }

    async def known_error(_request: Request, error: Exception) -> JSONResponse:
        status = next(code for kind, code in statuses.items() if isinstance(error, kind))
        return _error(status, str(error), type(error))

    for kind in statuses:
        app.add_exception_handler(kind, known_error)


def _page(events: EventLog, start: int, limit: int) -> EventPage:
    end = min(start + limit, len(events))
    return EventPage(
        items=list(events[start:end]),
        offset=start,
        total=len(events),
        next_offset=end if end < len(events) else None,
    )


def _session_dependencies(session_api_key: str | None) -> list[Any]:
    """The dependency that checks ``X-Session-API-Key`` (none without a key)."""
    if session_api_key is None:
        return []
    expected = session_api_key.encode()
    header = APIKeyHeader(name=SESSION_API_KEY_HEADER, auto_error=False)

    # A default, not Annotated[...]: postponed annotations cannot name this local.
    def check_session_key(given: str | None = Security(header)) -> None:  # noqa: B008
        if given is None or not hmac.compare_digest(given.encode(), expected):
            raise HTTPException(
                status_code=401, detail=f"missing or wrong {SESSION_API_KEY_HEADER} header"
            )

    return [Depends(check_session_key)]


def _api_router(registry: ConversationRegistry, session_api_key: str | None) -> APIRouter:
    unauthorized = (401,) if session_api_key is not None else ()
    api = APIRouter(
        prefix="/api/conversations",
        tags=["conversations"],
        dependencies=_session_dependencies(session_api_key),
        responses=_errors(*unauthorized, 422),
    )
    _add_conversation_routes(api, registry)
    _add_change_routes(api, registry)
    _add_event_routes(api, registry)
    _add_run_routes(api, registry)
    return api


def _add_conversation_routes(api: APIRouter, registry: ConversationRegistry) -> None:
    """Create, list, read and delete conversations."""

    @api.post("", status_code=201, response_model=ConversationInfo, responses=_errors(409))
    def create_conversation(request: CreateConversationRequest) -> ConversationInfo:
        """Create a conversation (409 if the id is taken)."""
        conversation = registry.create(
            request.agent,
            request.workspace,
            conversation_id=request.id,
            tags=request.tags,
            max_iteration_per_run=request.max_iteration_per_run,
        )
        return ConversationInfo.of(conversation.state)

    @api.get("", response_model=ConversationPage)
    def list_conversations(
        tag: Annotated[
            list[str], Query(description="key=value; repeat to require several tags")
        ] = [],  # noqa: B006 (FastAPI copies query defaults)
        limit: Annotated[int, Query(ge=1, le=_MAX_PAGE)] = 100,
        offset: Annotated[int, Query(ge=0, le=_MAX_OFFSET)] = 0,
    ) -> ConversationPage:
        """Conversation summaries, oldest first, optionally only those with all given tags."""
        items = registry.list(tags=_tag_filter(tag), limit=limit + 1, offset=offset)
        more = len(items) > limit
        return ConversationPage(
            items=items[:limit],
            next_offset=offset + limit if more else None,
            unreadable=registry.unreadable(),
        )

    @api.get("/{conversation_id}", response_model=ConversationInfo, responses=_errors(404))
    def get_conversation(conversation_id: str) -> ConversationInfo:
        """The summary of one conversation."""
        return ConversationInfo.of(registry.get(conversation_id).state)

    @api.get("/{conversation_id}/state", response_model=StateResponse, responses=_errors(404))
    def get_state(
        conversation_id: str,
        known: Annotated[int, Query(ge=0, le=_MAX_OFFSET)] = 0,
        last: Annotated[str | None, Query(description="id of the last event known")] = None,
    ) -> StateResponse:
        """The whole snapshot but its events (api keys redacted), and the ids of new events.

        ``known`` is how many events the client already has, ``last`` the id
        of the last of them; if that is not this history's event there, all
        ids are sent (``ids_from`` 0).
        """
        state = registry.get(conversation_id).state
        events = state.events
        start = known if known <= len(events) else 0
        if start and (last is None or events[start - 1].id != last):
            start = 0
        return StateResponse(
            state=dump_state(state, secrets="masked", branches=True),
            ids_from=start,
            event_ids=[events[position].id for position in range(start, len(events))],
        )

    @api.delete(
        "/{conversation_id}", status_code=204, response_class=Response, responses=_errors(404, 409)
    )
    def delete_conversation(conversation_id: str) -> Response:
        """Delete a conversation (409 while it runs). Its forks stay."""
        registry.delete(conversation_id)
        return Response(status_code=204)

    @api.get("/{conversation_id}/agent", response_model=Agent, responses=_errors(404))
    def get_agent(conversation_id: str) -> Agent:
        """The conversation's agent; the LLM api key is shown redacted."""
        return registry.get(conversation_id).agent


_F = TypeVar("_F", bound=Callable[..., Any])


def _change_route(api: APIRouter, change: type, **options: Any) -> Callable[[_F], _F]:
    """The route of a named change: its method and path from the shared wire mapping
    (:data:`cowconv.backends.wire.CHANGE_ROUTES`), which the remote backend sends to."""
    route = CHANGE_ROUTES[change]
    decorate: Callable[[_F], _F] = api.api_route(
        "/{conversation_id}" + route.path, methods=[route.method], **options
    )
    return decorate


def _add_change_routes(api: APIRouter, registry: ConversationRegistry) -> None:
    """Append events, send messages, set tags, agent state and skills."""

    @_change_route(
        api,
        AppendEvent,
        status_code=201,
        response_model=AnyEvent,
        responses=_errors(404, 409),
    )
    def append_event(conversation_id: str, request: AppendEventRequest) -> Event:
        """Append an event as given (409 if its id is already in the history)."""
        event = request.root
        conversation = registry.get(conversation_id)
        if conversation.state.events.position_of(event.id) is not None:
            raise ConversationConflictError(
                f"conversation {conversation_id!r} already has an event with id {event.id!r}"
            )
        return conversation.append_event(event)

    @api.post(
        "/{conversation_id}/messages",
        status_code=201,
        response_model=AnyEvent,
        responses=_errors(404),
    )
    def send_message(
        conversation_id: str, request: SendMessageRequest, response: Response
    ) -> Event:
        """Add a user message; answers with its event.

        The agent's system prompt is recorded just before it when it is not
        current (the first message, or after the agent changed); the header
        ``X-Cowconv-System-Prompt-At`` then gives that event's position.
        """
        conversation = registry.get(conversation_id)
        before = conversation.state.events
        event = conversation.send_message(request.text)
        events = conversation.state.events
        position = events.position_of(event.id)
        if position:
            prompt = events[position - 1]
            if isinstance(prompt, SystemPromptEvent) and before.position_of(prompt.id) is None:
                response.headers[SYSTEM_PROMPT_AT_HEADER] = str(position - 1)
        return event

    @_change_route(api, NavigateTo, response_model=ConversationInfo, responses=_errors(404, 409))
    def navigate(conversation_id: str, request: NavigateRequest) -> ConversationInfo:
        """Move the active branch to end at ``event_id`` (the seed SDK's route and body).

        The next message starts a new branch from there; the branch left
        behind is kept. 404 for an unknown event, 409 while a run is going.
        """
        return ConversationInfo.of(registry.navigate(conversation_id, request.event_id))

    @_change_route(api, SetTag, response_model=ConversationInfo, responses=_errors(404))
    def set_tags(conversation_id: str, tags: dict[str, str | None]) -> ConversationInfo:
        """Set tags; a ``null`` value removes the tag (JSON merge patch)."""
        conversation = registry.get(conversation_id)
        for key, value in tags.items():
            conversation.set_tag(key, value)
        return ConversationInfo.of(conversation.state)

    @_change_route(api, UpdateAgentState, response_model=ConversationInfo, responses=_errors(404))
    def update_agent_state(conversation_id: str, changes: dict[str, Any]) -> ConversationInfo:
        """Merge the given keys into the agent state."""
        conversation = registry.get(conversation_id)
        conversation.update_agent_state(changes)
        return ConversationInfo.of(conversation.state)

    @_change_route(api, ActivateSkill, response_model=ConversationInfo, responses=_errors(404))
    def activate_skill(conversation_id: str, request: ActivateSkillRequest) -> ConversationInfo:
        """Activate a knowledge skill (once)."""
        conversation = registry.get(conversation_id)
        conversation.activate_skill(request.name)
        return ConversationInfo.of(conversation.state)


def _add_event_routes(api: APIRouter, registry: ConversationRegistry) -> None:
    """Read events: pages and the live stream."""

    @api.get("/{conversation_id}/events", response_model=EventPage, responses=_errors(404))
    def list_events(
        conversation_id: str,
        offset: Annotated[int | None, Query(ge=0, le=_MAX_OFFSET)] = None,
        after: Annotated[
            str | None, Query(description="start after this event id (instead of offset)")
        ] = None,
        limit: Annotated[int, Query(ge=0, le=_MAX_PAGE)] = 100,
    ) -> EventPage:
        """A page of events, oldest first, from ``offset`` or after the event ``after``."""
        _one_position(offset, after)
        events = registry.get(conversation_id).state.events
        return _page(events, _start(events, conversation_id, offset, after), limit)

    @api.get("/{conversation_id}/branches", response_model=BranchList, responses=_errors(404))
    def list_branches(conversation_id: str) -> BranchList:
        """Every branch of the conversation tree, each by its leaf event; the active one last."""
        state = registry.get(conversation_id).state
        return BranchList(
            items=[
                BranchInfo(
                    leaf_event_id=None if branch.last is None else branch.last.id,
                    event_count=len(branch),
                    active=len(branch) == len(state.events) and branch.starts_with(state.events),
                )
                for branch in state.branches
            ]
        )

    @api.get(
        "/{conversation_id}/branches/{leaf_event_id}/events",
        response_model=EventPage,
        responses=_errors(404),
    )
    def list_branch_events(
        conversation_id: str,
        leaf_event_id: str,
        offset: Annotated[int, Query(ge=0, le=_MAX_OFFSET)] = 0,
        limit: Annotated[int, Query(ge=0, le=_MAX_PAGE)] = 100,
    ) -> EventPage:
        """A page of the events of the branch ending at ``leaf_event_id``."""
        state = registry.get(conversation_id).state
        for branch in state.branches:
            if branch.last is not None and branch.last.id == leaf_event_id:
                return _page(branch, min(offset, len(branch)), limit)
        raise EventNotFoundError(
            f"conversation {conversation_id!r} has no branch ending at event {leaf_event_id!r}"
        )

    def stream_start(
        conversation_id: str,
        offset: Annotated[int | None, Query(ge=0, le=_MAX_OFFSET)] = None,
        after: Annotated[str | None, Query()] = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> int:
        # A dependency, so an unknown conversation or event is a 404 before the stream opens.
        _one_position(offset, after)
        events = registry.get(conversation_id).state.events
        after = _header_text(last_event_id) or after
        if offset is None and after is None:
            return len(events)
        return _start(events, conversation_id, offset, after)

    @api.get(
        "/{conversation_id}/events/stream",
        response_class=EventSourceResponse,
        responses={
            **_errors(404),
            200: {
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
                "description": "Server-sent events: `event` messages (id = event id, data = "
                "the event) and `status` messages (data = StreamStatus).",
            },
        },
    )
    # A default, not Annotated[...]: postponed annotations cannot name the local stream_start.
    async def stream_events(
        conversation_id: str,
        until_idle: Annotated[bool, Query()] = False,
        start: int = Depends(stream_start),  # noqa: B008
    ) -> AsyncIterator[ServerSentEvent]:
        """Server-sent events of the conversation from a position, then live.

        Starts after ``after`` (or the ``Last-Event-ID`` header a reconnecting
        client sends), at ``offset``, or, given neither, at the end (new events
        only). With ``until_idle`` the stream ends once no run is going.
        """
        async for message in _stream(registry, conversation_id, start, until_idle):
            yield message


def _add_run_routes(api: APIRouter, registry: ConversationRegistry) -> None:
    """Run, pause and fork."""

    @api.post(
        "/{conversation_id}/run",
        status_code=202,
        response_model=ConversationInfo,
        responses=_errors(404, 409),
    )
    def run(conversation_id: str) -> ConversationInfo:
        """Start a run in the background and answer at once (409 if one is going).

        The answer is the summary the run starts from; follow the run on the
        event stream (``until_idle=true`` ends the stream with the run).
        """
        return ConversationInfo.of(registry.run(conversation_id))

    @api.post("/{conversation_id}/pause", response_model=ConversationInfo, responses=_errors(404))
    def pause(conversation_id: str) -> ConversationInfo:
        """Ask a running conversation to pause after its current step."""
        return ConversationInfo.of(registry.pause(conversation_id))

    @api.post(
        "/{conversation_id}/interrupt", response_model=ConversationInfo, responses=_errors(404)
    )
    def interrupt(conversation_id: str) -> ConversationInfo:
        """End a run now: kill its running command, run no further tool call, end paused.

        Answers at once; follow the end on the event stream. Idle: does nothing.
        """
        return ConversationInfo.of(registry.interrupt(conversation_id))

    @api.post(
        "/{conversation_id}/fork",
        status_code=201,
        response_model=ConversationInfo,
        responses=_errors(404, 409),
    )
    def fork(
        conversation_id: str, request: Annotated[ForkRequest | None, Body()] = None
    ) -> ConversationInfo:
        """Fork in O(1): same history and agent (credentials included), new id, idle.

        404 for an unknown conversation or ``from_event_id``, 409 if ``id`` is taken.
        """
        request = request or ForkRequest()
        forked = registry.fork(
            conversation_id,
            fork_id=request.id,
            title=request.title,
            tags=request.tags,
            reset_metrics=request.reset_metrics,
            from_event_id=request.from_event_id,
        )
        return ConversationInfo.of(forked.state)


def _header_text(value: str | None) -> str | None:
    """A header value as the UTF-8 text a browser sent (Starlette decodes it as Latin-1)."""
    if value is None or value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _one_position(offset: int | None, after: str | None) -> None:
    if offset is not None and after is not None:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("query", "after"), "msg": "give offset or after"}]
        )


async def _stream(
    registry: ConversationRegistry, conversation_id: str, start: int, until_idle: bool
) -> AsyncIterator[ServerSentEvent]:
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:
        try:
            loop.call_soon_threadsafe(woken.set)
        except RuntimeError:  # the loop has closed: the stream is gone anyway
            pass

    unsubscribe = registry.subscribe(conversation_id, wake)
    try:
        cursor = start
        last_status: StreamStatus | None = None
        while True:
            woken.clear()
            conversation = registry.find(conversation_id)
            if conversation is None or registry.closed:
                return
            # Read "running" before the snapshot: once a run is seen finished, every
            # event it recorded is already in the snapshot read after it.
            running = registry.is_running(conversation_id)
            state = conversation.state
            for position in range(cursor, len(state.events)):
                event = state.events[position]
                yield ServerSentEvent(raw_data=event.model_dump_json(), event="event", id=event.id)
            cursor = max(cursor, len(state.events))
            status = StreamStatus(
                execution_status=state.execution_status, running=running, event_count=cursor
            )
            if status != last_status:
                yield ServerSentEvent(raw_data=status.model_dump_json(), event="status")
                last_status = status
            if until_idle and not running:
                return
            # FastAPI sends the keepalive comments while this waits.
            await woken.wait()
    finally:
        unsubscribe()
