"""The FastAPI application of the agent server: routes, errors, security, event stream."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

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
    WebSocket,
    WebSocketDisconnect,
)
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import StringConstraints
from pydantic.json_schema import PydanticJsonSchemaWarning
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
    ID_WHITESPACE,
    ActivateSkillRequest,
    AppendEventRequest,
    BranchInfo,
    BranchList,
    ConversationPage,
    ConversationResponse,
    ConversationSearchPage,
    CreateConversationRequest,
    ErrorResponse,
    EventPage,
    ForkRequest,
    HealthResponse,
    NavigateRequest,
    OpenHandsEventPage,
    RunStarted,
    SendMessageRequest,
    SentMessage,
    StateResponse,
    StreamStatus,
    Success,
    UpdateConversationRequest,
)
from cowconv.agent_server.registry import DEFAULT_MAX_LIVE, ConversationRegistry
from cowconv.agent_server.schema_check import check_request
from cowconv.agent_server.security import DEFAULT_MAX_BODY_SIZE, add_security, check_exposure
from cowconv.backends.wire import (
    CHANGE_ROUTES,
    SERVER_HEADER,
    SESSION_API_KEY_HEADER,
    SYSTEM_PROMPT_AT_HEADER,
    agent_to_openhands,
    event_to_openhands,
    mask_secrets,
)
from cowconv.conversation import Conversation
from cowconv.core.agent import Agent
from cowconv.core.changes import ActivateSkill, AppendEvent, NavigateTo, SetTag, UpdateAgentState
from cowconv.core.events import AnyEvent, Event, MessageEvent, SystemPromptEvent
from cowconv.core.frozen import thaw
from cowconv.core.history import EventLog
from cowconv.core.ids import id_text
from cowconv.core.state import ConversationInfo, ExecutionStatus, dump_state
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


# The schema says what the server takes: a non-empty key, "=", any value.
_TagFilter = Annotated[str, StringConstraints(pattern=r"^[^=]+=")]
# An id: not blank (the server refuses a blank one).
_IdText = Annotated[str, StringConstraints(pattern=f"[^{ID_WHITESPACE}]")]


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
    """Where a page or stream starts: ``offset`` events in, counted from the start or, given
    ``after``, from just after that event (a request may give both: the schema allows it)."""
    if after is None:
        return min(offset or 0, len(events))
    try:
        start = events.index_of(after) + 1
    except KeyError:
        raise EventNotFoundError(
            f"conversation {conversation_id!r} has no event with id {after!r}"
        ) from None
    return min(start + (offset or 0), len(events))


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
    max_live_conversations: int = DEFAULT_MAX_LIVE,
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
    over ``max_body_size`` bytes are answered 413. At most ``max_live_conversations`` idle
    conversations stay in memory. See ``docs/server.md``.

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
    registry = ConversationRegistry(opened or store, max_live=max_live_conversations)

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
    _add_sockets(app, registry, session_api_key)
    app.add_middleware(_ServerHeader)
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
            schema = build()
        # A blank or whitespace-only id is refused (422) by every route: the schema says so.
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for parameter in operation.get("parameters", ()):
                    if parameter.get("in") == "path" and parameter.get("name") == "conversation_id":
                        parameter["schema"]["pattern"] = f"[^{ID_WHITESPACE}]"
        return schema

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
        if error.status_code == 405:
            # Starlette names the methods of the one route it tried; the schema documents
            # every route of the path: name them all.
            error.headers = {**(error.headers or {}), "Allow": _allowed_methods(request)}
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


def _allowed_methods(request: Request) -> str:
    """The methods the OpenAPI schema documents for the request's path (the 405 ``Allow``)."""
    path = request.url.path
    matches: list[tuple[int, dict[str, Any]]] = []
    for template, operations in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            matches.append((template.count("{"), operations))
    # A literal path (/search) is its own resource, not an id of the templated one.
    fewest = min((parameters for parameters, _ in matches), default=0)
    methods = {
        method.upper()
        for parameters, operations in matches
        if parameters == fewest
        for method in operations
    }
    return ", ".join(sorted(methods))


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
        # The session key first (an outsider learns nothing), then the body against the
        # published schema, then the route's own validation.
        dependencies=[*_session_dependencies(session_api_key), Depends(check_request)],
        responses=_errors(*unauthorized, 422),
    )
    _add_conversation_routes(api, registry)
    _add_change_routes(api, registry)
    _add_event_routes(api, registry)
    _add_openhands_event_routes(api, registry)
    _add_run_routes(api, registry)
    return api


