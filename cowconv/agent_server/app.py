"""The FastAPI application of the agent server: the routers, error answers, security, /health."""

from __future__ import annotations

import asyncio
import copy
import hmac
import logging
import os
import re
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import (
    Depends,
    FastAPI,
    HTTPException,
    Request,
    Security,
)
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from pydantic.json_schema import PydanticJsonSchemaWarning
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cowconv import __version__
from cowconv._exceptions import (
    ConversationConflictError,
    ConversationNotFoundError,
    CorruptStoreError,
    EventNotFoundError,
    InvalidTypeError,
    InvalidValueError,
    StoreError,
    StoreLockedError,
)
from cowconv.agent_server.bash_router import bash_router
from cowconv.agent_server.config import Config
from cowconv.agent_server.conversation_router import conversation_router
from cowconv.agent_server.conversation_service import ConversationService
from cowconv.agent_server.dependencies import ApiError
from cowconv.agent_server.event_router import event_router
from cowconv.agent_server.file_router import file_router
from cowconv.agent_server.models import (
    ID_WHITESPACE,
    ErrorResponse,
    HealthResponse,
)
from cowconv.agent_server.registry import DEFAULT_MAX_LIVE, ConversationRegistry
from cowconv.agent_server.schema_check import check_request
from cowconv.agent_server.security import DEFAULT_MAX_BODY_SIZE, add_security, check_exposure
from cowconv.agent_server.sockets import sockets_router
from cowconv.backends.wire import SERVER_HEADER, SESSION_API_KEY_HEADER
from cowconv.stores import STORE_FILE_NAME, Store, open_directory

__all__ = ["SESSION_API_KEY_HEADER", "STORE_FILE_NAME", "create_app"]

logger = logging.getLogger("cowconv.agent_server")


def _error(status_code: int, detail: str, error: type[Exception] | None = None) -> JSONResponse:
    content: dict[str, Any] = {"detail": detail}
    if error is not None:  # the client raises the same class again
        content["error"] = error.__name__
    return JSONResponse(status_code=status_code, content=content)


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse} for code in codes}


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
    named_conversations: bool = True,
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
    conversations stay in memory. Conversation ids may be any text
    (``named_conversations``); ``named_conversations=False`` takes UUIDs
    only, as OpenHands' agent server (another id is a 422). See ``docs/server.md``.

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
    opened = None if data_dir is None else open_directory(data_dir, "data_dir")
    registry = ConversationRegistry(opened or store, max_live=max_live_conversations)
    service = ConversationService(registry)
    config = Config(
        session_api_keys=[] if session_api_key is None else [session_api_key],
        host=host,
        allowed_hosts=tuple(allowed_hosts),
        allowed_origins=tuple(allowed_origins),
        allow_unauthenticated=allow_unauthenticated,
        max_body_size=max_body_size,
        named_conversations=named_conversations,
    )

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
        description=(
            "Request bodies are I-JSON (RFC 7493): a string with an unpaired surrogate "
            "(`\\ud800`), a number that is NaN or infinite, or nesting deeper than 64 levels "
            "cannot be stored, so it is refused with 422 even where the schema allows its type."
        ),
        lifespan=lifespan,
    )
    app.state.registry = registry
    app.state.conversation_service = service
    app.state.config = config
    add_security(
        app,
        bound_host=host,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        max_body_size=max_body_size,
    )
    _add_error_handlers(app)

    @app.get("/health", response_model=HealthResponse, tags=["server"])
    async def health() -> HealthResponse:
        """200 once the server is ready (no session key needed)."""
        return HealthResponse()

    # The same routers OpenHands' tests mount, under /api, behind the session key.
    unauthorized = (401,) if session_api_key is not None else ()
    for router in (conversation_router, event_router, bash_router, file_router):
        app.include_router(
            router,
            prefix="/api",
            # The session key first (an outsider learns nothing), then the request against
            # the published schema, then the route's own validation.
            dependencies=[*_session_dependencies(session_api_key), Depends(check_request)],
            responses=_errors(*unauthorized),
        )
    app.include_router(sockets_router)
    app.add_middleware(_ServerHeader)
    _publish_schema(app, keyed=session_api_key is not None)
    return app


# Every app create_app makes with the same session setting has the same routes, and so the
# same schema: building one takes ~0.4 s of CPU (pydantic's JSON schemas of every model), once
# per process and shape here instead of once per app.
_schemas: dict[tuple[Any, ...], dict[str, Any]] = {}
_schemas_lock = threading.Lock()

# What FastAPI.openapi() reads of the app besides its routes.
_SCHEMA_INPUTS = (
    "title",
    "version",
    "openapi_version",
    "summary",
    "description",
    "terms_of_service",
    "contact",
    "license_info",
    "openapi_tags",
    "servers",
    "separate_input_output_schemas",
    "openapi_external_docs",
)


def _publish_schema(app: FastAPI, *, keyed: bool) -> None:
    """Make ``app.openapi()`` the published schema: FastAPI's, with the id pattern added.

    Call it when ``app`` has its routes (``keyed``: they take a session key). While those
    routes and the app's schema settings are unchanged, the schema is built once per process
    for every app of the same shape, and each app gets its own copy (changing one app's
    schema changes no other's). Routes added later make FastAPI build the schema again.
    """
    build = app.openapi
    made = tuple(app.routes)
    own: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if tuple(app.routes) != made or app.webhooks.routes:
            return _built(build)
        if own:
            return own[0]
        key = (keyed, *(repr(getattr(app, name, None)) for name in _SCHEMA_INPUTS))
        with _schemas_lock:
            shared = _schemas.get(key)
            if shared is None:
                schema = _built(build)
                _schemas[key] = copy.deepcopy(schema)
            else:
                schema = app.openapi_schema = copy.deepcopy(shared)
            own.append(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _built(build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
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


def _version() -> str:
    return __version__


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def malformed(_request: Request, error: RequestValidationError) -> JSONResponse:
        # The default answer echoes the offending input, which may hold an LLM api key.
        detail = [
            {"type": item.get("type"), "loc": list(item.get("loc", ())), "msg": _message(item)}
            for item in error.errors()
        ]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        if isinstance(error, ApiError):  # names the cowconv error: the client raises it again
            content = {"detail": error.detail, "error": error.error}
            return JSONResponse(status_code=error.status_code, content=content)
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
        # What cowconv's own checks refuse in a body, also where they run inside pydantic's
        # validation (a TypeError there is not turned into a ValidationError: it escapes).
        InvalidValueError: 422,
        InvalidTypeError: 422,
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


def _message(item: dict[str, Any]) -> Any:
    """A 422 item's message; for a body that is not JSON, with the decoder's reason (which
    names a position or a rule, never the input)."""
    reason = (item.get("ctx") or {}).get("error")
    if item.get("type") == "json_invalid" and isinstance(reason, str):
        return f"{item.get('msg')}: {reason}"
    return item.get("msg")


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


def _session_dependencies(session_api_key: str | None) -> list[Any]:
    """The dependency that checks ``X-Session-API-Key`` (none without a key)."""
    if session_api_key is None:
        return []
    expected = session_api_key.encode()
    header = APIKeyHeader(name=SESSION_API_KEY_HEADER, auto_error=False)

    # A default, not Annotated[...]: postponed annotations cannot name this local.
    async def check_session_key(given: str | None = Security(header)) -> None:  # noqa: B008
        if given is None or not hmac.compare_digest(given.encode(), expected):
            raise HTTPException(
                status_code=401, detail=f"missing or wrong {SESSION_API_KEY_HEADER} header"
            )

    return [Depends(check_session_key)]


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