OPENHANDS_KEY = "openhands"
"""The ``agent_state`` key under which the server keeps what OpenHands' SDK sent and cowconv does
not implement (the agent's JSON, secrets masked, and other request fields), to show it again."""


def conversation_response(conversation: Conversation) -> ConversationResponse:
    """The answer for a conversation: cowconv's summary and OpenHands' ``ConversationInfo``."""
    state = conversation.state
    kept = state.agent_state.get(OPENHANDS_KEY)
    kept = thaw(kept) if kept is not None else {}
    if not isinstance(kept, dict):
        kept = {}
    ours = agent_to_openhands(state.agent.model_dump(mode="json"))
    sent: dict[str, Any] = kept["agent"] if isinstance(kept.get("agent"), dict) else {}
    agent = {**sent, **ours, "llm": {**sent.get("llm", {}), **ours["llm"]}}
    if "tools" in sent:  # as sent: tools cowconv lacks are kept (and not run)
        agent["tools"] = sent["tools"]
    request: dict[str, Any] = kept["request"] if isinstance(kept.get("request"), dict) else {}
    info = ConversationInfo.of(state)
    return ConversationResponse.model_validate(
        {
            **request,
            **{name: getattr(info, name) for name in ConversationInfo.model_fields},
            "agent": mask_secrets(agent),
            "workspace": {"kind": "LocalWorkspace", "working_dir": state.workspace.working_dir},
            "max_iterations": conversation.max_iteration_per_run,
            "head_is_empty": state.head_is_empty,
            "agent_state": {k: v for k, v in thaw(state.agent_state).items() if k != OPENHANDS_KEY},
        }
    )


def _add_conversation_routes(api: APIRouter, registry: ConversationRegistry) -> None:
    """Create, list, read and delete conversations."""

    @api.post(
        "",
        status_code=201,
        response_model=ConversationResponse,
        responses={200: {"description": "A conversation with that id exists: unchanged"}},
    )
    def create_conversation(
        request: CreateConversationRequest, response: Response
    ) -> ConversationResponse:
        """Create a conversation (OpenHands' ``StartConversationRequest``).

        201 with the new conversation; 200 with the existing one, unchanged,
        if ``conversation_id`` (or ``id``) is taken (OpenHands' idempotent start).
        """
        if request.id is not None:
            existing = registry.find(request.id)
            if existing is not None:
                response.status_code = 200
                return conversation_response(existing)
        kept: dict[str, Any] = {}
        if request.openhands_agent is not None:
            kept["agent"] = request.openhands_agent
        if request.kept:
            kept["request"] = mask_secrets(request.kept)
        # The kept JSON is part of the first snapshot: what cannot be stored refuses the create.
        conversation = registry.create(
            request.agent,
            request.workspace,
            conversation_id=request.id,
            tags=request.tags,
            max_iteration_per_run=request.max_iteration_per_run,
            agent_state={OPENHANDS_KEY: kept} if kept else None,
        )
        message = request.initial_message
        if message is not None:
            conversation.send_message(message.message_text())
            if message.run:
                registry.run(id_text(conversation.id))
        return conversation_response(conversation)

    @api.get(
        "",
        response_model=ConversationPage | list[ConversationResponse | None],
        responses=_errors(404),
    )
    def list_conversations(
        tag: Annotated[
            list[_TagFilter], Query(description="key=value; repeat to require several tags")
        ] = [],  # noqa: B006 (FastAPI copies query defaults)
        limit: Annotated[int, Query(ge=1, le=_MAX_PAGE)] = 100,
        offset: Annotated[int, Query(ge=0, le=_MAX_OFFSET)] = 0,
        ids: Annotated[
            list[_IdText] | None,
            Query(max_length=99, description="OpenHands' batch get: these conversations"),
        ] = None,
        cursor: Annotated[str | None, Query(max_length=4096, pattern=r"^[^\x00]*$")] = None,
    ) -> ConversationPage | list[ConversationResponse | None]:
        """Conversation summaries, oldest first, optionally only those with all given tags.

        With ``ids`` (OpenHands' batch get): those conversations in that order,
        ``null`` for an unknown one.
        """
        if ids is not None:
            found = [registry.find(conversation_id) for conversation_id in ids]
            return [None if c is None else conversation_response(c) for c in found]
        page = registry.page(tags=_tag_filter(tag), limit=limit, offset=offset, cursor=cursor)
        return ConversationPage(**page._asdict())

    @api.get("/search", response_model=ConversationSearchPage)
    def search_conversations(
        page_id: Annotated[str | None, Query(pattern=r"^[0-9]{1,15}$")] = None,
        limit: Annotated[int, Query(gt=0, le=100)] = 100,
        status: Annotated[ExecutionStatus | None, Query()] = None,
        sort_order: Annotated[
            Literal["CREATED_AT", "CREATED_AT_DESC", "UPDATED_AT", "UPDATED_AT_DESC"], Query()
        ] = "CREATED_AT_DESC",
    ) -> ConversationSearchPage:
        """OpenHands' conversation search: pages of conversations (``page_id`` from the last)."""
        matching = _all_conversations(registry, status)
        field = "updated_at" if sort_order.startswith("UPDATED_AT") else "created_at"
        matching.sort(key=lambda info: getattr(info, field), reverse=sort_order.endswith("DESC"))
        start = int(page_id or 0)
        page = matching[start : start + limit]
        found = [registry.find(id_text(info.id)) for info in page]
        return ConversationSearchPage(
            items=[conversation_response(c) for c in found if c is not None],
            next_page_id=str(start + limit) if start + limit < len(matching) else None,
        )

    @api.get("/count", response_model=int)
    def count_conversations(status: Annotated[ExecutionStatus | None, Query()] = None) -> int:
        """OpenHands' count of conversations (with ``status``, of those in that status)."""
        return len(_all_conversations(registry, status))

    @api.get("/{conversation_id}", response_model=ConversationResponse, responses=_errors(404))
    def get_conversation(conversation_id: str) -> ConversationResponse:
        """The conversation: cowconv's summary and OpenHands' ``ConversationInfo`` fields."""
        return conversation_response(registry.get(conversation_id))

    @api.patch("/{conversation_id}", response_model=Success, responses=_errors(404))
    def update_conversation(conversation_id: str, request: UpdateConversationRequest) -> Success:
        """OpenHands' update: set the title and tags (a ``null`` tag value removes the tag)."""
        conversation = registry.get(conversation_id)
        if request.title is not None:
            conversation.set_tag("title", request.title)
        for key, value in (request.tags or {}).items():
            conversation.set_tag(key, value)
        return Success()

    @api.get("/{conversation_id}/state", response_model=StateResponse, responses=_errors(404))
    def get_state(
        conversation_id: str,
        known: Annotated[int, Query(ge=0, le=_MAX_OFFSET)] = 0,
        last: Annotated[str | None, Query(description="id of the last event known")] = None,
    ) -> StateResponse:
        """The whole snapshot but its events (api keys redacted), and the ids of new events.

        ``known`` is how many events the client already has, ``last`` the id
        of the last of them; if that is not this history's event there, all
        ids are sent (``ids_from`` 0). A cowconv addition.
        """
        state = registry.get(conversation_id).state
        events = state.branch
        start = known if known <= len(events) else 0
        if start and (last is None or events[start - 1].id != last):
            start = 0
        dumped = dump_state(state, secrets="masked", branches=True)
        if isinstance(dumped.get("agent_state"), dict):  # what OpenHands sent stays server-side
            dumped["agent_state"] = {
                k: v for k, v in dumped["agent_state"].items() if k != OPENHANDS_KEY
            }
        return StateResponse(
            state=dumped,
            ids_from=start,
            event_ids=[events[position].id for position in range(start, len(events))],
        )

    @api.delete("/{conversation_id}", response_model=Success, responses=_errors(404, 409))
    def delete_conversation(conversation_id: str) -> Success:
        """Delete a conversation (409 while it runs). Its forks stay."""
        registry.delete(conversation_id)
        return Success()

    @api.get("/{conversation_id}/agent", response_model=Agent, responses=_errors(404))
    def get_agent(conversation_id: str) -> Agent:
        """The conversation's agent as cowconv runs it; the LLM api key is shown redacted."""
        return registry.get(conversation_id).agent


def _all_conversations(
    registry: ConversationRegistry, status: ExecutionStatus | None
) -> list[ConversationInfo]:
    found: list[ConversationInfo] = []
    offset = 0
    while True:
        page = registry.list(limit=_MAX_PAGE, offset=offset)
        found.extend(info for info in page if status is None or info.execution_status == status)
        if len(page) < _MAX_PAGE:
            return found
        offset += _MAX_PAGE


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
        """Append an event as given (409 if its id is already in the history).

        A cowconv addition (``RemoteConversation.append_event``); ``POST /events``
        is OpenHands' send message.
        """
        event = request.root
        conversation = registry.get(conversation_id)
        if conversation.state.branch.position_of(event.id) is not None:
            raise ConversationConflictError(
                f"conversation {conversation_id!r} already has an event with id {event.id!r}"
            )
        return conversation.append_event(event)

    def record_message(
        conversation_id: str, request: SendMessageRequest, response: Response
    ) -> Event:
        conversation = registry.get(conversation_id)
        before = conversation.state.branch
        event = conversation.send_message(request.message_text(), request.sender)
        events = conversation.state.branch
        position = events.position_of(event.id)
        if position:
            prompt = events[position - 1]
            if isinstance(prompt, SystemPromptEvent) and before.position_of(prompt.id) is None:
                response.headers[SYSTEM_PROMPT_AT_HEADER] = str(position - 1)
        if request.run:
            try:
                registry.run(conversation_id)
            except ConversationConflictError:
                pass  # already running: the run reads the message (OpenHands does the same)
        return event

    @api.post("/{conversation_id}/events", response_model=SentMessage, responses=_errors(404))
    def send_message(
        conversation_id: str, request: SendMessageRequest, response: Response
    ) -> SentMessage:
        """Send a user message (OpenHands' route and body: ``role``, ``content``, ``run``).

        Answers OpenHands' ``{"success": true}`` plus ``event``, the recorded
        message. The agent's system prompt is recorded just before it when it
        is not current (the first message, or after the agent changed); the
        header ``X-Cowconv-System-Prompt-At`` then gives that event's position.
        With ``run`` a run starts (unless one is going).
        """
        event = record_message(conversation_id, request, response)
        return SentMessage(event=event)

    @api.post(
        "/{conversation_id}/messages",
        status_code=201,
        response_model=AnyEvent,
        responses=_errors(404),
    )
    def send_message_event(
        conversation_id: str, request: SendMessageRequest, response: Response
    ) -> Event:
        """Send a user message (``{"text": ...}`` or OpenHands' body); answers with its event.

        cowconv's route, kept beside OpenHands' ``POST /events``.
        """
        return record_message(conversation_id, request, response)

    @_change_route(
        api, NavigateTo, response_model=ConversationResponse, responses=_errors(404, 409)
    )
    def navigate(conversation_id: str, request: NavigateRequest) -> ConversationResponse:
        """Move the active branch to end at ``event_id`` (OpenHands' route and body).

        The next message starts a new branch from there; the branch left
        behind is kept. 404 for an unknown event, 409 while a run is going.
        """
        registry.navigate(conversation_id, request.event_id)
        return conversation_response(registry.get(conversation_id))

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
        offset: Annotated[
            int | None,
            Query(ge=0, le=_MAX_OFFSET, description="events to skip (after `after` if given)"),
        ] = None,
        after: Annotated[str | None, Query(description="start after this event id")] = None,
        limit: Annotated[int, Query(ge=0, le=_MAX_PAGE)] = 100,
    ) -> EventPage:
        """A page of events, oldest first, from ``offset`` or after the event ``after``."""
        events = registry.get(conversation_id).state.branch
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
                    active=len(branch) == len(state.branch) and branch.starts_with(state.branch),
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
        events = registry.get(conversation_id).state.branch
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


def _matching(
    events: Sequence[Event],
    kind: str | None,
    source: str | None,
    body: str | None,
    since: datetime | None,
    before: datetime | None,
) -> list[Event]:
    needle = None if body is None else body.lower()
    return [
        event
        for event in events
        if (kind is None or event.kind == kind)
        and (source is None or event.source == source)
        and (needle is None or (isinstance(event, MessageEvent) and needle in event.text.lower()))
        and (since is None or _in_time(event.timestamp, lambda moment: moment >= _aware(since)))
        and (before is None or _in_time(event.timestamp, lambda moment: moment < _aware(before)))
    ]


def _in_time(timestamp: str, test: Callable[[datetime], bool]) -> bool:
    # An event's timestamp is any text the schema allows: one that is not ISO 8601 has no
    # time, so no time filter matches it (it used to be a 500).
    try:
        moment = _aware(timestamp)
    except ValueError:
        return False
    return test(moment)


def _aware(moment: datetime | str) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _add_openhands_event_routes(api: APIRouter, registry: ConversationRegistry) -> None:
    """OpenHands' event search, count and get-one (events in OpenHands' JSON shapes)."""

    @api.get(
        "/{conversation_id}/events/search",
        response_model=OpenHandsEventPage,
        responses=_errors(404),
    )
    def search_events(
        conversation_id: str,
        page_id: Annotated[str | None, Query(pattern=r"^[0-9]{1,15}$")] = None,
        limit: Annotated[int, Query(gt=0, le=100)] = 100,
        kind: Annotated[str | None, Query()] = None,
        source: Annotated[str | None, Query()] = None,
        body: Annotated[str | None, Query()] = None,
        sort_order: Annotated[Literal["TIMESTAMP", "TIMESTAMP_DESC"], Query()] = "TIMESTAMP",
        timestamp__gte: Annotated[datetime | None, Query()] = None,
        timestamp__lt: Annotated[datetime | None, Query()] = None,
    ) -> OpenHandsEventPage:
        """A page of events in OpenHands' JSON shapes, oldest first (``page_id`` from the last).

        Events are in history order (which is timestamp order); the filters
        are OpenHands'.
        """
        events = registry.get(conversation_id).state.branch
        matching = _matching(events, kind, source, body, timestamp__gte, timestamp__lt)
        if sort_order == "TIMESTAMP_DESC":
            matching.reverse()
        start = int(page_id or 0)
        page = matching[start : start + limit]
        return OpenHandsEventPage(
            items=[event_to_openhands(event.model_dump(mode="json")) for event in page],
            next_page_id=str(start + limit) if start + limit < len(matching) else None,
        )

    @api.get("/{conversation_id}/events/count", response_model=int, responses=_errors(404))
    def count_events(
        conversation_id: str,
        kind: Annotated[str | None, Query()] = None,
        source: Annotated[str | None, Query()] = None,
        body: Annotated[str | None, Query()] = None,
        timestamp__gte: Annotated[datetime | None, Query()] = None,
        timestamp__lt: Annotated[datetime | None, Query()] = None,
    ) -> int:
        """How many events match OpenHands' filters."""
        events = registry.get(conversation_id).state.branch
        return len(_matching(events, kind, source, body, timestamp__gte, timestamp__lt))

    @api.get(
        "/{conversation_id}/events/{event_id}",
        response_model=dict[str, Any],
        responses=_errors(404),
    )
    def get_event(conversation_id: str, event_id: str) -> dict[str, Any]:
        """One event in OpenHands' JSON shape (404 if the history has none with that id)."""
        events = registry.get(conversation_id).state.branch
        position = events.position_of(event_id)
        if position is None:
            raise EventNotFoundError(
                f"conversation {conversation_id!r} has no event with id {event_id!r}"
            )
        return event_to_openhands(events[position].model_dump(mode="json"))


def _add_run_routes(api: APIRouter, registry: ConversationRegistry) -> None:
    """Run, pause, interrupt and fork."""

    @api.post("/{conversation_id}/run", response_model=RunStarted, responses=_errors(404, 409))
    def run(conversation_id: str) -> RunStarted:
        """Start a run in the background and answer at once (409 if one is going).

        OpenHands' ``{"success": true}``, plus ``event_count``: how many events
        the run starts from. Follow the run on the WebSocket or on the event
        stream (``until_idle=true`` ends the stream with the run).
        """
        return RunStarted(event_count=len(registry.run(conversation_id).branch))

    @api.post("/{conversation_id}/pause", response_model=Success, responses=_errors(404))
    def pause(conversation_id: str) -> Success:
        """Ask a running conversation to pause after its current step."""
        registry.pause(conversation_id)
        return Success()

    @api.post("/{conversation_id}/interrupt", response_model=Success, responses=_errors(404))
    def interrupt(conversation_id: str) -> Success:
        """End a run now: kill its running command, run no further tool call, end paused.

        Answers at once; follow the end on the event stream. Idle: does nothing.
        """
        registry.interrupt(conversation_id)
        return Success()

    @api.post(
        "/{conversation_id}/fork",
        status_code=201,
        response_model=ConversationResponse,
        responses=_errors(404, 409),
    )
    def fork(
        conversation_id: str, request: Annotated[ForkRequest | None, Body()] = None
    ) -> ConversationResponse:
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
        return conversation_response(forked)


def _header_text(value: str | None) -> str | None:
    """A header value as the UTF-8 text a browser sent (Starlette decodes it as Latin-1)."""
    if value is None or value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


async def _follow(
    registry: ConversationRegistry, conversation_id: str, start: int, until_idle: bool
) -> AsyncIterator[Event | StreamStatus]:
    """The events of a conversation from ``start`` on, then live, and its status when it changes.

    The first item after the events already there is always a status. Ends
    when the conversation is deleted, the server closes, or (``until_idle``)
    no run is going.
    """
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
            for position in range(cursor, len(state.branch)):
                yield state.branch[position]
            cursor = max(cursor, len(state.branch))
            status = StreamStatus(
                execution_status=state.execution_status, running=running, event_count=cursor
            )
            if status != last_status:
                yield status
                last_status = status
            if until_idle and not running:
                return
            await woken.wait()
    finally:
        unsubscribe()


async def _stream(
    registry: ConversationRegistry, conversation_id: str, start: int, until_idle: bool
) -> AsyncIterator[ServerSentEvent]:
    # FastAPI sends the keepalive comments while _follow waits.
    async for item in _follow(registry, conversation_id, start, until_idle):
        if isinstance(item, StreamStatus):
            yield ServerSentEvent(raw_data=item.model_dump_json(), event="status")
        else:
            yield ServerSentEvent(raw_data=item.model_dump_json(), event="event", id=item.id)


# -- OpenHands' events WebSocket -----------------------------------------------------------

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
        frame = await asyncio.wait_for(websocket.receive_json(), timeout=_AUTH_TIMEOUT)
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


async def _socket_messages(
    websocket: WebSocket, registry: ConversationRegistry, conversation_id: str
) -> None:
    """Messages a client sends on the socket: OpenHands' ``Message`` JSON, sent and run."""
    while True:
        try:
            data = await websocket.receive_json()
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
            await asyncio.to_thread(_send_and_run, registry, conversation_id, request)
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


def _send_and_run(
    registry: ConversationRegistry, conversation_id: str, request: SendMessageRequest
) -> None:
    registry.get(conversation_id).send_message(request.message_text())
    with contextlib.suppress(ConversationConflictError):  # already running: it reads it
        registry.run(conversation_id)


async def _socket_events(
    websocket: WebSocket, registry: ConversationRegistry, conversation_id: str, start: int
) -> None:
    """Events in OpenHands' shapes, and ``ConversationStateUpdateEvent``s, as they happen.

    First a full-state update (the client waits for it before it trusts the
    socket); then each event; a per-field ``execution_status`` update while a
    run goes on, and a full-state update when no run is going (OpenHands'
    client takes that as the end of its run).
    """
    first = True
    async for item in _follow(registry, conversation_id, start, until_idle=False):
        if isinstance(item, StreamStatus):
            conversation = registry.find(conversation_id)
            if conversation is None:
                return
            if first or not item.running:
                value = conversation_response(conversation).model_dump(mode="json")
                await websocket.send_json(_state_update("full_state", value))
            else:
                await websocket.send_json(_state_update("execution_status", item.execution_status))
            first = False
        else:
            await websocket.send_json(event_to_openhands(item.model_dump(mode="json")))


def _add_sockets(app: FastAPI, registry: ConversationRegistry, session_api_key: str | None) -> None:
    @app.websocket("/sockets/events/{conversation_id}")
    async def events_socket(
        websocket: WebSocket,
        conversation_id: str,
        session_api_key_query: Annotated[str | None, Query(alias="session_api_key")] = None,
        resend_mode: Annotated[Literal["all", "since"] | None, Query()] = None,
        after_timestamp: Annotated[datetime | None, Query()] = None,
        resend_all: Annotated[bool, Query()] = False,
    ) -> None:
        """OpenHands' events socket: live events of a conversation, and messages to send."""
        if not await _authenticate_socket(websocket, session_api_key, session_api_key_query):
            return
        conversation = registry.find(conversation_id)
        if conversation is None:
            await websocket.close(code=4004, reason="Conversation not found")
            return
        events = conversation.state.branch
        start = len(events)
        if resend_mode == "all" or (resend_mode is None and resend_all):
            start = 0
        elif resend_mode == "since" and after_timestamp is not None:
            since = _aware(after_timestamp)
            start = next(
                (i for i, event in enumerate(events) if _aware(event.timestamp) >= since),
                len(events),
            )
        tasks = {
            asyncio.create_task(_socket_messages(websocket, registry, conversation_id)),
            asyncio.create_task(_socket_events(websocket, registry, conversation_id, start)),
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


class _ServerHeader:
    """Names the server (``X-Cowconv-Server: <version>``) on every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.header = (SERVER_HEADER.lower().encode(), _version().encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), self.header]}
            await send(message)

        await self.app(scope, receive, named)
